"""sigma.Guardrails around a torch.optim optimizer, in one process."""

import json
import os
import tempfile
import unittest

import sigma
import torch


def model_and_optimizer(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def backward(model, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(32, 8, generator=g)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean() * scale
    loss.backward()
    return loss


class Decisions(unittest.TestCase):
    def test_a_nan_gradient_skips_the_step_and_changes_nothing(self):
        model, opt = model_and_optimizer()
        g = sigma.Guardrails()
        self.assertEqual(g.step(model, backward(model), opt).action, "apply")
        before = [p.detach().clone() for p in model.parameters()]
        moments = [opt.state[p]["exp_avg"].clone() for p in model.parameters()]
        loss = backward(model, seed=1)
        model[2].weight.grad[0, 3] = float("nan")
        d = g.step(model, loss, opt)
        self.assertEqual(d.action, "skip")
        self.assertEqual(d.non_finite, 1)
        self.assertIn("non-finite", d.reason)
        for p, b in zip(model.parameters(), before):
            self.assertTrue(torch.equal(p, b))
        for p, m in zip(model.parameters(), moments):
            self.assertTrue(torch.equal(opt.state[p]["exp_avg"], m))
        cleared = all(p.grad is None or float(p.grad.abs().sum()) == 0 for p in model.parameters())
        self.assertTrue(cleared, "gradients cleared")
        self.assertEqual(g.step(model, backward(model, seed=2), opt).action, "apply")

    def test_a_large_gradient_is_clipped_to_the_configured_norm(self):
        model, opt = model_and_optimizer()
        twin, twin_opt = model_and_optimizer()
        g = sigma.Guardrails(config="clipping:\n  max_norm: 0.5\nloss_scaling:\n  enabled: false\n")
        d = g.step(model, backward(model, scale=100.0), opt)
        self.assertEqual(d.action, "apply")
        self.assertLess(d.clip_factor, 1.0)
        self.assertGreater(d.global_norm, 0.5)
        backward(twin, scale=100.0)
        torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.5)
        twin_opt.step()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)

    def test_loss_scaling_unscales_applies_and_backs_off_on_overflow(self):
        model, opt = model_and_optimizer()
        twin, twin_opt = model_and_optimizer()
        g = sigma.Guardrails(
            config="loss_scaling:\n  enabled: true\n  initial_scale: 1024\nclipping:\n  max_norm: 0\n"
        )
        self.assertEqual(g.loss_scale, 1024.0, "the config's scale before the first step")
        loss = backward(model, scale=1024.0)  # what g.scale(loss) gives at 1024
        d = g.step(model, loss / 1024.0, opt)
        self.assertEqual((d.action, d.loss_scale), ("apply", 1024.0))
        self.assertAlmostEqual(d.grad_multiplier, 1 / 1024.0)
        backward(twin)
        twin_opt.step()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
        loss = g.scale(backward(model, seed=1) * 0 + 1.0)
        self.assertEqual(float(loss), 1024.0)
        model[0].weight.grad[0, 0] = float("inf")
        d = g.step(model, 1.0, opt)
        self.assertEqual(d.action, "skip")
        self.assertEqual(d.next_loss_scale, 512.0)
        self.assertEqual(g.loss_scale, 512.0)

    def test_a_layer_that_keeps_overflowing_is_escalated_by_name(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(torch.bfloat16)
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        # Three overflowing steps in a window of 20 are the limit (0.15 x 20):
        # one or two do not escalate it, the third does, and says why.
        g = sigma.Guardrails(config="precision:\n  window: 20\n  max_overflow_rate: 0.15\n")
        x = torch.randn(4, 8).to(torch.bfloat16)
        for overflow in range(1, 4):
            opt.zero_grad()
            model(x).float().pow(2).mean().backward()
            model[2].weight.grad[0, 0] = float("nan")
            d = g.step(model, 1.0, opt)
            self.assertEqual(d.action, "skip")
            if overflow < 3:
                self.assertNotIn("2", d.escalate, f"escalated after {overflow} overflow(s): {d.reason}")
                self.assertFalse(g.escalated("2"))
        self.assertIn("2", d.escalate, d.reason)
        self.assertTrue(g.escalated("2"))
        self.assertFalse(g.escalated("0"))

    def test_the_journal_gets_a_line_per_decision_and_fingerprint(self):
        model, opt = model_and_optimizer()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "g.jsonl")
            g = sigma.Guardrails(journal=path)
            for step in range(3):
                g.step(model, backward(model, seed=step), opt)
            del g
            with open(path, encoding="utf-8") as f:
                events = [json.loads(line)["event"] for line in f]
            self.assertEqual(events.count("step"), 3)
            self.assertIn("fingerprint", events, "the replicas' fingerprints are compared at the first step")

    def test_policy_state_round_trips(self):
        model, opt = model_and_optimizer()
        g = sigma.Guardrails(config="loss_scaling:\n  enabled: true\n  initial_scale: 256\n")
        g.step(model, backward(model), opt)
        model[0].weight.grad = None
        backward(model, seed=1)
        model[0].weight.grad[0, 0] = float("inf")
        g.step(model, 1.0, opt)  # an overflow: the scale halves
        other = sigma.Guardrails(config="loss_scaling:\n  enabled: true\n  initial_scale: 256\n")
        other.restore_state(g.save_state())
        self.assertEqual(other.loss_scale, 128.0, "restored before its first step")
        self.assertEqual(json.loads(other.save_state()), json.loads(g.save_state()))
        with self.assertRaises(sigma.InvalidArgumentError):
            other.step(model, backward(model, seed=2), opt, step=1)  # steps must grow past the restored ones
        other.step(model, backward(model, seed=3), opt, step=2)
        self.assertEqual(other.loss_scale, 128.0)


class Errors(unittest.TestCase):
    def test_a_bad_config_names_the_file_line_and_key(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "g.yaml")
            with open(path, "w", encoding="utf-8") as f:
                f.write("clipping:\n  max_norm: 1.0\nspike:\n  threshhold: 6\n")
            with self.assertRaises(sigma.InvalidArgumentError) as e:
                sigma.Guardrails(config=path)  # at once, not at the first step
            self.assertIn("g.yaml:4", str(e.exception))
            self.assertIn("threshhold", str(e.exception))

    def test_wrong_arguments_are_invalid_argument_errors(self):
        with self.assertRaises(sigma.InvalidArgumentError):
            sigma.Guardrails(layout="diagonal")
        with self.assertRaises(sigma.InvalidArgumentError):
            sigma.Guardrails(config="no-such-file")
        model = torch.nn.Linear(2, 2).double()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(1, 2, dtype=torch.float64)).sum().backward()
        with self.assertRaises(sigma.InvalidArgumentError) as e:
            sigma.Guardrails().step(model, torch.tensor(1.0), opt)
        self.assertIn("float64", str(e.exception))


if __name__ == "__main__":
    unittest.main()
