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
import threading
import unittest

import sigma
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


class GroupThread(unittest.TestCase):
    """The group's own thread (sigma.distributed._Collectives), alone."""

    def test_ops_run_in_issue_order_and_a_failure_stops_those_behind_it_until_taken(self):
        from sigma.distributed import _Collectives

        q, ran = _Collectives(), []
        gate = threading.Event()
        futs = [torch.futures.Future() for _ in range(4)]
        q.submit(lambda: (gate.wait(), ran.append(0)), futs[0], [0])
        q.submit(lambda: ran.append(1), futs[1], [1])
        gate.set()
        q.drain()
        self.assertEqual(ran, [0, 1])
        self.assertEqual([f.value() for f in futs[:2]], [[0], [1]])

        def lost():
            raise sigma.AbortedError("a peer was lost")

        q.submit(lost, futs[2], ["kept"])
        q.drain()
        # Completed (a failed future crashes DDP's backward in torch 1.13),
        # the failure kept and raised by the next op on the caller.
        self.assertEqual(futs[2].value(), ["kept"])
        with self.assertRaises(sigma.AbortedError):
            q.submit(lambda: ran.append(3), futs[3], [3])
        with self.assertRaises(sigma.AbortedError):
            q.run_here(lambda: ran.append(3))
        self.assertEqual(ran, [0, 1])
        self.assertIsInstance(q.take_failure(), sigma.AbortedError)
        q.run_here(lambda: ran.append(4))
        self.assertEqual(ran, [0, 1, 4])


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
