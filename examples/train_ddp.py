#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""train_ddp.py: DDP on Fashion-MNIST over ftcc, surviving a killed rank (make torch-demo).

    ftcc-run -n 4 [--restart] /usr/bin/python3 examples/train_ddp.py [--steps N]
        [--kill-rank R --kill-step S] [--curve FILE]

An MLP (784-128-10), SGD with momentum, DDP with ftcc's comm hook (the
average over the ranks that contributed), the state a restarted rank takes
back (ftcc.torch.TrainState). Each step every rank trains on its own 64
images of a permutation chosen by the step, read by a DataLoader whose two
worker processes fork after the group exists. --kill-rank R --kill-step S:
rank R's first incarnation SIGKILLs itself as step S begins. Prints the
test accuracy and a digest of the model and optimizer state (rank 0 also
writes each step's loss to --curve). Data: Debian's dataset-fashion-mnist.
"""
import argparse
import gzip
import hashlib
import os
import signal

import torch
import torch.distributed as dist

import ftcc.torch as ft

DATA = "/usr/share/datasets/fashion-mnist"
BATCH = 64


def load(kind):
    with gzip.open(f"{DATA}/{kind}-images-idx3-ubyte.gz") as f:
        x = torch.frombuffer(bytearray(f.read()[16:]), dtype=torch.uint8)
    with gzip.open(f"{DATA}/{kind}-labels-idx1-ubyte.gz") as f:
        y = torch.frombuffer(bytearray(f.read()[8:]), dtype=torch.uint8)
    return x.view(-1, 784).float() / 255.0, y.long()


class Steps(torch.utils.data.Dataset):
    """Item s: this rank's batch of step s (a function of step and rank alone)."""

    def __init__(self, x, y, rank, size):
        self.x, self.y, self.rank, self.size = x, y, rank, size

    def __len__(self):
        return 1 << 30

    def __getitem__(self, step):
        per_epoch = len(self.x) // (BATCH * self.size)
        g = torch.Generator().manual_seed(step // per_epoch)
        perm = torch.randperm(len(self.x), generator=g)
        at = ((step % per_epoch) * self.size + self.rank) * BATCH
        idx = perm[at:at + BATCH]
        return self.x[idx], self.y[idx]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--kill-rank", type=int, default=-1)
    ap.add_argument("--kill-step", type=int, default=-1)
    ap.add_argument("--curve", default="")
    a = ap.parse_args()
    ft.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ddp.register_comm_hook(None, ft.average_over_contributors)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    state = ft.TrainState(model, opt)
    xtr, ytr = load("train")
    sample = xtr[:BATCH]
    start = state.resume(warmup=lambda: ddp(sample).sum().backward())
    if start:
        print(f"rank {rank} rejoined at step {start}", flush=True)
    loader = torch.utils.data.DataLoader(Steps(xtr, ytr, rank, size), batch_size=None,
                                         sampler=range(start, a.steps), num_workers=2)
    curve = open(a.curve, "a") if a.curve and rank == 0 else None
    first = os.environ.get("FTCC_INCARNATION", "0") == "0"
    for step, (x, y) in zip(range(start, a.steps), loader):
        if rank == a.kill_rank and step == a.kill_step and first:
            print(f"rank {rank}: SIGKILL at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        state.save(step)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        if curve:
            info = ft.last_op()
            curve.write(f"{step} {loss.item():.5f} {info.contributors}\n")
    xte, yte = load("t10k")
    with torch.no_grad():
        acc = (model(xte).argmax(1) == yte).float().mean().item() * 100
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()] +
                     [opt.state[p]["momentum_buffer"].reshape(-1) for p in model.parameters()])
    digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16]
    info = ft.last_op()
    print(f"rank {rank}: accuracy {acc:.2f} digest {digest} members {len(info.members)}",
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
