"""sigma.Session under a real sigmarun: collectives on tensors, and the
sample script surviving a real crash (memory-tier restore) and a NaN burst
(guardrails skip) on the sim vendor."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import sigma
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SIGMARUN = os.environ.get("SIGMARUN", "sigmarun")
SAMPLE = os.environ.get("SIGMA_PYTHON_SAMPLE", os.path.join(HERE, "..", "..", "samples", "python", "train_sigma.py"))


def sigmarun(job_dir, args, worker, scenario=None, nproc=2, agent=()):
    cmd = ["timeout", "-k", "10", "120", SIGMARUN, "--nproc", str(nproc), "--spares", "1", "--job-dir", job_dir,
           "--no-progress", "--snapshot-keep", "3", *agent]
    if scenario is not None:
        path = job_dir + ".yaml"
        with open(path, "w", encoding="utf-8") as f:
            f.write(scenario)
        cmd += ["--vendor", "sim", "--vendor-options", f"scenario={path};rank={{device}}"]
    cmd += ["--", sys.executable, worker] + args
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=150)
    logs = ""
    log_dir = os.path.join(job_dir, "logs")
    if os.path.isdir(log_dir):
        for name in sorted(os.listdir(log_dir)):
            with open(os.path.join(log_dir, name), encoding="utf-8", errors="replace") as f:
                logs += f"--- {name}\n{f.read()[-3000:]}"
    return r.returncode, r.stdout + logs


def step_lines(job_dir):
    """contained_worker.py's lines: step -> [(rank, batch, live, shards)]."""
    steps = {}
    for name in os.listdir(job_dir):
        if not name.startswith("steps-rank-"):
            continue
        rank = int(name[len("steps-rank-") : -len(".txt")])
        with open(os.path.join(job_dir, name), encoding="utf-8") as f:
            for line in f:
                w = line.split()
                shards = [int(p) for p in w[w.index("shards") + 1 :]]
                steps.setdefault(int(w[1]), []).append((rank, int(w[3]), int(w[5]), shards))
    return steps


def summary(job_dir):
    with open(os.path.join(job_dir, "report.json"), encoding="utf-8") as f:
        return json.load(f)["summary"]


