"""sigma.Session: a PyTorch script's side of ``sigmarun``."""

import os
from typing import NamedTuple

import torch

from . import _sigma, _tensors
from .errors import Error, InvalidArgumentError, NotSupportedError

# The guardrails' policy travels with the state (a state item of the
# session: a restored rank decides as the others do); the data windows
# they skipped are the native session's own.
_POLICY_BYTES = 56 << 10

_REDUCE = {
    "sum": _sigma.REDUCE_SUM,
    "prod": _sigma.REDUCE_PROD,
    "min": _sigma.REDUCE_MIN,
    "max": _sigma.REDUCE_MAX,
    "avg": _sigma.REDUCE_AVG,
}


class Replicas(NamedTuple):
    """:attr:`Session.replicas`."""

    count: int
    size: int
    index: int
    position: int
    epoch: int
    live: list


class Session:
    """The worker's session with the agent that ``sigmarun`` started it under.

    It connects, self-tests the device, waits for a rank (a spare waits here,
    warm), sends heartbeats from its own thread, keeps the registered state
    (model and optimizer) in the memory tier and in disk checkpoints, and
    restores it after a failure. Use :meth:`run` for the whole loop::

        session = sigma.Session()
        session.register(model, optimizer)
        session.run(steps, train_step)     # train_step(step) runs one step

    Raises :class:`sigma.InvalidArgumentError` outside ``sigmarun`` (its
    environment is missing) and :class:`sigma.UnavailableError` when the
    agent cannot be reached. One per process; its methods are for the
    training thread.
    """

    def __init__(self):
        self._native = _sigma.Session()
        self._guardrails = None
        self._policy = ""  # the guardrails' policy restored before any were bound
        self._decision = None
        self._report = {}
        self._snapshot_every = int(os.environ.get("SIGMA_SNAPSHOT_EVERY", "1") or 1)
        self._state = []  # (name, tensor, address) as registered
        self._current_step = 0
        self._native.add_state_item(
            "guardrails", _POLICY_BYTES, self._save_policy, self._restore_policy, kept_on_rollback=True
        )

    @staticmethod
    def under_agent():
        """True when this process was started by ``sigmarun``."""
        return _sigma.Session.under_agent()

    @property
    def rank(self):
        return self._native.rank

    @property
    def world_size(self):
        return self._native.world_size

    @property
    def generation(self):
        """Counts communicators: it grows each time the job is rebuilt."""
        return self._native.generation

    @property
    def replicas(self):
        """The job's data-parallel replicas (``sigmarun --replica-size``):
        ``count`` replicas of ``size`` ranks, this rank at ``position`` of
        replica ``index``; ``live`` the replicas stepping now (under
        ``--recovery contained`` a fault stops only its replica), numbered
        by ``epoch``. Without a layout: one replica, the whole world."""
        return Replicas(*self._native.replicas)

    def microbatches(self, total):
        """The micro-batches of a step of ``total`` this replica computes:
        micro-batch m goes to the (m mod live)-th live replica, so each is
        computed once whichever replicas are live. All of them without a
        layout; none on a rank that replays a peer's steps to rejoin."""
        return self._native.microbatches(total)

    def shards(self):
        """The slices of each step's batch this rank computes, as (index,
        of) pairs: without replicas its own (rank, world_size); with
        replicas the micro-batches of a step of ``replicas.count`` this
        replica takes now (its own, and a stopped replica's while it is
        out). Sum each shard's mean loss; :meth:`average_gradients` gives
        the global batch's mean whichever replicas are live."""
        r = self.replicas
        if r.count == 1:
            return [(self.rank, self.world_size)]
        return [(m, r.count) for m in self.microbatches(r.count)]

    @property
    def ended(self):
        """True once the agent retired this worker or ended the job."""
        return self._native.ended

    # ---- state --------------------------------------------------------------

    def register(self, model=None, optimizer=None, tensors=None):
        """What the memory tier and disk checkpoints hold: the model's
        ``state_dict()`` tensors, the optimizer's state (created now if the
        optimizer has not stepped yet) and any further named tensors. The
        tensors must stay where they are (in-place updates, as
        ``torch.optim`` does) and be contiguous CPU tensors. Call before
        :meth:`join` / :meth:`run`."""
        named = []
        if model is not None:
            named += _tensors.state_dict_tensors("model", model.state_dict(keep_vars=True))
        if optimizer is not None:
            _tensors.materialize(optimizer)
            optim, scalars = _tensors.optimizer_tensors(optimizer)
            if scalars:
                raise InvalidArgumentError(
                    f"Session.register: the optimizer keeps non-tensor state {scalars}; the session snapshots tensors"
                )
            named += optim
        for name, t in (tensors or {}).items():
            named.append((f"user/{name}", t))
        views = [_tensors.view(name, t.detach(), f"Session.register: '{name}'", any_order=True) for name, t in named]
        self._native.set_state(views)
        # The session holds their addresses: the tensors are kept alive here,
        # and step_end checks that none was replaced.
        self._state = [(name, t, t.data_ptr()) for name, t in named]

    def add_state_item(self, name, max_bytes, save, restore, kept_on_rollback=False):
        """A non-tensor piece of the state (a data cursor, a schedule's
        position) kept with the tensors in every snapshot and checkpoint:
        ``save()`` returns its bytes (at most ``max_bytes``) when one is
        taken, ``restore(data)`` gets back those of the state restored.
        ``kept_on_rollback``: a rollback leaves it as it is. Before
        :meth:`join` / :meth:`run`."""
        self._native.add_state_item(f"user/{name}", max_bytes, save, restore, kept_on_rollback)

    def batch(self, step):
        """The data batch of ``step``: the step's index moved past the
        windows the guardrails skipped (a loss spike's data)."""
        return self._native.batch_of(step)

    # ---- the loop -----------------------------------------------------------

    def join(self):
        """Waits for a rank, builds the communicator, restores the state
        when this worker replaces a rank; returns the next step to run.
        Raises :class:`sigma.AbortedError` for a spare the job never needed."""
        return self._native.join()

    def step_begin(self, step):
        self._decision = None
        self._report = {}
        self._current_step = step
        self._native.step_begin(step)

    def report(self, tokens=0, flops=0.0, peak_flops=0.0):
        """Figures of the current step for the progress line and the job's
        report (tokens and FLOPs of the whole job, the devices' peak)."""
        self._report = {"tokens": int(tokens), "flops": float(flops), "peak_flops": float(peak_flops)}

    def step_end(self, step, loss=None, note=""):
        """Ends a step: reports it, snapshots the state when due (a
        collective), saves a disk checkpoint when due. Raises
        :class:`sigma.AbortedError` when the agent asked the job to stop here
        (a migration)."""
        self._check_state()
        self._native.step_end(step, loss=loss, note=note, **self._report)

    def _check_state(self):
        for name, t, addr in self._state:
            if t.data_ptr() != addr:
                raise InvalidArgumentError(
                    f"Session: the registered tensor '{name}' moved (replaced by load_state_dict, .data =, a "
                    "resize?); snapshots would copy the old memory: update it in place, or register again"
                )

    def should_checkpoint(self, step):
        return self._native.should_checkpoint(step)

    def should_migrate(self):
        return self._native.should_migrate()

    def rollback(self, index):
        """Copies this rank's memory-tier snapshot ``index`` (steps done)
        back into the state; every rank decides alike, no byte moves between
        ranks. The guardrails' policy and skipped windows stay as they are
        now. Returns ``index``, the next step to run."""
        return self._native.rollback(index)

    def recover(self, failure=""):
        """After a libsigma error in a step: waits for the new assignment,
        restores the agreed state, returns the next step. ``failure`` is the
        ``sigma.Error`` that was raised (its code goes to the agent as it is:
        a device that reports itself lost is replaced without being waited
        for), or words for a failure of one's own (its code then reads as
        unknown)."""
        if isinstance(failure, Error):
            return self._native.recover(f"{failure.code}: {failure}", failure.code)
        return self._native.recover(str(failure))

    restore = recover  # the name PyTorch users look for

    def finish(self, steps_done):
        self._native.finish(steps_done)

    def run(self, total_steps, step_fn):
        """join, ``step_fn(step)`` for each step with step_begin / step_end
        around it, recovery from libsigma errors, finish: the native
        session's loop. Returns the steps done, or None when the agent
        retired this worker (a spare never used, or a worker moved off a
        suspect device). A guardrails decision taken in the step (rollback,
        skip) is carried out there; the caller's mistakes
        (:class:`sigma.InvalidArgumentError`) and other exceptions end it."""
        return self._native.run(total_steps, lambda step, batch: self._step(step_fn, step))

    def _step(self, step_fn, step):
        """One step of the native loop: the script's, then what it decided
        as (loss, tokens, flops, peak_flops, note, rollback)."""
        self._decision = None
        self._report = {}
        self._current_step = step
        step_fn(step)
        self._check_state()
        d = self._decision
        if d is not None and d.action == "rollback":
            return (None, 0, 0.0, 0.0, "", (d.rollback_to_step + 1, d.skip_data_begin, d.skip_data_end, d.reason))
        note = f"skipped: {d.reason}" if d is not None and d.action != "apply" else ""
        r = self._report
        loss = None if d is None else d.loss
        return (loss, r.get("tokens", 0), r.get("flops", 0.0), r.get("peak_flops", 0.0), note, None)

    # ---- collectives ----------------------------------------------------------

    def all_reduce(self, tensor, op="sum", timeout_s=60.0):
        """In place over every rank ("sum", "prod", "min", "max", "avg")."""
        if op not in _REDUCE:
            raise InvalidArgumentError(f"all_reduce: op '{op}' is not one of {sorted(_REDUCE)}")
        return self._collective("all_reduce", tensor, _REDUCE[op], 0, timeout_s)

    def broadcast(self, tensor, root=0, timeout_s=60.0):
        """In place: every rank gets ``root``'s tensor."""
        return self._collective("broadcast", tensor, _sigma.REDUCE_SUM, root, timeout_s)

    def all_gather(self, tensor, timeout_s=60.0):
        """A new tensor [world_size, *tensor.shape] of every rank's tensor."""
        self._check_collective_dtype(tensor, "all_gather")
        out = torch.empty((self.world_size,) + tuple(tensor.shape), dtype=tensor.dtype, device=tensor.device)
        out[self.rank].copy_(tensor)
        self._collective("all_gather", out, _sigma.REDUCE_SUM, 0, timeout_s, count=tensor.numel())
        return out

    def _collective(self, op, tensor, reduce, root, timeout_s, count=None):
        """CPU tensors are staged through the device's memory (any vendor);
        a CUDA tensor goes to the `cuda` vendor's communicator as it is,
        after torch's stream has finished writing it."""
        self._check_collective_dtype(tensor, op)
        count = tensor.numel() if count is None else count
        if isinstance(tensor, torch.Tensor) and tensor.device.type == "cuda":
            if self._native.vendor != "cuda":
                raise NotSupportedError(
                    f"{op}: a CUDA tensor needs the cuda vendor; this job runs '{self._native.vendor}'"
                )
            if not tensor.is_contiguous():
                raise InvalidArgumentError(f"{op}: not contiguous (call .contiguous() first)")
            torch.cuda.current_stream(tensor.device).synchronize()
            dtype = _tensors.HAL_DTYPE[tensor.dtype]
            self._native.device_collective(op, tensor.data_ptr(), count, dtype, reduce, root, timeout_s)
            return tensor
        _, dtype, _, addr = _tensors.view("", tensor, op)
        if op == "all_reduce":
            self._native.all_reduce(addr, count, dtype, reduce, timeout_s)
        elif op == "broadcast":
            self._native.broadcast(addr, count, dtype, root, timeout_s)
        else:
            self._native.all_gather(addr, count, dtype, timeout_s)
        return tensor

    def average_gradients(self, model, timeout_s=60.0):
        """Data parallelism: every parameter's gradient replaced by its mean
        over the batch's shards (:meth:`shards`), in one collective over one
        flat buffer: over the ranks, or with replicas over the live
        replicas (the data-parallel group). With replicas a step is void
        when a replica went out during it: :class:`sigma.AbortedError`,
        and :meth:`run` runs the step again with the shards shared anew.
        Nothing may be applied before this returns."""
        replicas = self.replicas.count
        if replicas > 1:
            # A rank with no shard (replaying a peer's steps) still takes
            # part: its buffer has every parameter's place.
            for p in model.parameters():
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        if replicas > 1:
            _, dtype, _, addr = _tensors.view("", flat, "average_gradients")
            self._native.data_parallel_all_reduce(addr, flat.numel(), dtype, _sigma.REDUCE_SUM, timeout_s)
            flat.div_(replicas)
        else:
            self.all_reduce(flat, "sum", timeout_s)
            flat.div_(self.world_size)
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    def _replicas_mean(self, value, finite=True, timeout_s=60.0):
        """With replicas: the mean over the live replicas of a figure each
        rank sums over its shards (a loss), the same on every replica; NaN
        when any rank says ``finite`` False. A void step raises as
        :meth:`average_gradients` does."""
        buf = torch.tensor([value, 0.0 if finite else 1.0], dtype=torch.float64)
        _, dtype, _, addr = _tensors.view("", buf, "the loss")
        self._native.data_parallel_all_reduce(addr, 2, dtype, _sigma.REDUCE_SUM, timeout_s)
        return float("nan") if buf[1] > 0 else float(buf[0]) / self.replicas.count

    @staticmethod
    def _check_collective_dtype(tensor, what):
        if not isinstance(tensor, torch.Tensor):
            raise InvalidArgumentError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dtype not in _tensors.HAL_DTYPE:
            raise InvalidArgumentError(f"{what}: dtype {tensor.dtype} is not one the HAL reduces")

    # ---- the guardrails' policy, a state item --------------------------------

    def _bind(self, guardrails):
        self._guardrails = guardrails
        if self._policy:
            guardrails.restore_state(self._policy)

    def _save_policy(self):
        return (self._guardrails.save_state() if self._guardrails is not None else self._policy).encode()

    def _restore_policy(self, raw):
        self._policy = raw.decode()
        if self._guardrails is not None and self._policy:
            self._guardrails.restore_state(self._policy)
