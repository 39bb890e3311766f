# SPDX-License-Identifier: MIT
"""ftcc.torch: ftcc as a torch.distributed backend.

    import ftcc.torch
    torch.distributed.init_process_group("ftcc", ...)

Importing this module registers the backend "ftcc". Ops run in order on a
worker thread (every call returns a Work at once; async_op, wait() and
get_future() work as with Gloo). Under FTCC_POLICY=shrink an op that lost a
rank completes among the survivors: last_op() says how many contributed and
members() who is left; average_over_contributors is the DDP comm hook that
averages over them (DDP's own divides by the world size the group began
with). Only CPU tensors.
"""
import torch
import torch.distributed as dist

from . import _C

__all__ = ["init_process_group", "last_op", "members", "average_over_contributors", "TrainState",
           "ProcessGroupFtcc"]

ProcessGroupFtcc = _C.ProcessGroupFtcc


def _create(store, rank, size, timeout):
    return _C.ProcessGroupFtcc(store, rank, size, timeout)


if "FTCC" not in dist.Backend._plugins:
    if _C.TORCH_BASE == "c10d::Backend":  # PyTorch 2.x: a backend per device type
        dist.Backend.register_backend("ftcc", _create, devices=["cpu"])
    else:
        dist.Backend.register_backend("ftcc", _create)


def init_process_group(timeout=None):
    """The default group over ftcc for a job that ftcc-run (or FTCC_RANK and the
    rest of ftcc's environment) started: no torch store is needed, since ftcc
    settles its own membership. It also lets a process that ftcc-run restarted
    (rejoin) in: PyTorch 1.13's init_process_group ends in a barrier on the
    store counting world_size arrivals, which a new incarnation, alone, never
    completes; here that count is the job's already (ft_init's own barrier is
    the one that matters). Elsewhere use torch.distributed.init_process_group
    with backend "ftcc" and any init_method."""
    import datetime
    import os
    rank, size = int(os.environ["FTCC_RANK"]), int(os.environ["FTCC_WORLD_SIZE"])
    store = dist.HashStore()
    # the default group's barrier key, as 1.13 names it for a store given to it
    # (distributed_c10d._store_based_barrier)
    store.add(f"{dist.distributed_c10d.STORE_BASED_BARRIER_PREFIX}:1", size - 1)
    kw = {"timeout": timeout} if timeout is not None else {}
    if "timeout" not in kw:
        kw["timeout"] = datetime.timedelta(minutes=30)
    dist.init_process_group("ftcc", store=store, rank=rank, world_size=size, **kw)


def _group(group):
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, _C.ProcessGroupFtcc):
        raise TypeError(f"not an ftcc process group: {type(pg).__name__}")
    return pg


def last_op(group=None):
    """What the group's last completed op did: op_seq, generation, contributors,
    failed (ranks lost during it), recovery_ms, members (the torch ranks left)."""
    return _group(group).last_op()


def members(group=None):
    """The torch ranks in the group's current membership."""
    return list(_group(group).last_op().members)


def average_over_contributors(process_group, bucket):
    """DDP comm hook: the gradients' average over the ranks whose inputs the
    sum holds (ftcc's AVG), not over the world size the group began with.

        ddp.register_comm_hook(None, ftcc.torch.average_over_contributors)
    """
    group = process_group if process_group is not None else dist.group.WORLD
    work = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.AVG, group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def _materialize(optimizer):
    """Creates the optimizer's per-parameter state now, as its first step would
    (every rank must register the same state before that step): SGD's momentum
    buffers, Adam's and AdamW's moments and step."""
    if optimizer is None:
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            st = optimizer.state[p]
            if st:
                continue
            if isinstance(optimizer, torch.optim.SGD):
                if group.get("momentum", 0) != 0:
                    if group.get("dampening", 0) != 0:
                        raise NotImplementedError("ftcc.torch.TrainState: SGD with dampening")
                    st["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            elif isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
                st["step"] = torch.tensor(0.0)
                st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if group.get("amsgrad"):
                    st["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            else:
                raise NotImplementedError(
                    f"ftcc.torch.TrainState: {type(optimizer).__name__}'s state is made lazily; "
                    "SGD, Adam and AdamW are known")


class TrainState:
    """What a restarted rank takes back from a survivor (FTCC_POLICY=rejoin).

    Every rank makes one, after the model (and its DDP) and the optimizer:

        state = ftcc.torch.TrainState(model, optimizer)
        start = state.resume(warmup=lambda: ddp(sample).sum().backward())
        for step in range(start, steps):
            state.save(step)          # before the step's first collective
            ...forward, backward, optimizer.step()...

    It holds the parameters, buffers and optimizer state (made now, not
    lazily) and the step, packed into one region registered with ftcc
    (ft_state_register). A process that rejoined a running job started its
    group quiet: its collectives so far (DDP's construction, and warmup run
    twice here: DDP's first two iterations, which rebuild its buckets) used
    its own values, because the survivors are past them. resume() then takes
    the state the survivors held as they entered the collective this process
    calls next (ft_state_sync), unpacks it and returns the step to run; on
    every other process it returns 0. Steps must follow from this state
    alone (data chosen by step and rank), so that the restarted rank's input
    is the one its first incarnation gave: the job's result is then
    bit-identical to a run where nothing failed.
    """

    def __init__(self, module, optimizer=None, group=None):
        self.pg = _group(group)
        self.module = module
        _materialize(optimizer)
        tensors = [p.data for p in module.parameters()] + list(module.buffers())
        if optimizer is not None:
            for group_ in optimizer.param_groups:
                for p in group_["params"]:
                    st = optimizer.state[p]
                    tensors += [st[k] for k in sorted(st) if torch.is_tensor(st[k])]
        for t in tensors:
            if not t.is_contiguous():
                raise ValueError("ftcc.torch.TrainState: non-contiguous state")
        self._tensors = tensors
        total = sum(t.numel() * t.element_size() for t in tensors)
        self._flat = torch.zeros(max(total, 1), dtype=torch.uint8)
        self.step = torch.zeros(1, dtype=torch.int64)
        self.pg.register_state(self._flat)
        self.pg.register_state(self.step)

    def _views(self):
        off = 0
        for t in self._tensors:
            n = t.numel() * t.element_size()
            yield t, self._flat[off:off + n]
            off += n

    def save(self, step):
        """The state as the step begins: call it before the step's first collective."""
        self.step[0] = step
        for t, v in self._views():
            v.copy_(t.reshape(-1).view(dtype=torch.uint8))

    def resume(self, warmup=None):
        """0, or on a process that rejoined, the step to run (see the class)."""
        rejoined, _ = self.pg.rejoined()
        if rejoined and warmup is not None:
            for _ in range(2):
                warmup()
            self.module.zero_grad(set_to_none=True)
        self.pg.resume()
        if not rejoined:
            return 0
        for t, v in self._views():
            t.reshape(-1).view(dtype=torch.uint8).copy_(v)
        return int(self.step.item())
