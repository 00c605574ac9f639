"""The recovery benchmark's job under torchrun: the same shape as
tests/runtime/runtime_worker.cpp (data-parallel SGD with momentum on a
4096-float state, one gloo all-reduce per step), checkpointed with
torch.save every CKPT_EVERY steps, the way a torchrun user recovers.

  torchrun ... torchrun_worker.py STEPS STEP_MS CKPT_EVERY CKPT_DIR LOG_PREFIX KILL_STEP KILL_RANK SIGNAL [PG_TIMEOUT_S]

PG_TIMEOUT_S: the process group's timeout (torch's default, 30 minutes,
when absent): a collective that waits longer for a peer raises, the worker
exits with an error and torchrun restarts the job. It is what bounds a hang.

The process of rank KILL_RANK sends itself SIGNAL (KILL or STOP) when it
starts step KILL_STEP in the first incarnation of the job only. Each process
appends "step N T" / "kill T" (T: CLOCK_MONOTONIC seconds) to LOG_PREFIX.rR.
"""
import datetime
import math
import os
import signal
import sys
import time

import torch
import torch.distributed as dist


def main():
    steps, step_ms, ckpt_every = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    ckpt_dir, log_prefix = sys.argv[4], sys.argv[5]
    kill_step, kill_rank = int(sys.argv[6]), int(sys.argv[7])
    sig = signal.SIGSTOP if sys.argv[8] == "STOP" else signal.SIGKILL
    dist.init_process_group("gloo")
    group = None
    if len(sys.argv) > 9:
        # The short timeout applies to training's collectives, not to the
        # start-up rendezvous (two Python processes importing torch can be
        # seconds apart).
        group = dist.new_group(timeout=datetime.timedelta(seconds=float(sys.argv[9])))
    rank, world = dist.get_rank(), dist.get_world_size()
    first = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    n = 4096
    params = 0.5 * torch.sin(0.001 * torch.arange(n, dtype=torch.float32))
    momentum = torch.zeros(n)
    start = 0
    path = os.path.join(ckpt_dir, "rank%d.pt" % rank)
    if os.path.exists(path):
        state = torch.load(path)
        params, momentum, start = state["params"], state["momentum"], state["step"]
    log = open("%s.r%d" % (log_prefix, rank), "a")
    for step in range(start, steps):
        if first and step == kill_step and rank == kill_rank:
            log.write("kill %.6f\n" % time.clock_gettime(time.CLOCK_MONOTONIC))
            log.flush()
            os.kill(os.getpid(), sig)
        grad = 0.01 * torch.sin(params * 3.0 + 0.01 * step + 0.1 * rank)
        if step_ms > 0:
            time.sleep(step_ms / 1000.0)
        dist.all_reduce(grad, group=group)
        momentum = 0.9 * momentum + grad / world
        params = params - 0.1 * momentum
        log.write("step %d %.6f\n" % (step, time.clock_gettime(time.CLOCK_MONOTONIC)))
        log.flush()
        if (step + 1) % ckpt_every == 0:
            tmp = path + ".tmp"
            torch.save({"params": params, "momentum": momentum, "step": step + 1}, tmp)
            os.replace(tmp, path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
