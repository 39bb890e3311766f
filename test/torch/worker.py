# SPDX-License-Identifier: MIT
"""worker.py SCENARIO RANK SIZE STORE: one rank of a pytest job (test_torch.py) on the ftcc backend.

Each scenario checks what it does against a reference computed here, and
exits 0 only when every check passed; a failed check raises (exit 1).
"""
import os
import sys

import torch
import torch.distributed as dist

import ftcc.torch as ft

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
          torch.uint8]
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}


def value(r, n, dtype):
    """Rank r's input: small values whose sums and products stay exact in every dtype."""
    return (torch.arange(n) % 3 + r + 1).to(dtype)


def reference(op, size, n, dtype):
    xs = [value(r, n, torch.float64) for r in range(size)]
    if op == dist.ReduceOp.SUM:
        out = sum(xs)
    elif op == dist.ReduceOp.PRODUCT:
        out = xs[0].clone()
        for x in xs[1:]:
            out = out * x
    elif op == dist.ReduceOp.MIN:
        out = torch.stack(xs).min(0).values
    elif op == dist.ReduceOp.MAX:
        out = torch.stack(xs).max(0).values
    else:
        out = sum(xs) / size
    return out.to(dtype)


def close(a, b, dtype):
    if dtype in FLOATS:
        return torch.allclose(a.double(), b.double(), rtol=1e-2, atol=1e-2)
    return torch.equal(a, b)


def init(rank, size, store, seconds=60):
    import datetime
    late = os.environ.get("WORKER_LATE", "")  # "R:S": rank R makes its group S seconds late
    if late and int(late.split(":")[0]) == rank:
        import time
        plugin = dist.Backend._plugins["FTCC"]

        def slow(*args):
            time.sleep(float(late.split(":")[1]))
            return plugin.creator_fn(*args)
        dist.Backend._plugins["FTCC"] = plugin._replace(creator_fn=slow)
    url = store if store.startswith("tcp://") else "file://" + store
    dist.init_process_group("ftcc", init_method=url, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=seconds))


def ops(rank, size):
    n = 37
    for dtype in DTYPES:
        for op in [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX,
                   dist.ReduceOp.AVG]:
            if op == dist.ReduceOp.AVG and dtype not in FLOATS:
                continue
            if op == dist.ReduceOp.PRODUCT and dtype == torch.uint8 and size > 3:
                continue  # 3^4 overflows a byte
            t = value(rank, n, dtype)
            dist.all_reduce(t, op=op)
            want = reference(op, size, n, dtype)
            assert close(t, want, dtype), f"all_reduce {op} {dtype}: {t} != {want}"
            # non-contiguous: every other element of a 2-D tensor's column
            big = torch.zeros(n, 2, dtype=dtype)
            big[:, 0] = value(rank, n, dtype)
            col = big[:, 0]
            assert not col.is_contiguous()
            dist.all_reduce(col, op=op)
            assert close(big[:, 0], want, dtype), f"non-contiguous all_reduce {op} {dtype}"
            assert torch.count_nonzero(big[:, 1]) == 0, "non-contiguous: the rest was touched"
        # broadcast from every root
        for root in range(size):
            t = value(rank, n, dtype)
            dist.broadcast(t, src=root)
            assert torch.equal(t, value(root, n, dtype)), f"broadcast {dtype} from {root}"
        # all_gather into a list, and into one tensor
        outs = [torch.zeros(n, dtype=dtype) for _ in range(size)]
        dist.all_gather(outs, value(rank, n, dtype))
        for r in range(size):
            assert torch.equal(outs[r], value(r, n, dtype)), f"all_gather {dtype} block {r}"
        flat = torch.zeros(size * n, dtype=dtype)
        dist._all_gather_base(flat, value(rank, n, dtype))
        for r in range(size):
            assert torch.equal(flat[r * n:(r + 1) * n], value(r, n, dtype)), "all_gather base"
        # reduce_scatter from a list, and from one tensor
        ins = [value(rank, n, dtype) + r for r in range(size)]
        out = torch.zeros(n, dtype=dtype)
        dist.reduce_scatter(out, ins)
        want = sum((value(q, n, torch.float64) + rank) for q in range(size)).to(dtype)
        assert close(out, want, dtype), f"reduce_scatter {dtype}: {out} != {want}"
        out2 = torch.zeros(n, dtype=dtype)
        dist._reduce_scatter_base(out2, torch.cat(ins))
        assert close(out2, want, dtype), f"reduce_scatter base {dtype}"
    dist.barrier()
    info = ft.last_op()
    assert info.contributors == size and ft.members() == list(range(size)), info


