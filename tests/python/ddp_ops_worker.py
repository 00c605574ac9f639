"""A worker for test_ddp: every collective DistributedDataParallel issues,
on the sigma backend under sigmarun or on torch's gloo backend under
torchrun, with the same inputs. Each rank saves what the ops gave
(ops-rank-R.pt) for the test to compare bit for bit; on the sigma backend
it also writes which ops torch called (called-rank-R.json) and checks that
a second Python thread runs while a collective waits.

usage: ddp_ops_worker.py sigma|gloo OUT_DIR"""

import functools
import json
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

backend, out_dir = sys.argv[1], sys.argv[2]
called = []
if backend == "sigma":
    import sigma
    from sigma.distributed import ProcessGroup

    def spied(name, op):
        @functools.wraps(op)
        def spy(self, *args, **kwargs):
            called.append(name)
            return op(self, *args, **kwargs)

        return spy

    for name in ("allreduce", "broadcast", "allgather", "barrier", "reduce_scatter"):
        setattr(ProcessGroup, name, spied(name, getattr(ProcessGroup, name)))
    session = sigma.init_process_group()
else:
    dist.init_process_group("gloo")
torch.set_num_threads(1)
rank, world = dist.get_rank(), dist.get_world_size()
results = {}


def direct_ops():
    """Each op on its own, every reduce op and a few dtypes."""
    for dtype in (torch.float32, torch.float64, torch.int64):
        for name in ("SUM", "PRODUCT", "MIN", "MAX"):
            g = torch.Generator().manual_seed(10 * rank + 1)
            t = (torch.randn(1000, generator=g) * 7).to(dtype)
            dist.all_reduce(t, getattr(dist.ReduceOp, name))
            results[f"all_reduce/{dtype}/{name}"] = t
    b = torch.arange(12, dtype=torch.float32) * (rank + 1)
    dist.broadcast(b, src=world - 1)
    results["broadcast"] = b
    outs = [torch.empty(3, dtype=torch.int32) for _ in range(world)]
    dist.all_gather(outs, torch.tensor([rank, rank * 10, -rank], dtype=torch.int32))
    results["all_gather"] = torch.stack(outs)
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "name": f"r{rank}"})
    results["all_gather_object"] = torch.tensor([o["rank"] for o in objs])
    dist.barrier()


class Net(torch.nn.Module):
    """A batch norm (buffers DDP broadcasts every forward), and a branch
    used on even steps only (DDP's unused-parameter map)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 64)
        self.bn = torch.nn.BatchNorm1d(64)
        self.fc2 = torch.nn.Linear(64, 4)
        self.side = torch.nn.Linear(64, 4)

    def forward(self, x, step):
        h = torch.relu(self.bn(self.fc1(x)))
        return self.fc2(h) + (self.side(h) if step % 2 == 0 else 0)


def ddp_runs():
    """Four steps each of DDP as scripts use it: default buckets, small
    buckets (several per backward, rebuilt after the first), unused
    parameters found, gradient accumulation under no_sync."""
    configs = {
        "default": dict(find_unused_parameters=True),
        "small-buckets": dict(find_unused_parameters=True, bucket_cap_mb=0.002),
        "no-sync": dict(find_unused_parameters=True),
    }
    for name, kwargs in configs.items():
        torch.manual_seed(rank)  # every rank starts apart: DDP broadcasts rank 0's
        model = DDP(Net(), **kwargs)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            g = torch.Generator().manual_seed(100 * step + rank)
            x = torch.randn(8, 16, generator=g)
            opt.zero_grad()
            if name == "no-sync":
                with model.no_sync():
                    model(x, step).square().mean().backward()
            model(x, step).square().mean().backward()
            for p_name, p in model.module.named_parameters():
                if p.grad is not None:
                    results[f"ddp/{name}/{step}/grad/{p_name}"] = p.grad.clone()
            opt.step()
        for k, v in model.module.state_dict().items():
            results[f"ddp/{name}/final/{k}"] = v.clone()


def gil_free_while_waiting():
    """Rank 0 waits in an all-reduce for rank 1, which comes 1 s late; a
    second thread of rank 0 keeps counting meanwhile."""
    ticks, stop = [], threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    dist.barrier()
    if rank == 1:
        time.sleep(1.0)
    counter = threading.Thread(target=count)
    counter.start()
    t0 = time.monotonic()
    dist.all_reduce(torch.ones(8))
    t1 = time.monotonic()
    stop.set()
    counter.join()
    if rank == 0:
        during = sum(1 for x in ticks if t0 < x < t1)
        print(f"gil: {during} ticks of a second thread while waiting {t1 - t0:.2f} s", flush=True)
        assert t1 - t0 > 0.3, f"rank 0 did not wait ({t1 - t0:.2f} s)"
        assert during > 20, f"{during} ticks in {t1 - t0:.2f} s: the GIL was held"


direct_ops()
ddp_runs()
torch.save(results, os.path.join(out_dir, f"ops-rank-{rank}.pt"))
if backend == "sigma":
    gil_free_while_waiting()
    with open(os.path.join(out_dir, f"called-rank-{rank}.json"), "w", encoding="utf-8") as f:
        json.dump(called, f)
    # No training loop here: the job is told it ended (the state is the
    # empty one; the collectives above ran before join, as a fresh start's
    # may).
    session.join()
    session.finish(0)
dist.destroy_process_group()
