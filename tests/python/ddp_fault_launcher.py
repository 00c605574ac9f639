"""Runs a training script unchanged, after arranging that the worker on one
device sends itself a real signal when it begins one step: a SIGKILL (a
crash) or a SIGSTOP (a hang: the process frozen, its heartbeats stopped).
Once per job: a marker file says the signal was sent, so a worker started
again on that device steps on. With --progress P, each worker appends
"step N T" when it ends a step that counts and "kill T" before its signal (T:
CLOCK_MONOTONIC seconds) to P.dD (D: its device), as the recovery
benchmark's workers do.

usage: ddp_fault_launcher.py [--progress P] KILL|STOP STEP DEVICE MARKER SCRIPT [ARGS...]"""

import os
import runpy
import signal
import sys
import time

import sigma
import torch.distributed as dist

args = sys.argv[1:]
progress = None
if args[0] == "--progress":
    progress, args = args[1], args[2:]
sig = {"KILL": signal.SIGKILL, "STOP": signal.SIGSTOP}[args[0]]
at_step, device, marker, script = int(args[1]), args[2], args[3], args[4]
real_run = sigma.run
log = open(f"{progress}.d{os.environ['SIGMA_DEVICE']}", "a", encoding="utf-8") if progress else None


def note(what):
    if log is not None:
        log.write(f"{what} {time.clock_gettime(time.CLOCK_MONOTONIC):.6f}\n")
        log.flush()


def run(total_steps, step_fn, *args, **kwargs):
    def step(k):
        if k == at_step and os.environ.get("SIGMA_DEVICE") == device and not os.path.exists(marker):
            with open(marker, "w", encoding="utf-8") as f:
                f.write(f"{args[0]} at step {k}\n")
            note("kill")
            os.kill(os.getpid(), sig)
        step_fn(k)
        # A step counts once its all-reduces are done without a failure
        # (sigma.run voids it otherwise, after this returns).
        group = dist.distributed_c10d._get_default_group()
        group._collectives.drain()
        if group.failure is None:
            note(f"step {k}")

    return real_run(total_steps, step, *args, **kwargs)


sigma.run = run
sys.argv = [script] + args[5:]
runpy.run_path(script, run_name="__main__")
