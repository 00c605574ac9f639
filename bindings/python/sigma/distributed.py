"""torch.distributed over the job's HAL communicator: a script written for
``DistributedDataParallel`` adopts libsigma with ``init_process_group`` and
``run`` (docs/python.md).

What this relies on in torch (1.13, Debian's ``python3-torch``):

- ``torch.distributed.ProcessGroup`` may be subclassed from Python (its
  pybind trampoline forwards ``allreduce``, ``broadcast``, ``allgather``,
  ``reduce_scatter``, ``barrier``, ``send``, ``recv`` and
  ``getBackendName``); an op the trampoline does not forward is refused by
  torch's base class.
- A collective returns a ``Work`` made by
  ``torch._C._distributed_c10d._create_work_from_future`` from a completed
  future. A Python ``Work`` subclass hangs DDP's construction in
  ``_verify_param_shape_across_processes``.
- ``Backend.register_backend`` with a creator ``(store, rank, size, timeout)``.
- DDP's private ``_build_params_for_reducer``,
  ``_build_debug_param_to_name_mapping``, ``_ddp_init_helper`` and
  ``reducer._set_static_graph`` rebuild a wrapper's reducer after a recovery
  (as DDP's own ``__setstate__`` does), so that every rank (survivors and
  the replacement) starts the same bucket layout and the same bucket
  rebuild; ``torch.distributed.utils._sync_module_states`` broadcasts rank
  0's module state after a recovery that starts afresh, as DDP's
  constructor does.
"""

import datetime
import queue
import sys
import threading

import torch
import torch.distributed as dist
from torch.distributed.utils import _sync_module_states as _broadcast_module_states

from .errors import AbortedError, NotSupportedError
from .session import Session

BACKEND = "sigma"

_session = None  # the process's Session, made by init_process_group


class ProcessGroup(dist.ProcessGroup):
    """A ``torch.distributed`` process group whose collectives run on a
    :class:`Session`'s communicator (CPU tensors staged through the device,
    CUDA tensors on the ``cuda`` vendor's as they are). All-reduces run on
    the group's own thread (:class:`_Collectives`), so that DDP's backward
    computes on while a bucket is reduced, as with torch's own backends;
    the other ops wait for those before them and run at once (torch calls
    some of them with the GIL held and waits). A libsigma failure (a peer
    lost, the agent's abort) is kept until the session's recovery takes it:
    an op on the calling thread raises its ``sigma`` exception (torch may
    rethrow it wrapped); one on the group's thread leaves its tensors as
    they were, and the next op or :func:`run` at the step's end raises it.
    On a worker whose peers are in their recovery (a replacement building
    its model before :meth:`Session.join`), collectives are answered from
    this rank alone: its state comes from the restore."""

    def __init__(self, session, rank, size, timeout_s=60.0):
        super().__init__(rank, size)
        self._session = session
        self._timeout_s = timeout_s
        self._collectives = _Collectives()

    def getBackendName(self):  # noqa: N802 (torch's name)
        return BACKEND

    @property
    def failure(self):
        """The failure an op met since the last recovery, or None."""
        return self._collectives.failure

    # ---- the ops DDP calls ----------------------------------------------

    def allreduce(self, tensors, opts=None):
        op = _reduce_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        timeout = self._timeout_s
        return self._run(lambda s: [s.all_reduce(t, op, timeout) for t in tensors], tensors, background=True)

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        timeout = self._timeout_s
        return self._run(lambda s: [s.broadcast(t, root, timeout) for t in tensors], tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        def gather(s):
            for outs, t in zip(output_tensors, input_tensors):
                if len(outs) != self.size():
                    raise NotSupportedError(f"allgather: {len(outs)} outputs for a world of {self.size()}")
                every = s.all_gather(t, self._timeout_s)
                for r, out in enumerate(outs):
                    out.copy_(every[r])

        return self._run(gather, [o for outs in output_tensors for o in outs])

    def barrier(self, opts=None):
        one = torch.ones(1)
        return self._run(lambda s: s.all_reduce(one, "sum", self._timeout_s), [one])

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        """An all-reduce of every rank's inputs, this rank keeping its part:
        the HAL has no reduce-scatter, so this moves world times the bytes."""
        op = _reduce_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)

        def reduce_scatter(s):
            for out, ins in zip(output_tensors, input_tensors):
                flat = torch.cat([t.reshape(-1) for t in ins])
                s.all_reduce(flat, op, self._timeout_s)
                n = out.numel()
                out.copy_(flat[self.rank() * n : (self.rank() + 1) * n].view_as(out))

        return self._run(reduce_scatter, output_tensors)

    def send(self, tensors, dst, tag):
        raise NotSupportedError("send: the HAL's communicator has collectives only (no point-to-point)")

    def recv(self, tensors, src, tag):
        raise NotSupportedError("recv: the HAL's communicator has collectives only (no point-to-point)")

    # ---- one op ------------------------------------------------------------

    def _run(self, op, results, background=False):
        """``op(session)`` as Work: answered alone while this worker's peers
        are in their recovery, else in issue order on the group's thread
        (``background``: returned at once) or after the ops before it."""
        fut = torch.futures.Future()
        if self._session._native.restore_pending:
            op(_Alone(self._session.rank, self._session.world_size))
            fut.set_result(results)
        elif background:
            self._collectives.submit(lambda: op(self._session), fut, results)
        else:
            self._collectives.drain()
            self._collectives.run_here(lambda: op(self._session))
            fut.set_result(results)
        return torch._C._distributed_c10d._create_work_from_future(fut)

    def take_failure(self):
        """The libsigma failure an op raised since the last call, or None;
        every op issued before runs (or fails) first."""
        self._collectives.drain()
        return self._collectives.take_failure()


