"""bench_ddp.py's worker: DistributedDataParallel steps of an MLP (eight
1024x1024 layers, 8.4 M parameters, 34 MB of gradients a step, one thread
per rank), timed after a warm-up on rank 0, on torch's gloo backend under
torchrun or on the sigma backend under sigmarun.

  ddp_step_worker.py gloo|sigma|sigma-run STEPS WARMUP OUT_JSON

sigma-run runs the steps in sigma.run (memory-tier snapshots each step, as
a script adopting libsigma does); sigma is the backend alone in a plain
loop, as gloo is (the session joined and finished after it, with no state
registered)."""

import json
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

mode, steps, warmup, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if mode == "gloo":
    dist.init_process_group("gloo")
else:
    import sigma

    session = sigma.init_process_group()
torch.set_num_threads(1)
torch.manual_seed(0)
rank = dist.get_rank()
layers = []
for _ in range(8):
    layers += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
model = DDP(torch.nn.Sequential(*layers))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(64, 1024)
marks = {}


def train_step(step):
    if step == warmup:
        marks["t0"] = time.perf_counter()
    optimizer.zero_grad()
    model(x).square().mean().backward()
    optimizer.step()
    if step == steps - 1:
        marks["t1"] = time.perf_counter()


if mode == "sigma-run":
    sigma.run(steps, train_step, model, optimizer)
else:
    for k in range(steps):
        train_step(k)
    if mode == "sigma":  # the job ends as it would after a loop of its own
        session.join()
        session.finish(steps)
if rank == 0:
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"step_s": (marks["t1"] - marks["t0"]) / (steps - warmup)}, f)
dist.destroy_process_group()
