"""sigma.Checkpointer: bit-exact state dicts, a killed writer restored,
flat memory over many saves, the GIL released, clear errors."""

import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import sigma
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def rss_kib():
    """Resident KiB of live memory: glibc first returns the free pages its
    arenas keep (how many it keeps depends on how many saves overlapped,
    which a loaded machine changes), so a leak is what remains."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def every_dtype():
    """One tensor of each dtype PyTorch has on the CPU, with awkward values."""
    g = torch.Generator().manual_seed(3)
    out = {}
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        t = torch.randn(5, 7, generator=g).to(dtype)
        t[0, 0], t[0, 1], t[0, 2] = float("nan"), float("inf"), -0.0
        out[str(dtype)] = t
    for dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
        info = torch.iinfo(dtype)
        out[str(dtype)] = torch.tensor([info.min, info.max, 0, 1, -1 if info.min < 0 else 2], dtype=dtype)
    out["bool"] = torch.tensor([True, False, True])
    out["complex64"] = torch.randn(4, generator=g, dtype=torch.complex64)
    out["complex128"] = torch.randn(3, 2, generator=g, dtype=torch.complex128)
    out["scalar"] = torch.tensor(3.25)
    out["empty"] = torch.empty(0, 4)
    # Non-contiguous: a transposed matrix and a strided slice.
    out["transposed"] = torch.randn(6, 3, generator=g).t()
    out["strided"] = torch.arange(40, dtype=torch.int64)[::3]
    return out


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


class RoundTrip(unittest.TestCase):
    def test_every_dtype_and_non_contiguous_tensors_come_back_bit_exactly(self):
        with tempfile.TemporaryDirectory() as d:
            saved = every_dtype()
            ck = sigma.Checkpointer(d)
            ck.save(1, saved, extra={"note": "x", "pos": 17})
            ck.wait()
            loaded = {k: torch.zeros_like(v) for k, v in saved.items()}
            result = ck.load_latest(loaded)
            self.assertEqual(result.step, 1)
            self.assertEqual(result.extra, {"note": "x", "pos": 17})
            for name, t in saved.items():
                self.assertTrue(same_bits(t, loaded[name]), name)
            self.assertFalse(loaded["transposed"].is_contiguous(), "restored into the caller's own tensor")

    def test_every_compression_mode_round_trips_and_a_bad_one_is_refused_by_name(self):
        saved = every_dtype()
        for mode in ("automatic", "always", "never"):
            with tempfile.TemporaryDirectory() as d:
                ck = sigma.Checkpointer(d, async_save=False, compression=mode)
                ck.save(1, saved)
                loaded = {k: torch.zeros_like(v) for k, v in saved.items()}
                self.assertEqual(ck.load_latest(loaded).step, 1)
                for name, t in saved.items():
                    self.assertTrue(same_bits(t, loaded[name]), f"{mode}: {name}")
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(sigma.InvalidArgumentError, "compression .fast. is not"):
                sigma.Checkpointer(d, compression="fast")

    def test_model_and_optimizer_round_trip_into_fresh_objects(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 2))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.8, 0.95))
        for _ in range(3):
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
        opt.param_groups[0]["lr"] = 5e-4
        with tempfile.TemporaryDirectory() as d:
            ck = sigma.Checkpointer(d, async_save=False)
            ck.save(3, model, opt)
            fresh = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 2))
            fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
            self.assertEqual(ck.load_latest(fresh, fresh_opt).step, 3)
        for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
            self.assertTrue(same_bits(a, b), name)
        self.assertEqual(fresh_opt.param_groups[0]["lr"], 5e-4)
        self.assertEqual(fresh_opt.param_groups[0]["betas"], (0.8, 0.95))
        for p, q in zip(model.parameters(), fresh.parameters()):
            for key, value in opt.state[p].items():
                self.assertTrue(same_bits(value, fresh_opt.state[q][key]), key)

    def test_a_tensor_of_other_dtype_or_shape_but_the_same_bytes_is_refused_and_nothing_changes(self):
        with tempfile.TemporaryDirectory() as d:
            ck = sigma.Checkpointer(d, async_save=False)
            ck.save(1, {"m": torch.tensor([1, -2, 3, -4], dtype=torch.int16), "b": torch.ones(2, 3, dtype=torch.bool)})
            for wrong in ({"m": torch.zeros(8, dtype=torch.int8), "b": torch.zeros(2, 3, dtype=torch.bool)},
                          {"m": torch.zeros(4, dtype=torch.int16), "b": torch.zeros(3, 2, dtype=torch.bool)},
                          {"m": torch.zeros(4, dtype=torch.int16), "b": torch.zeros(2, 3, dtype=torch.int8)}):
                before = {k: v.clone() for k, v in wrong.items()}
                with self.assertRaises(sigma.InvalidArgumentError):
                    ck.load_latest(wrong)
                for k in wrong:
                    self.assertTrue(torch.equal(wrong[k], before[k]), f"{k} changed by a refused load")

    def test_saving_creates_only_missing_optimizer_state_and_leaves_the_rest(self):
        torch.manual_seed(0)
        a, b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        opt = torch.optim.AdamW(list(a.parameters()) + list(b.parameters()), lr=1e-2, weight_decay=0.1)
        a(torch.randn(2, 4)).sum().backward()  # b has no gradient: no state yet
        opt.step()
        kept = {k: v.clone() for k, v in opt.state[a.weight].items()}
        with tempfile.TemporaryDirectory() as d:
            sigma.Checkpointer(d, async_save=False).save(1, torch.nn.ModuleList([a, b]), opt)
        for k, v in kept.items():
            self.assertTrue(torch.equal(opt.state[a.weight][k], v), f"a's {k} changed")
        self.assertEqual(float(opt.state[b.weight]["step"]), 0.0)
        self.assertEqual(float(opt.state[b.weight]["exp_avg"].abs().sum()), 0.0, "fresh, despite weight decay")
        self.assertEqual(opt.param_groups[0]["lr"], 1e-2)
        self.assertEqual(opt.param_groups[0]["weight_decay"], 0.1)

    def test_plain_sgd_and_an_optimizer_that_cannot_be_prepared(self):
        model = torch.nn.Linear(3, 1)
        with tempfile.TemporaryDirectory() as d:
            ck = sigma.Checkpointer(d, async_save=False)
            ck.save(1, model, torch.optim.SGD(model.parameters(), lr=0.1))  # momentum_buffer None
            self.assertEqual(ck.load_latest(model, torch.optim.SGD(model.parameters(), lr=0.1)).step, 1)
            with self.assertRaises(sigma.NotSupportedError) as e:
                ck.save(2, model, torch.optim.Rprop(model.parameters()))
            self.assertIn("Rprop", str(e.exception))

    def test_an_empty_directory_loads_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertIsNone(sigma.Checkpointer(d).load_latest({"w": torch.zeros(3)}))

    def test_a_corrupted_checkpoint_is_refused_and_the_older_one_loaded(self):
        with tempfile.TemporaryDirectory() as d:
            ck = sigma.Checkpointer(d, async_save=False, base_every=1)
            ck.save(1, {"w": torch.full((1000,), 1.0)})
            r = ck.save(2, {"w": torch.full((1000,), 2.0)})
            data = os.path.join(r.path, [f for f in os.listdir(r.path) if f.startswith("data")][0])
            with open(data, "r+b") as f:
                f.seek(os.path.getsize(data) // 2)
                f.write(b"\xff\x00\xff\x00")
            w = torch.zeros(1000)
            loaded = ck.load_latest({"w": w})
            self.assertEqual(loaded.step, 1)
            self.assertTrue(torch.equal(w, torch.full((1000,), 1.0)))
            self.assertEqual(len(loaded.refused), 1, loaded.refused)


class Errors(unittest.TestCase):
    def test_bad_arguments_raise_invalid_argument_with_the_librarys_message(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(sigma.InvalidArgumentError) as e:
                sigma.Checkpointer(d, keep=0)
            self.assertIn("keep", str(e.exception))
            self.assertIsInstance(e.exception, ValueError)
            ck = sigma.Checkpointer(d, async_save=False)
            ck.save(1, {"w": torch.zeros(4)})
            with self.assertRaises(sigma.InvalidArgumentError) as e:
                ck.load_latest({"w": torch.zeros(5)})
            self.assertIn("w", str(e.exception))
            with self.assertRaises(sigma.InvalidArgumentError):
                ck.save(2, ["not", "a", "state dict"])

    def test_a_damaged_only_checkpoint_is_data_loss(self):
        with tempfile.TemporaryDirectory() as d:
            ck = sigma.Checkpointer(d, async_save=False)
            r = ck.save(1, {"w": torch.arange(5000, dtype=torch.float32)})
            manifest = [f for f in os.listdir(r.path) if "manifest" in f][0]
            with open(os.path.join(r.path, manifest), "r+b") as f:
                f.write(b"\x00" * 64)
            with self.assertRaises(sigma.DataLossError) as e:
                ck.load_latest({"w": torch.zeros(5000)})
            self.assertEqual(e.exception.code, "data_loss")

    def test_a_save_into_an_unwritable_folder_is_a_clear_error(self):
        with tempfile.TemporaryDirectory() as d:
            blocker = os.path.join(d, "file")
            open(blocker, "w").close()
            with self.assertRaises(sigma.Error) as e:
                sigma.Checkpointer(os.path.join(blocker, "sub"))
            self.assertIn("file", str(e.exception))


class Memory(unittest.TestCase):
    def test_two_hundred_saves_keep_memory_flat(self):
        torch.manual_seed(1)
        state = {"w": torch.randn(1 << 20), "b": torch.randn(1 << 18)}  # 5 MiB
        with tempfile.TemporaryDirectory() as d:
            ck = sigma.Checkpointer(d, keep=2, base_every=4)
            for step in range(20):
                state["w"][step] += 1.0
                ck.save(step, state)
            ck.wait()
            before = rss_kib()
            for step in range(20, 220):
                state["w"][step] += 1.0
                ck.save(step, state)
            ck.wait()
            grown = rss_kib() - before
        self.assertLess(grown, 8 * 1024, f"RSS grew {grown} KiB over 200 saves of a 5 MiB state")


class Gil(unittest.TestCase):
    def test_a_second_python_thread_runs_while_a_save_blocks(self):
        state = {"w": torch.randn(48 << 20)}  # 192 MiB: a save of a second or more
        ticks = []
        stop = threading.Event()

        def count():
            while not stop.is_set():
                ticks.append(time.monotonic())
                time.sleep(0.001)

        with tempfile.TemporaryDirectory() as d:
            # Every chunk compressed: a save the CPU bounds, whatever the disk's rate.
            ck = sigma.Checkpointer(d, async_save=False, zstd_level=3, compression="always")
            t = threading.Thread(target=count)
            t.start()
            t0 = time.monotonic()
            ck.save(1, state)
            t1 = time.monotonic()
            stop.set()
            t.join()
        during = [x for x in ticks if t0 < x < t1]
        self.assertGreater(t1 - t0, 0.3, "the save must block long enough to tell")
        # A held GIL would leave the counter at one or two ticks; a free one
        # gives hundreds even with the compressor on both cores.
        self.assertGreater(len(during), 20, f"{len(during)} ticks in {t1 - t0:.2f} s")


class KilledWriter(unittest.TestCase):
    def test_a_killed_training_process_resumes_from_its_checkpoint_with_the_same_result(self):
        script = os.path.join(HERE, "checkpoint_worker.py")
        with tempfile.TemporaryDirectory() as d:
            ref = os.path.join(d, "ref.pt")
            subprocess.run([sys.executable, script, os.path.join(d, "a"), ref], check=True, timeout=120, stdout=subprocess.DEVNULL)
            out = os.path.join(d, "out.pt")
            p = subprocess.Popen([sys.executable, script, os.path.join(d, "b"), out], stdout=subprocess.PIPE, text=True)
            committed = -1  # the newest checkpoint the process had committed before the kill
            for line in p.stdout:
                committed = int(line.split()[3])
                if line.startswith("step 37"):
                    p.send_signal(signal.SIGKILL)  # for real, mid-run, between checkpoints
                    break
            p.wait(timeout=60)
            p.stdout.close()
            self.assertEqual(p.returncode, -signal.SIGKILL)
            r = subprocess.run([sys.executable, script, os.path.join(d, "b"), out], check=True, timeout=120,
                               stdout=subprocess.PIPE, text=True)
            # The newest durable save: at least the newest one committed
            # before the kill (one still being written in the background
            # may have finished since), never an older one.
            resumed = r.stdout.splitlines()[0]
            self.assertRegex(resumed, r"^resumed at step (1|11|21|31)$")
            self.assertGreaterEqual(int(resumed.split()[-1]), committed + 1, f"{committed} was committed")
            self.assertGreaterEqual(committed, 0, "no save committed in 37 steps")
            a, b = torch.load(ref), torch.load(out)
            for k in a:
                self.assertTrue(same_bits(a[k], b[k]), k)


if __name__ == "__main__":
    unittest.main()