def asynchronous(rank, size):
    works, ts = [], []
    for k in range(8):
        t = torch.full((1000,), float(rank + k))
        ts.append(t)
        works.append(dist.all_reduce(t, async_op=True))
    futs = [w.get_future() for w in works[4:]]
    for w in reversed(works[:4]):
        w.wait()
    torch.futures.wait_all(futs)
    for k, t in enumerate(ts):
        want = sum(float(r + k) for r in range(size))
        assert torch.all(t == want), f"async op {k}: {t[0]} != {want}"


def mismatch(rank, size):
    t = torch.ones(10 + rank)  # counts differ across ranks
    try:
        dist.all_reduce(t)
    except RuntimeError as e:
        assert "ftcc" in str(e), e
        print(f"rank {rank}: mismatch raised: {e}")
    else:
        raise AssertionError("an all_reduce whose counts differ across ranks returned")
    t = torch.ones(4)  # the group still works
    dist.all_reduce(t)
    assert torch.all(t == size)


def refused(rank, size):
    for bad, what in [(torch.empty(3, device="meta"), "CPU"),
                      (torch.ones(3, dtype=torch.bool), "not supported")]:
        try:
            dist.all_reduce(bad)
        except (RuntimeError, ValueError) as e:
            assert what in str(e), e
        else:
            raise AssertionError(f"{bad.device} {bad.dtype} was taken")
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.BAND)
    except (RuntimeError, ValueError) as e:
        assert "reduce op" in str(e), e
    else:
        raise AssertionError("BAND was taken")
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.all(t == size)


def loader(rank, size):
    data = torch.utils.data.TensorDataset(torch.arange(64, dtype=torch.float32))
    dl = torch.utils.data.DataLoader(data, batch_size=8, num_workers=2)  # forks now
    total = torch.zeros(1)
    for (x,) in dl:
        total += x.sum()
    dist.all_reduce(total)
    assert total.item() == size * sum(range(64)), total


def timeout(rank, size):
    """init_process_group's timeout bounds an op that a rank never joins."""
    import time
    if rank == 1:
        time.sleep(8)
        return
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(3))
    except RuntimeError as e:
        took = time.monotonic() - t0
        assert took < 7, f"raised after {took:.1f} s"
        print(f"rank {rank}: timed out after {took:.1f} s: {e}")
    else:
        raise AssertionError("an op that rank 1 never joined returned")


def ddp(rank, size):
    """DDP (broadcast at construction, an allreduce per bucket through futures), with
    ftcc's hook and without: every rank ends with the model of one process that
    trained on the whole batch."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    torch.manual_seed(1 + rank)  # different initial models: DDP's broadcast evens them
    for hook in (False, True):
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 2))
        net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.0001)
        if hook:
            net.register_comm_hook(None, ft.average_over_contributors)
        single = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                     torch.nn.Linear(16, 2))
        single.load_state_dict({k: v.clone() for k, v in model.state_dict().items()})
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        opt1 = torch.optim.SGD(single.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(7)
        for step in range(3):
            x = torch.randn(4 * size, 8, generator=g)
            y = torch.randn(4 * size, 2, generator=g)
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(x[4 * rank:4 * rank + 4]),
                                         y[4 * rank:4 * rank + 4]).backward()
            opt.step()
            opt1.zero_grad()
            torch.nn.functional.mse_loss(single(x), y).backward()
            opt1.step()
        for (k, a), b in zip(model.state_dict().items(), single.state_dict().values()):
            assert torch.allclose(a, b, atol=1e-5), f"hook={hook}: {k} differs from one process's"
        del net
    del ref


SCENARIOS = {"ops": ops, "timeout": timeout, "ddp": ddp, "async": asynchronous, "mismatch": mismatch, "refused": refused,
             "loader": loader}


def main():
    what, rank, size, store = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    if what == "reinit":
        for k in range(2):
            init(rank, size, f"{store}.{k}")
            t = torch.ones(5) * (k + 1)
            dist.all_reduce(t)
            assert torch.all(t == size * (k + 1)), t
            dist.destroy_process_group()
    elif what == "timeout":
        init(rank, size, store, seconds=3)
        timeout(rank, size)
        print(f"rank {rank}: {what} ok", flush=True)
        os._exit(0)  # rank 0's communicator is broken: no goodbye to wait for
    else:
        init(rank, size, store)
        SCENARIOS[what](rank, size)
        dist.destroy_process_group()
    print(f"rank {rank}: {what} ok", flush=True)


if __name__ == "__main__":
    main()
