"""libsigma for PyTorch scripts.

- :func:`init_process_group`, :func:`run`: ``torch.distributed`` (DDP) on the
  job's communicator, surviving faults (:mod:`sigma.distributed`).
- :class:`Session`: a worker's side of ``sigmarun`` (heartbeats, memory-tier
  snapshots, restore after a failure, the HAL's collectives on tensors).
- :class:`Guardrails`: skip, clip, loss scale, roll back, escalate, around
  any ``torch.optim`` optimizer.
- :class:`Checkpointer`: asynchronous differential checkpoints of state
  dicts.
- :func:`plan`: the planner's best parallel layouts for a model and devices.
- :class:`HealthMonitor`: per-device health from readings and heartbeats.
- :mod:`sigma.errors`: the exceptions, one class per kind of failure.

See docs/python.md.
"""

from . import errors
from .errors import *  # noqa: F401,F403
from . import _sigma
from .checkpointer import Checkpointer, Loaded
from .distributed import ProcessGroup, init_process_group, run
from .guardrails import Guardrails
from .health import HealthMonitor
from .planner import plan
from .session import Replicas, Session

Decision = _sigma.Decision
SaveResult = _sigma.SaveResult
FingerprintResult = _sigma.FingerprintResult

__all__ = ["init_process_group", "run", "ProcessGroup", "Session", "Replicas", "Guardrails", "Checkpointer", "Loaded", "Decision", "SaveResult", "FingerprintResult", "plan", "HealthMonitor"] + errors.__all__