class Outside(unittest.TestCase):
    def test_a_session_outside_sigmarun_says_so(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIGMA_AGENT")}
        r = subprocess.run([sys.executable, "-c", "import sigma; sigma.Session()"], env=env,
                           stderr=subprocess.PIPE, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("InvalidArgumentError", r.stderr)
        self.assertIn("sigmarun", r.stderr)
        self.assertEqual(sigma.Session.under_agent(), "SIGMA_AGENT_SOCKET" in os.environ)


class UnderSigmarun(unittest.TestCase):
    def test_collectives_on_tensors_are_right_and_release_the_gil(self):
        with tempfile.TemporaryDirectory() as d:
            rc, out = sigmarun(os.path.join(d, "job"), [], os.path.join(HERE, "collectives_worker.py"))
            self.assertEqual(rc, 0, out)
            self.assertIn("collectives: all correct", out)

    def test_a_loss_spike_is_rolled_back_and_its_data_skipped(self):
        with tempfile.TemporaryDirectory() as d:
            job = os.path.join(d, "job")
            rc, out = sigmarun(job, [], os.path.join(HERE, "spike_worker.py"))
            self.assertEqual(rc, 0, out)
            self.assertIn("spike: rolled back", out)
            self.assertIn("applied 60", out)  # the state item went back with the snapshot
            spikes = [i for i in summary(job)["incidents"] if i["kind"] == "loss spike"]
            self.assertEqual(len(spikes), 1, out)
            self.assertIn("data window skipped", spikes[0]["handled"])
            self.assertIn("skip the data of steps [30, 33)", spikes[0]["what"])

    def test_the_sample_survives_a_crash_bit_exactly_and_skips_a_nan_burst(self):
        with tempfile.TemporaryDirectory() as d:
            header = "seed: 5\nduration_s: 600\nworld_size: 3\n"
            runs = {
                "clean": header,
                "crash": header + "faults:\n  - {kind: crash, device: 1, at_op: 150}\n",
                "both": header + "faults:\n  - {kind: crash, device: 1, at_op: 150}\n"
                "  - {kind: nan_burst, device: 0, at_op: 300, count: 2, op: all_reduce}\n",
            }
            finals = {}
            for name, scenario in runs.items():
                job, out = os.path.join(d, name), os.path.join(d, name + ".pt")
                rc, log = sigmarun(job, ["--steps", "200", "--out", out], SAMPLE, scenario)
                self.assertEqual(rc, 0, f"{name}:\n{log}")
                finals[name] = torch.load(out)
                kinds = [i["kind"] for i in summary(job)["incidents"]]
                if name == "clean":
                    self.assertEqual(kinds, [], log)
                else:
                    self.assertIn("crash", kinds, log)
            self.assertEqual(summary(os.path.join(d, "crash"))["skipped_steps"], 0)
            self.assertGreaterEqual(summary(os.path.join(d, "both"))["skipped_steps"], 1)
            self.assertIn("NaN burst", [i["kind"] for i in summary(os.path.join(d, "both"))["incidents"]])
            for key, value in finals["clean"].items():
                self.assertTrue(torch.equal(value, finals["crash"][key]), f"{key}: a restored run must end alike")
                self.assertTrue(torch.isfinite(finals["both"][key]).all(), key)


class Contained(unittest.TestCase):
    def test_a_killed_replica_stops_alone_and_every_step_keeps_its_whole_batch(self):
        # Two replicas of one rank each: rank 1 killed at step 20 stops only
        # itself; rank 0 takes its shards and steps on until the spare,
        # given rank 0's live state, rejoins.
        worker = os.path.join(HERE, "contained_worker.py")
        # No proactive migration: on a loaded machine a rank's steps may be
        # slow enough for the straggler rule, an incident of its own.
        agent = ["--recovery", "contained", "--replica-size", "1", "--no-migration"]
        steps = 120
        with tempfile.TemporaryDirectory() as d:
            finals = {}
            for name, extra in {"clean": [], "kill": ["--kill-at", "20", "--kill-device", "1"]}.items():
                job, out = os.path.join(d, name), os.path.join(d, name + ".pt")
                args = ["--steps", str(steps), "--out", out, "--step-ms", "40"] + extra
                rc, log = sigmarun(job, args, worker, agent=agent)
                self.assertEqual(rc, 0, f"{name}:\n{log}")
                finals[name] = torch.load(out)
            job = os.path.join(d, "kill")
            with open(os.path.join(job, "report.json"), encoding="utf-8") as f:
                contained = json.load(f)["contained"]
            self.assertEqual(len(contained["incidents"]), 1, contained)
            self.assertEqual(contained["incidents"][0]["replica"], 1)
            self.assertEqual(contained["incidents"][0]["end"], "rejoined")
            self.assertGreaterEqual(contained["degraded_steps"], 1)
            lines = step_lines(job)
            self.assertEqual(sorted(lines), list(range(steps)))
            alone = 0
            for step, done in lines.items():
                # Rank 0 never stopped: each step once, on its own batch.
                mine = [x for x in done if x[0] == 0]
                self.assertEqual(len(mine), 1, (step, done))
                self.assertEqual(mine[0][1], step)
                alone += mine[0][2] == 1
                # Each shard of the batch computed once, whoever was live.
                self.assertEqual(sorted(p for x in done for p in x[3]), [0, 1], (step, done))
            self.assertGreaterEqual(alone, 1)
            # The same batches: only the order of the gradients' sums differs.
            for key, value in finals["clean"].items():
                torch.testing.assert_close(finals["kill"][key], value, rtol=1e-4, atol=1e-5, msg=key)

    def test_the_sample_with_guardrails_survives_a_crash_and_a_nan_burst_in_one_replica(self):
        # train_sigma.py as it is, under contained recovery: a crash stops
        # rank 1's replica alone; a NaN burst in rank 0's exchange results
        # makes every replica skip alike (the replicas never diverge). The
        # sample's steps are all overhead (3 to 12 ms), so its replay may be
        # no faster than them: after half a second of it the replica
        # rejoins anyway, well before the job's end.
        agent = ["--recovery", "contained", "--replica-size", "1", "--catch-up-s", "0.5", "--no-migration"]
        header = "seed: 5\nduration_s: 600\nworld_size: 3\n"
        runs = {
            "clean": header,
            "both": header + "faults:\n  - {kind: crash, device: 1, at_op: 150}\n"
            "  - {kind: nan_burst, device: 0, at_op: 400, count: 2, op: all_reduce}\n",
        }
        with tempfile.TemporaryDirectory() as d:
            finals = {}
            for name, scenario in runs.items():
                job, out = os.path.join(d, name), os.path.join(d, name + ".pt")
                rc, log = sigmarun(job, ["--steps", "1000", "--out", out], SAMPLE, scenario, agent=agent)
                self.assertEqual(rc, 0, f"{name}:\n{log}")
                finals[name] = [torch.load(out), torch.load(out + ".rank1")]
                with open(os.path.join(job, "report.json"), encoding="utf-8") as f:
                    report = json.load(f)
                if name == "clean":
                    self.assertEqual(report["summary"]["incidents"], [], log)
                    continue
                contained = report["contained"]
                self.assertEqual([i["end"] for i in contained["incidents"]], ["rejoined"], contained)
                self.assertEqual(report["summary"]["lost_s"]["restart"], 0.0, log)
                self.assertGreaterEqual(report["summary"]["skipped_steps"], 1, log)
                self.assertIn("NaN burst", [i["kind"] for i in report["summary"]["incidents"]], log)
            for name, (rank0, rank1) in finals.items():
                for key, value in rank0.items():
                    self.assertTrue(torch.equal(value, rank1[key]), f"{name} {key}: the replicas diverged")
                    self.assertTrue(torch.isfinite(value).all(), key)



if __name__ == "__main__":
    unittest.main()
