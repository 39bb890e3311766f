# SPDX-License-Identifier: MIT
"""torch_bench.py BACKEND STORE SIZES ITERS: one rank of `make bench-torch` (scripts/bench-torch.sh).

Under ftcc-run (FTCC_RANK, FTCC_WORLD_SIZE): torch.distributed.all_reduce,
in place, float32 sum, through BACKEND (gloo or ftcc), ITERS timed calls per
size after a warm-up, each call between two barriers' worth of skew (a
barrier first); then a DDP step (an MLP, 784-512-10, 64 samples a rank).
Rank 0 prints CSV rows: backend,ranks,what,bytes,median_us.
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


def main():
    backend, store, sizes, iters = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4]
    rank, size = int(os.environ["FTCC_RANK"]), int(os.environ["FTCC_WORLD_SIZE"])
    if backend == "ftcc":
        import ftcc.torch  # noqa: F401  (registers the backend)
    dist.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=size)
    torch.set_num_threads(1)
    for s in sizes:
        nbytes = int(s[:-1]) << {"K": 10, "M": 20}[s[-1]] if s[-1] in "KM" else int(s)
        t = torch.ones(nbytes // 4)
        n = max(5, min(int(iters), int(200 * (1 << 20) / max(nbytes, 1 << 10)) // 10))
        times = []
        for k in range(n + 3):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            if k >= 3:
                times.append((time.perf_counter() - t0) * 1e6)
        if rank == 0:
            print(f"{backend},{size},allreduce,{nbytes},{statistics.median(times):.1f}", flush=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    net = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))
    times = []
    for k in range(33):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        if k >= 3:
            times.append((time.perf_counter() - t0) * 1e6)
    if rank == 0:
        nparams = sum(p.numel() for p in model.parameters())
        print(f"{backend},{size},ddp_step,{4 * nparams},{statistics.median(times):.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
