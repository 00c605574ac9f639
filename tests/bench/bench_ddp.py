"""DDP on the sigma backend against torch's gloo backend, one run, side by
side, on this machine:

1. Step time: ddp_step_worker.py (8.4 M parameters, 34 MB of gradients a
   step, 2 ranks, one thread each: the same model and threads on every
   side) under torchrun on gloo, under sigmarun on the sigma backend in a
   plain loop (the backend alone), and under sigmarun in sigma.run
   (memory-tier snapshots every step, as the DDP sample runs, and every 10
   steps). Every worker has OMP_NUM_THREADS=1, as torchrun sets it. Rounds
   rotate the order; medians of ROUNDS. The ratio is gloo's step time over
   the other's (1.0: as fast as gloo).
2. Time back at work after a SIGKILL, the recovery benchmark's settings
   (bench_recovery.cpp): 2 ranks, the worker on device 1 killed as it
   begins step 50 of 150, sigmarun with one warm spare, snapshots every
   step and a 1 s heartbeat timeout, running samples/python/train_ddp_sigma.py
   unchanged (tests/python/ddp_fault_launcher.py sends the signal); against
   torchrun at its best (--monitor_interval 0.1, torch.save every step, a 1 s
   process-group timeout) running the recovery benchmark's own torchrun
   worker. Measured from the kill (logged just before the signal, on
   CLOCK_MONOTONIC) until a rank ends the step the kill interrupted.

    PYTHONPATH=build/default/python SIGMARUN=build/default/bin/sigmarun \\
      SIGMA_HAL_PLUGIN_PATH=build/default/lib/sigma/plugins \\
      /usr/bin/python3 tests/bench/bench_ddp.py
"""

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SIGMARUN = os.environ.get("SIGMARUN", os.path.join(ROOT, "build", "default", "bin", "sigmarun"))
PY = sys.executable
ROUNDS, STEPS, WARMUP = 3, 40, 5
KILL_STEP, TOTAL = 50, 150


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(d, args, extra=()):
    cmd = [PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           "--redirects", "2", "--tee", "2", "--log_dir", os.path.join(d, "logs"), *extra, *args]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)


def sigmarun(d, args, extra=()):
    # The threads torchrun gives each worker (OMP_NUM_THREADS=1, which
    # OpenBLAS reads too): the same on both sides.
    cmd = [SIGMARUN, "--nproc", "2", "--spares", "1", "--job-dir", os.path.join(d, "job"), "--no-progress",
           *extra, "--", PY, *args]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, env=env)


def step_time(mode):
    """One run's seconds per step; mode "sigma-run/N" snapshots every N steps."""
    worker_mode, _, every = mode.partition("/")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        args = [os.path.join(HERE, "ddp_step_worker.py"), worker_mode, str(STEPS), str(WARMUP), out]
        if mode == "gloo":
            torchrun(d, args)
        else:
            sigmarun(d, args, ["--snapshot-every", every] if every else [])
        with open(out, encoding="utf-8") as f:
            return json.load(f)["step_s"]


def back_at_work(d, stem):
    """bench_recovery.cpp's measure over `stem`.* logs: seconds from the
    kill to the first end of the interrupted step or a later one."""
    kill_t, logs = None, []
    for name in os.listdir(d):
        if not name.startswith(stem + "."):
            continue
        with open(os.path.join(d, name), encoding="utf-8") as f:
            lines = [line.split() for line in f if line.strip()]
        kill_t = next((float(w[1]) for w in lines if w[0] == "kill"), kill_t)
        logs.append([(float(w[2]), int(w[1])) for w in lines if w[0] == "step"])
    killed = 1 + max(n for log in logs for t, n in log if t < kill_t)
    return min(t for log in logs for t, n in log if t >= kill_t and n >= killed) - kill_t


def recovery_sigma():
    with tempfile.TemporaryDirectory() as d:
        progress = os.path.join(d, "progress")
        launcher = os.path.join(ROOT, "tests", "python", "ddp_fault_launcher.py")
        sample = os.path.join(ROOT, "samples", "python", "train_ddp_sigma.py")
        sigmarun(d, [launcher, "--progress", progress, "KILL", str(KILL_STEP), "1", os.path.join(d, "marker"),
                     sample, "--steps", str(TOTAL)], ["--heartbeat-timeout", "1"])
        return back_at_work(d, "progress")


def recovery_torchrun():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "ckpt"))
        worker = os.path.join(HERE, "torchrun_worker.py")
        torchrun(d, [worker, str(TOTAL), "10", "1", os.path.join(d, "ckpt"), os.path.join(d, "progress"),
                     str(KILL_STEP), "1", "KILL", "1"], ["--max_restarts", "3", "--monitor_interval", "0.1"])
        return back_at_work(d, "progress")


def main():
    modes = ["gloo", "sigma", "sigma-run", "sigma-run/10"]
    times = {m: [] for m in modes}
    for r in range(ROUNDS):
        for m in modes[r % len(modes) :] + modes[: r % len(modes)]:
            times[m].append(step_time(m))
    gloo = statistics.median(times["gloo"])
    print(f"DDP step time, medians of {ROUNDS} rounds of {STEPS - WARMUP} steps (2 ranks, 1 thread each)")
    print(f"{'backend':<34}{'step ms':>9}{'rate vs gloo':>14}")
    names = {"gloo": "torch gloo (torchrun)", "sigma": "sigma backend, plain loop",
             "sigma-run": "sigma.run, snapshot every step", "sigma-run/10": "sigma.run, snapshot every 10"}
    for m in modes:
        s = statistics.median(times[m])
        print(f"{names[m]:<34}{s * 1e3:>9.1f}{gloo / s:>14.3f}")
    sig = [recovery_sigma() for _ in range(ROUNDS)]
    tr = [recovery_torchrun() for _ in range(ROUNDS)]
    print(f"\nBack at work after a SIGKILL at step {KILL_STEP}, medians of {ROUNDS}")
    print(f"sigmarun, train_ddp_sigma.py     {statistics.median(sig):6.2f} s  (runs: "
          + ", ".join(f"{x:.2f}" for x in sig) + ")")
    print(f"torchrun at its best             {statistics.median(tr):6.2f} s  (runs: "
          + ", ".join(f"{x:.2f}" for x in tr) + ")")
    print(f"torchrun / sigmarun              {statistics.median(tr) / statistics.median(sig):6.1f}x")


if __name__ == "__main__":
    main()
