"""The type stubs (sigma/__init__.pyi) name exactly the public API."""

import ast
import inspect
import os
import unittest

import sigma


def stub_classes():
    path = os.path.join(os.path.dirname(sigma.__file__), "__init__.pyi")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign):
                    names.add(item.target.id)
            out[node.name] = {n for n in names if not n.startswith("_")}
    return out


def public(obj):
    return {n for n in dir(obj) if not n.startswith("_")}


class Stubs(unittest.TestCase):
    def test_every_public_class_and_member_is_in_the_stubs_and_nothing_else(self):
        stubs = stub_classes()
        for name in ("Session", "Guardrails", "Checkpointer", "Loaded", "Decision", "SaveResult", "HealthMonitor"):
            self.assertIn(name, stubs)
            cls = getattr(sigma, name)
            runtime = public(cls)
            if name in ("Loaded",):  # attributes set in __init__
                runtime |= set(inspect.signature(cls.__init__).parameters) - {"self", "result", "extra"}
                runtime |= {"extra", "path", "refused"}
            if name == "Guardrails":
                runtime.add("last_fingerprint")
            self.assertEqual(stubs[name], runtime, name)

    def test_the_module_functions_are_in_the_stubs(self):
        path = os.path.join(os.path.dirname(sigma.__file__), "__init__.pyi")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.assertEqual(functions, {"plan", "init_process_group", "run"})
        for name in functions:
            self.assertTrue(callable(getattr(sigma, name)), name)

    def test_the_process_group_stub_names_what_sigma_adds_to_torchs(self):
        # Its base class is torch's: the stub names the members sigma's
        # class defines or overrides, and nothing else.
        own = {n for n in vars(sigma.ProcessGroup) if not n.startswith("_")} | {"failure"}
        self.assertEqual(stub_classes()["ProcessGroup"], own)

    def test_every_error_class_is_exported_and_a_sigma_error(self):
        for name in sigma.errors.__all__:
            self.assertTrue(issubclass(getattr(sigma, name), sigma.Error), name)
        self.assertTrue(issubclass(sigma.TimeoutError, TimeoutError))
        self.assertTrue(issubclass(sigma.InvalidArgumentError, ValueError))


class Health(unittest.TestCase):
    def test_a_device_heating_past_critical_is_failing_with_the_rule_and_figures(self):
        mon = sigma.HealthMonitor(critical_c=92)
        for t in range(10):
            mon.observe(2, t, temperature_c=60.0, ecc_correctable=3)
            mon.heartbeat(2, t)
        mon.evaluate(10)
        self.assertEqual(mon.device(2)["state"], "healthy")
        for t in range(11, 21):  # the smoothed temperature crosses 92 C
            mon.observe(2, t, temperature_c=97.0)
            mon.heartbeat(2, t)
        self.assertGreater(mon.evaluate(21), 0)
        d = mon.device(2)
        self.assertEqual(d["state"], "failing")
        self.assertLess(d["score"], 1.0)
        w = d["warnings"][0]
        self.assertEqual((w["signal"], w["rule"], w["threshold"]), ("temperature", "threshold", 92.0))
        self.assertIn("critical", w["message"])

    def test_unknown_readings_and_impossible_thresholds_are_refused_by_name(self):
        with self.assertRaises(sigma.InvalidArgumentError) as e:
            sigma.HealthMonitor().observe(0, 0.0, temprature_c=50)
        self.assertIn("temprature_c", str(e.exception))
        with self.assertRaises(sigma.InvalidArgumentError) as e:
            sigma.HealthMonitor(warn_c=90, critical_c=80)
        self.assertIn("critical_c", str(e.exception))


class Plan(unittest.TestCase):
    def test_a_request_file_gives_the_best_layouts_and_a_bad_one_names_the_line(self):
        request = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "samples", "plans",
                               "moe-200b-h100.yaml")
        answer = sigma.plan(request, top=3)
        self.assertEqual(len(answer["plans"]), 3)
        steps = [p["step_s"] for p in answer["plans"]]
        self.assertEqual(steps, sorted(steps), "best first")
        best = answer["plans"][0]
        layout = best["layout"]
        self.assertEqual(layout["tp"] * layout["pp"] * layout["dp"] * layout["cp"], 2048)
        self.assertTrue(0 < best["mfu"] < 1)
        with self.assertRaises(sigma.InvalidArgumentError) as e:
            sigma.plan("model:\n  layers: 0\n")
        self.assertIn("(plan request):1: devices: missing", str(e.exception))


if __name__ == "__main__":
    unittest.main()
