"""sigma.Checkpointer: asynchronous differential checkpoints of state dicts."""

import json
import threading

import torch

from . import _sigma, _tensors
from .errors import InvalidArgumentError


class Loaded:
    """What :meth:`Checkpointer.load_latest` restored."""

    def __init__(self, result, step, extra):
        self.step = step  #: the step the checkpoint was saved at
        self.extra = extra  #: the ``extra`` given to save()
        self.path = result.path
        self.refused = list(result.refused)  #: newer checkpoints refused, and why

    def __repr__(self):
        return f"<sigma.Loaded step {self.step} from {self.path}>"


class Checkpointer:
    """Checkpoints of a model and an optimizer with libsigma's engine:
    chunks stored zstd-compressed or raw, whichever makes neither the save
    nor the restore slower on this machine (``compression="automatic"``;
    ``"always"`` or ``"never"`` force it), a differential save against the
    last full base (unchanged chunks are not written), every byte hashed, a
    shard committed atomically.

    ``save`` copies the tensors once into the engine's reused staging memory
    and returns; a background writer compresses and persists while training
    goes on (``async_save=False``: durable on return). A failure of the
    writer (a full disk) is raised by the next save or :meth:`wait`, and
    the older checkpoints stay. ``load_latest`` restores the newest
    checkpoint that passes every check into the same tensors, in place.

    model / optimizer arguments may be a ``torch.nn.Module`` and a
    ``torch.optim.Optimizer`` (recommended: an optimizer that has not
    stepped yet gets its state created so that it can be loaded into) or
    their ``state_dict()``s. Tensors must be on the CPU; non-contiguous ones
    cost one extra copy. Any dtype PyTorch has round-trips bit-exactly.
    """

    def __init__(self, directory, job="job", rank=0, world=1, keep=3, base_every=8, zstd_level=1,
                 async_save=True, direct_io=True, compression="automatic"):
        self._engine = _sigma.CheckpointEngine(
            str(directory), job, rank, world, keep, base_every, zstd_level, direct_io, compression
        )
        self._async = async_save
        self._lock = threading.Lock()  # the engine takes one caller at a time; its waits release the GIL

    def save(self, step, model, optimizer=None, extra=None, data_position=0):
        """Saves ``step``; returns the engine's :class:`SaveResult` (with
        ``async_save`` the part known when the copy is done: ``blocked_s``).
        ``extra``: anything ``json.dumps`` takes, given back by load_latest."""
        named, meta = _flatten(model, optimizer, materialize=True)
        meta["sigma.extra"] = json.dumps(extra)
        keep_alive = [t.contiguous() for _, t in named]
        views = [_tensors.view(name, t) for (name, _), t in zip(named, keep_alive)]
        with self._lock:
            return self._engine.save(views, int(step), int(data_position), meta, self._async)

    def wait(self):
        """Until every save is durable; raises the first failure. Returns
        the saves that became durable since the last wait()."""
        with self._lock:
            return self._engine.wait()

    def steps(self):
        """This rank's committed checkpoints, newest first."""
        return self._engine.steps()

    def load_latest(self, model, optimizer=None, newest_step=None):
        """Restores the newest good checkpoint into ``model`` / ``optimizer``
        in place. Returns :class:`Loaded`, or None when there is none.
        Raises :class:`sigma.DataLossError` when checkpoints exist but none
        passes its checks, :class:`sigma.InvalidArgumentError` when the good
        one does not match these structures."""
        with self._lock:
            self._engine.wait()
            if not self._engine.steps():
                return None
            named, mine = _flatten(model, optimizer, materialize=True)
            # Restored into staging copies first: nothing of the caller's
            # changes unless every tensor matches what was saved.
            staged = [t.detach().clone(memory_format=torch.contiguous_format) for _, t in named]
            views = [_tensors.view(name, t) for (name, _), t in zip(named, staged)]
            newest = (1 << 64) - 1 if newest_step is None else int(newest_step)
            result, step, meta = self._engine.restore(views, newest)
        saved = json.loads(meta.get("sigma.tensors", "{}"))
        for name, spec in json.loads(mine["sigma.tensors"]).items():
            if name in saved and saved[name] != spec:
                raise InvalidArgumentError(
                    f"checkpoint {result.path}: tensor '{name}' was saved as {saved[name][0]} {saved[name][1]}, "
                    f"not {spec[0]} {spec[1]}; nothing was loaded"
                )
        with torch.no_grad():
            for (_, t), s in zip(named, staged):
                t.copy_(s)
        if isinstance(optimizer, torch.optim.Optimizer):
            if "sigma.param_groups" in meta:
                _tensors.restore_param_groups(optimizer, meta["sigma.param_groups"])
            for index, values in json.loads(meta.get("sigma.optim_scalars", "{}")).items():
                p = _tensors.optimizer_params(optimizer)[int(index)]
                optimizer.state[p].update(values)
        return Loaded(result, step, json.loads(meta.get("sigma.extra", "null")))


def _flatten(model, optimizer, materialize):
    """(name, tensor) of the model's and optimizer's state, and metadata."""
    meta = {}
    state = model.state_dict() if isinstance(model, torch.nn.Module) else model
    if not isinstance(state, dict):
        raise InvalidArgumentError(f"Checkpointer: model must be a Module or a state dict, not {type(model).__name__}")
    named = _tensors.state_dict_tensors("model", state)
    if isinstance(optimizer, torch.optim.Optimizer):
        if materialize:
            _tensors.materialize(optimizer)
        tensors, scalars = _tensors.optimizer_tensors(optimizer)
        named += tensors
        meta["sigma.param_groups"] = _tensors.param_groups_json(optimizer)
        meta["sigma.optim_scalars"] = json.dumps(scalars)
    elif isinstance(optimizer, dict):
        named += _tensors.state_dict_tensors("optim", optimizer.get("state", {}))
    elif optimizer is not None:
        raise InvalidArgumentError(
            f"Checkpointer: optimizer must be an Optimizer or a state dict, not {type(optimizer).__name__}"
        )
    meta["sigma.tensors"] = json.dumps({name: [str(t.dtype), list(t.shape)] for name, t in named})
    return named, meta