class _Collectives:
    """One thread that runs a group's ops in the order they were issued
    (every rank issues the same order). After a failure the ops queued
    behind it are not run, and every op issued raises it, until the failure
    is taken: the communicator they would run on is the failed
    generation's."""

    def __init__(self):
        self._queue = queue.SimpleQueue()
        self._idle = threading.Condition()
        self._queued = 0
        self.failure = None
        threading.Thread(target=self._serve, name="sigma-collectives", daemon=True).start()

    def submit(self, op, fut, results):
        if self.failure is not None:
            raise self.failure
        with self._idle:
            self._queued += 1
        self._queue.put((op, fut, results))

    def drain(self):
        with self._idle:
            self._idle.wait_for(lambda: self._queued == 0)

    def take_failure(self):
        f, self.failure = self.failure, None
        return f

    def run_here(self, op):
        """``op()`` on the calling thread, once the queue is drained; its
        failure is raised and kept as a queued op's is."""
        if self.failure is not None:
            raise self.failure
        try:
            op()
        except Exception as e:
            self.failure = e
            raise

    def _serve(self):
        while True:
            op, fut, results = self._queue.get()
            try:
                if self.failure is None:
                    op()
            except Exception as e:  # raised to the caller by the next op or take_failure
                self.failure = e
            # Completed even after a failure: torch 1.13 crashes in DDP's
            # backward on a future failed from another thread. The tensors
            # are left as they were; the failure is raised by the next op on
            # the calling thread and by sigma.run at the step's end, before
            # the step counts.
            fut.set_result(results)
            with self._idle:
                self._queued -= 1
                self._idle.notify_all()


class _Alone:
    """A session's collectives as one rank sees them when it stands for all."""

    def __init__(self, rank, world):
        self.rank, self.world_size = rank, world

    def all_reduce(self, tensor, op, timeout_s):
        if op in ("sum",):
            tensor.mul_(self.world_size)
        elif op == "prod":
            tensor.pow_(self.world_size)
        return tensor

    def broadcast(self, tensor, root, timeout_s):
        return tensor

    def all_gather(self, tensor, timeout_s):
        return tensor.unsqueeze(0).expand((self.world_size,) + tuple(tensor.shape))


class _Store(dist.Store):
    """The store torch wants beside a process group. This backend needs
    none (the session's communicator is built); torch uses it for the
    barrier that ends ``init_process_group`` and ``new_group``, which this
    store carries out as a real barrier on the job's communicator (answered
    alone by a restoring worker, whose peers are in the restore). Other
    keys are this process's own."""

    def __init__(self):
        super().__init__()
        self._values = {}

    def set(self, key, value):
        self._values[key] = value

    def get(self, key):
        if key not in self._values:
            raise NotSupportedError(f"store: '{key}' is not set in this process (the sigma backend shares no store)")
        return self._values[key]

    def add(self, key, amount):
        if key.startswith(dist.distributed_c10d.STORE_BASED_BARRIER_PREFIX) and amount > 0:
            # On the default group (torch sets it before this barrier): in
            # order after its queued all-reduces, alone where it answers alone.
            count = torch.ones(1, dtype=torch.int64)
            group = dist.distributed_c10d._get_default_group()
            group._run(lambda s: s.all_reduce(count, "sum", group._timeout_s), [count])
            amount = int(count.item())
        self._values[key] = int(self._values.get(key, 0)) + amount
        return self._values[key]

    def wait(self, keys, timeout=None):
        missing = [k for k in keys if k not in self._values]
        if missing:
            raise NotSupportedError(f"store: waits for {missing}, which no rank of the sigma backend sets")


