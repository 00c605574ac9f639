"""sigma.Guardrails: numerical guardrails around any torch.optim optimizer."""

import json
import os

import torch

from . import _sigma, _tensors
from .errors import InvalidArgumentError

# f32 training: no loss scaling unless the config turns it on.
_DEFAULT_YAML = "loss_scaling:\n  enabled: false\n"


class Guardrails:
    """Per step: one scan of the gradients, one small exchange with the
    other ranks, the same decision on every rank, carried out here::

        g = sigma.Guardrails(session)            # or Guardrails() alone
        loss.backward(); session.average_gradients(model)
        decision = g.step(model, loss, optimizer)

    ``apply`` multiplies the gradients by the decision's factor (clipping,
    loss scale) and steps the optimizer; ``skip`` (a non-finite gradient, a
    replica that disagrees) does not; ``rollback`` (a loss spike) is carried
    out by the session's :meth:`Session.run`: the state goes back to the
    newest snapshot and the spike's data window is skipped. Layers are the
    modules that own parameters; ``decision.escalate`` names those to run in
    float32 from now on (:meth:`escalated`). With loss scaling on (config),
    multiply the loss by :attr:`loss_scale` before ``backward()``.

    config: a YAML file or YAML text (docs/guardrails.md's keys); default:
    f32 training, clipping at 1, spike rollback on. journal: where the JSON
    decisions go (default ``$SIGMA_JOB_DIR/guardrails.jsonl`` under a
    session). layout: "replicated" (gradients all-reduced before the call:
    plain data parallelism; a rank that disagrees is named) or "sharded".
    """

    def __init__(self, session=None, config=None, journal=None, layout="replicated"):
        self._session = session
        self._yaml, self._name = _DEFAULT_YAML, "(default guardrails config)"
        if config is not None:
            if "\n" not in config and os.path.exists(config) and not os.path.isfile(config):
                raise InvalidArgumentError(f"Guardrails: config '{config}' is not a regular file")
            if os.path.isfile(config):
                with open(config, encoding="utf-8") as f:
                    self._yaml, self._name = f.read(), config
            elif "\n" in config or ":" in config:
                self._yaml, self._name = config, "(guardrails config text)"
            else:
                raise InvalidArgumentError(f"Guardrails: config '{config}' is neither a file nor YAML text")
        if layout not in ("replicated", "sharded"):
            raise InvalidArgumentError(f"Guardrails: layout must be 'replicated' or 'sharded', not '{layout}'")
        self._journal = journal
        # Under a session, where the config names no journal either.
        self._fallback_journal = None
        if session is not None and os.environ.get("SIGMA_JOB_DIR"):
            self._fallback_journal = os.path.join(os.environ["SIGMA_JOB_DIR"], "guardrails.jsonl")
        self._layout = layout
        self._layers = None  # [(name, dtype)], [[param]] per layer
        self._native = None
        self._generation = None
        self._pending_state = None
        self._count = 0
        self.last_fingerprint = None  # the newest replica comparison, when one ran
        # The config is checked now (file, line and key of a mistake), and
        # gives the loss scale until the first step builds the engine.
        self._initial_scale = _sigma.Guardrails(self._yaml, self._name, None, None, [], None, layout).loss_scale
        if session is not None:
            session._bind(self)

    def step(self, model, loss, optimizer, step=None):
        """Decides and carries out one step; returns the :class:`Decision`.
        ``step`` defaults to the session's current step (or a counter)."""
        if step is None:
            step = self._session._current_step if self._session is not None else self._count
        self._count = step + 1
        native = self._ensure(model)
        grads = [
            [_tensors.buffer(p.grad, f"gradient of '{n}'") for n, p in params if p.grad is not None]
            for params in self._params
        ]
        value = float(loss.detach()) if hasattr(loss, "detach") else float(loss)
        if self._session is not None and self._session.replicas.count > 1:
            # Every replica's guardrails see the global batch's loss, not
            # finite when any replica's exchanged gradients are not (a fault
            # in one replica's exchange): the same decision everywhere. A
            # void step raises here, before anything is applied.
            finite = all(bool(torch.isfinite(p.grad).all()) for ps in self._params for _, p in ps if p.grad is not None)
            value = self._session._replicas_mean(value, finite)
        d = native.step(step, value, grads)
        if d.action == "apply":
            if d.grad_multiplier != 1.0:
                for params in self._params:
                    for _, p in params:
                        if p.grad is not None:
                            p.grad.mul_(d.grad_multiplier)
            optimizer.step()
        optimizer.zero_grad()
        if self._session is not None:
            if d.action != "rollback" and (step + 1) % self._session._snapshot_every == 0:
                native.note_snapshot(step)  # step_end takes it
            self._session._decision = d
        if d.check_fingerprint and d.action == "apply":
            params = [_tensors.buffer(p.detach(), f"parameter '{n}'") for ps in self._params for n, p in ps]
            self.last_fingerprint = native.check_fingerprint(step, params)
        return d

    @property
    def loss_scale(self):
        """The scale this step's loss must be multiplied by (1 with loss
        scaling off): the config's initial scale before the first step,
        the restored one after a restore."""
        if self._native is not None:
            return self._native.loss_scale
        if self._pending_state:
            return float(json.loads(self._pending_state)["loss_scale"])
        return self._initial_scale

    def scale(self, loss):
        """The loss times the current loss scale (1 with scaling off)."""
        return loss * self.loss_scale

    def escalated(self, layer):
        """True when ``layer`` (a module's name) should run in float32."""
        return self._native is not None and self._native.escalated(layer)

    def save_state(self):
        """The policy state as JSON (scale, spike history, snapshots)."""
        if self._native is not None:
            return self._native.save_state()
        return self._pending_state or ""

    def restore_state(self, text):
        if not text:
            return
        if self._native is not None:
            self._native.restore_state(text)
        else:
            self._pending_state = text

    def _ensure(self, model):
        """The native guardrails for this generation's communicator (with
        replicas, the replica group of this epoch): built at the first step
        and again after each recovery or re-form, state carried."""
        if self._layers is None:
            self._layers, self._params = _layers_of(model)
        generation = None
        if self._session is not None:
            generation = (self._session.generation, self._session.replicas.epoch)
        if self._native is None or generation != self._generation:
            state = self.save_state()
            native_session = self._session._native if self._session is not None else None
            self._native = _sigma.Guardrails(
                self._yaml,
                self._name,
                self._journal,
                self._fallback_journal,
                self._layers,
                native_session,
                self._layout,
            )
            self._pending_state = None
            if state:
                self._native.restore_state(state)
            self._generation = generation
        return self._native


def _layers_of(model):
    """One layer per module that owns parameters, named as the module is."""
    names, params = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        owner = name.rsplit(".", 1)[0] if "." in name else "(root)"
        if p.dtype not in _tensors.HAL_DTYPE or _tensors.HAL_DTYPE[p.dtype] not in (
            _sigma.DTYPE_F32,
            _sigma.DTYPE_F16,
            _sigma.DTYPE_BF16,
        ):
            raise InvalidArgumentError(f"Guardrails: parameter '{name}' is {p.dtype}; float32, float16 or bfloat16 only")
        if not names or names[-1][0] != owner:
            names.append((owner, _tensors.HAL_DTYPE[p.dtype]))
            params.append([])
        params[-1].append((name, p))
    return names, params
