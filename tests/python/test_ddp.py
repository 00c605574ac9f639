"""sigma's torch.distributed backend under a real sigmarun, against torch's
own gloo backend under torchrun: every collective DDP issues, bit for bit;
the DDP sample bit for bit equal to its gloo original; and that sample
surviving a killed and a stopped worker, still bit for bit."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

import torch

from test_session import sigmarun, summary

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = os.environ.get("SIGMA_PYTHON_SAMPLES", os.path.join(HERE, "..", "..", "samples", "python"))
OPS_WORKER = os.path.join(HERE, "ddp_ops_worker.py")
LAUNCHER = os.path.join(HERE, "ddp_fault_launcher.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(log_dir, script, args):
    """torch's own launcher, two processes, torch's gloo backend."""
    cmd = ["timeout", "-k", "10", "120", sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_port", str(free_port()), "--redirects", "2", "--tee", "2", "--log_dir", log_dir, script, *args]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=150)
    return r.returncode, r.stdout


def load_ranks(d, world=2):
    return [torch.load(os.path.join(d, f"ops-rank-{r}.pt")) for r in range(world)]


def assert_same_bits(test, got, want, what):
    test.assertEqual(sorted(got), sorted(want), what)
    for key, value in want.items():
        test.assertEqual(got[key].dtype, value.dtype, f"{what}: {key}")
        test.assertTrue(torch.equal(got[key], value), f"{what}: {key} differs from torch's gloo")


class Collectives(unittest.TestCase):
    def test_every_op_ddp_issues_equals_torch_gloo_bit_for_bit_and_frees_the_gil(self):
        with tempfile.TemporaryDirectory() as d:
            mine, theirs = os.path.join(d, "sigma"), os.path.join(d, "gloo")
            os.makedirs(mine)
            os.makedirs(theirs)
            rc, out = sigmarun(os.path.join(d, "job"), ["sigma", mine], OPS_WORKER)
            self.assertEqual(rc, 0, out)
            self.assertIn("gil:", out)
            rc, log = torchrun(os.path.join(d, "logs"), OPS_WORKER, ["gloo", theirs])
            self.assertEqual(rc, 0, log)
            for rank, (got, want) in enumerate(zip(load_ranks(mine), load_ranks(theirs))):
                assert_same_bits(self, got, want, f"rank {rank}")
            # What torch called on the group: DDP's construction (the shape
            # check's all-gather, the state's broadcast), its buckets'
            # all-reduces, the buffers' broadcast, the store-based barrier.
            with open(os.path.join(mine, "called-rank-0.json"), encoding="utf-8") as f:
                called = set(json.load(f))
            self.assertEqual(called, {"allreduce", "broadcast", "allgather", "barrier"})


class Training(unittest.TestCase):
    def test_the_ddp_sample_equals_gloo_and_survives_a_kill_and_a_stop_bit_for_bit(self):
        steps = 300
        sample = os.path.join(SAMPLES, "train_ddp_sigma.py")
        with tempfile.TemporaryDirectory() as d:
            gloo_out = os.path.join(d, "gloo.pt")
            rc, log = torchrun(os.path.join(d, "logs"), os.path.join(SAMPLES, "train_ddp.py"),
                               ["--steps", str(steps), "--out", gloo_out])
            self.assertEqual(rc, 0, log)
            want = torch.load(gloo_out)
            # On the sim vendor: a driver crash (SIGKILL inside a
            # collective) and a worker frozen by SIGSTOP as a step begins.
            clean = "seed: 3\nduration_s: 600\nworld_size: 3\n"
            runs = {
                "clean": (clean, []),
                "kill": (clean + "faults:\n  - {kind: crash, device: 1, at_op: 150}\n", []),
                "stop": (clean, ["STOP", "120", "1", os.path.join(d, "stopped")]),
            }
            for name, (scenario, launch) in runs.items():
                job, out = os.path.join(d, name), os.path.join(d, name + ".pt")
                args = ["--steps", str(steps), "--out", out]
                if launch:
                    worker, args = LAUNCHER, launch + [sample] + args
                else:
                    worker = sample
                rc, log = sigmarun(job, args, worker, scenario)
                self.assertEqual(rc, 0, f"{name}:\n{log}")
                kinds = [i["kind"] for i in summary(job)["incidents"]]
                self.assertEqual(kinds != [], name != "clean", f"{name}: {kinds}\n{log}")
                assert_same_bits(self, torch.load(out), want, name)


if __name__ == "__main__":
    unittest.main()
