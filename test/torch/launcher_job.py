# SPDX-License-Identifier: MIT
"""launcher_job.py [STORE]: one rank under torchrun (env://) or mpirun (file://STORE, Open MPI's
rank variables): an all_reduce over ftcc checked, then "rank R of N ok"."""
import os
import sys

import torch
import torch.distributed as dist

import ftcc.torch  # noqa: F401  (registers the backend)

if "OMPI_COMM_WORLD_RANK" in os.environ:
    rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    dist.init_process_group("ftcc", init_method="file://" + sys.argv[1], rank=rank,
                            world_size=size)
else:
    dist.init_process_group("ftcc", init_method="env://")
    rank, size = dist.get_rank(), dist.get_world_size()
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
assert torch.all(t == size * (size + 1) / 2), t[0]
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} of {size} ok", flush=True)
