# SPDX-License-Identifier: MIT
"""ddp_job.py STEPS: one rank of a DDP job under ftcc-run (FTCC_RANK, FTCC_POLICY set by
the test): an MLP on synthetic data chosen by step and rank, SGD with momentum, ftcc's comm
hook and TrainState; prints each step's contributors and the final model's digest."""
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist

import ftcc.torch as ft


def batch(step, rank):
    g = torch.Generator().manual_seed(1000003 * step + rank)
    return torch.randn(16, 32, generator=g), torch.randn(16, 4, generator=g)


def main():
    steps = int(sys.argv[1])
    rank, size = int(os.environ["FTCC_RANK"]), int(os.environ["FTCC_WORLD_SIZE"])
    ft.init_process_group()
    print(f"pid {os.getpid()}", flush=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.002)
    net.register_comm_hook(None, ft.average_over_contributors)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    state = ft.TrainState(model, opt)
    x0, _ = batch(0, rank)
    start = state.resume(warmup=lambda: net(x0).sum().backward())
    if start:
        print(f"rejoined at step {start}", flush=True)
    for step in range(start, steps):
        state.save(step)
        x, y = batch(step, rank)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        info = ft.last_op()
        print(f"step {step} contributors {info.contributors} members {len(info.members)}",
              flush=True)
        time.sleep(0.01)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()] +
                     [b.reshape(-1) for b in opt.state_dict()["state"][0].values()
                      if torch.is_tensor(b)])
    print("model " + hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16], flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