def _reduce_name(op):
    names = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "prod", dist.ReduceOp.MIN: "min", dist.ReduceOp.MAX: "max"}
    avg = getattr(dist.ReduceOp, "AVG", None)
    if avg is not None:
        names[avg] = "avg"
    for k, v in names.items():
        if op == k:
            return v
    raise NotSupportedError(f"reduce op {op}: the HAL reduces with sum, prod, min, max and avg")


def _create(store, rank, size, timeout):
    if _session is None:
        raise NotSupportedError('backend "sigma": call sigma.init_process_group() (it joins the job first)')
    if size != _session.world_size or rank != _session.rank:
        raise NotSupportedError(
            f'backend "sigma": a group of {size} ranks (this one {rank}) in a world of {_session.world_size}: '
            "the job's communicator serves the whole world only (no sub-groups)"
        )
    return ProcessGroup(_session, rank, size, timeout.total_seconds())


def init_process_group(timeout_s=60.0):
    """``torch.distributed.init_process_group`` for a worker under
    ``sigmarun``: connects the :class:`Session`, waits for a rank (a spare
    waits here, warm; one the job never needed exits the process with
    status 0) and makes the default process group the job's communicator.
    Returns the session."""
    global _session
    if _session is None:
        _session = Session()
        try:
            _session._native.wait_for_rank()
        except AbortedError:
            if _session.ended:
                sys.exit(0)  # a spare the job never needed
            raise
    dist.Backend.register_backend(BACKEND, _create)
    dist.init_process_group(
        BACKEND,
        store=_Store(),
        rank=_session.rank,
        world_size=_session.world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return _session


def run(total_steps, step_fn, model=None, optimizer=None):
    """The training loop for a script on :func:`init_process_group`:
    registers ``model`` (a ``DistributedDataParallel`` or a module) and
    ``optimizer`` with the session, runs ``step_fn(step)`` for each step
    and recovers from failures (the state restored, DDP's reducers rebuilt
    alike on every rank). Returns the steps done. A worker the job no
    longer needs (the agent moved its rank off a failing device) exits the
    process here with status 0, so that what the script does after the loop
    (rank 0 saving the model) is done once, by the worker that finished."""
    if _session is None:
        raise NotSupportedError("sigma.run: call sigma.init_process_group() first")
    session = _session
    if session.replicas.count > 1:
        raise NotSupportedError(
            "sigma.run: DDP all-reduces over the whole world, so --recovery contained (replicas of "
            f"{session.replicas.size} ranks) cannot stop one replica alone; run it with --recovery exact"
        )
    session.register(_unwrapped(model), optimizer)
    group = dist.distributed_c10d._get_default_group()
    take_failure = group.take_failure if isinstance(group, ProcessGroup) else lambda: None
    wrappers = [model] if isinstance(model, torch.nn.parallel.DistributedDataParallel) else []

    def step(k):
        try:
            step_fn(k)
        except Exception as e:
            failure = take_failure()
            if failure is not None and failure is not e:
                raise failure from e
            raise
        # Nothing in flight while the step's snapshot is taken, and an
        # all-reduce that failed on the group's thread voids the step.
        failure = take_failure()
        if failure is not None:
            raise failure

    def on_generation(next_step):
        take_failure()
        for ddp in wrappers:
            _reset_reducer(ddp)
            # A restore gives every rank the same module state; a later
            # generation that starts afresh has none to give.
            if next_step == 0 and session.generation > 1:
                _sync_module_states(ddp)

    done = session._native.run(total_steps, lambda k, batch: session._step(step, k), on_generation)
    if done is None:
        sys.exit(0)  # retired: another worker holds this rank now
    return done


def _unwrapped(model):
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return model.module
    return model


def _sync_module_states(ddp):
    """Rank 0's parameters and buffers on every rank, as DDP's constructor
    broadcasts them: a worker that built its model while its peers were in
    their recovery (answered alone) holds rank 0's state after this where
    the job started afresh with nothing restored."""
    _broadcast_module_states(ddp.module, ddp.process_group, ddp.broadcast_bucket_size, 0, ddp.parameters_to_ignore)


def _reset_reducer(ddp):
    """A fresh reducer, as DDP's constructor builds it (and as its
    ``__setstate__`` rebuilds one): the first bucket layout and a bucket
    rebuild to come, the same on every rank; the old reducer's autograd
    hooks go with it."""
    parameters, expect_sparse = ddp._build_params_for_reducer()
    names = ddp._build_debug_param_to_name_mapping(parameters)
    ddp._ddp_init_helper(parameters, expect_sparse, names, ddp.static_graph)
    if ddp.static_graph:
        ddp.reducer._set_static_graph()
        ddp.logger._set_static_graph()


__all__ = ["ProcessGroup", "init_process_group", "run", "BACKEND"]
