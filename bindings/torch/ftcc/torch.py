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
import torch.distributed as dist

from . import _C

__all__ = ["last_op", "members", "average_over_contributors", "ProcessGroupFtcc"]

ProcessGroupFtcc = _C.ProcessGroupFtcc


def _create(store, rank, size, timeout):
    return _C.ProcessGroupFtcc(store, rank, size, timeout)


if "FTCC" not in dist.Backend._plugins:
    dist.Backend.register_backend("ftcc", _create)


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
