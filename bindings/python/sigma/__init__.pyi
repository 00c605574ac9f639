# Type stubs of the sigma package, for editors and type checkers.
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple, Union

import torch

from .errors import AbortedError as AbortedError
from .errors import DataLossError as DataLossError
from .errors import DeviceLostError as DeviceLostError
from .errors import Error as Error
from .errors import InvalidArgumentError as InvalidArgumentError
from .errors import NotSupportedError as NotSupportedError
from .errors import OutOfMemoryError as OutOfMemoryError
from .errors import RemoteError as RemoteError
from .errors import TimeoutError as TimeoutError
from .errors import UnavailableError as UnavailableError

StateDict = Mapping[str, Any]

class Decision:
    step: int
    action: str  # "apply", "skip" or "rollback"
    reason: str
    loss: float
    global_norm: float
    clip_factor: float
    loss_scale: float
    next_loss_scale: float
    grad_multiplier: float
    non_finite: int
    non_finite_ranks: List[int]
    mismatch_ranks: List[int]
    rollback_to_step: int
    skip_data_begin: int
    skip_data_end: int
    escalate: List[str]
    deescalate: List[str]
    check_fingerprint: bool
    riders: List[float]

class FingerprintResult:
    step: int
    match: bool
    fingerprints: List[int]
    odd_ranks: List[int]
    rerun_needed: bool
    reason: str

class SaveResult:
    step: int
    path: str
    base: bool
    raw_bytes: int
    stored_bytes: int
    chunks: int
    chunks_unchanged: int
    blocked_s: float
    backpressure_s: float
    persist_s: float

class Loaded:
    step: int
    extra: Any
    path: str
    refused: List[str]

class Replicas(NamedTuple):
    count: int
    size: int
    index: int
    position: int
    epoch: int
    live: List[int]

class Session:
    def __init__(self) -> None: ...
    @staticmethod
    def under_agent() -> bool: ...
    @property
    def rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def generation(self) -> int: ...
    @property
    def ended(self) -> bool: ...
    @property
    def replicas(self) -> Replicas: ...
    def microbatches(self, total: int) -> List[int]: ...
    def shards(self) -> List[Tuple[int, int]]: ...
    def register(
        self,
        model: Optional[torch.nn.Module] = ...,
        optimizer: Optional[torch.optim.Optimizer] = ...,
        tensors: Optional[Dict[str, torch.Tensor]] = ...,
    ) -> None: ...
    def add_state_item(
        self,
        name: str,
        max_bytes: int,
        save: Callable[[], bytes],
        restore: Callable[[bytes], Any],
        kept_on_rollback: bool = ...,
    ) -> None: ...
    def batch(self, step: int) -> int: ...
    def join(self) -> int: ...
    def step_begin(self, step: int) -> None: ...
    def report(self, tokens: int = ..., flops: float = ..., peak_flops: float = ...) -> None: ...
    def step_end(self, step: int, loss: Optional[float] = ..., note: str = ...) -> None: ...
    def should_checkpoint(self, step: int) -> bool: ...
    def should_migrate(self) -> bool: ...
    def rollback(self, index: int) -> int: ...
    def recover(self, failure: Union[Error, str] = ...) -> int: ...
    def restore(self, failure: Union[Error, str] = ...) -> int: ...
    def finish(self, steps_done: int) -> None: ...
    def run(self, total_steps: int, step_fn: Callable[[int], Any]) -> Optional[int]: ...
    def all_reduce(self, tensor: torch.Tensor, op: str = ..., timeout_s: float = ...) -> torch.Tensor: ...
    def broadcast(self, tensor: torch.Tensor, root: int = ..., timeout_s: float = ...) -> torch.Tensor: ...
    def all_gather(self, tensor: torch.Tensor, timeout_s: float = ...) -> torch.Tensor: ...
    def average_gradients(self, model: torch.nn.Module, timeout_s: float = ...) -> None: ...

class Guardrails:
    last_fingerprint: Optional[FingerprintResult]
    def __init__(
        self,
        session: Optional[Session] = ...,
        config: Optional[str] = ...,
        journal: Optional[str] = ...,
        layout: str = ...,
    ) -> None: ...
    def step(
        self,
        model: torch.nn.Module,
        loss: Union[torch.Tensor, float],
        optimizer: torch.optim.Optimizer,
        step: Optional[int] = ...,
    ) -> Decision: ...
    @property
    def loss_scale(self) -> float: ...
    def scale(self, loss: torch.Tensor) -> torch.Tensor: ...
    def escalated(self, layer: str) -> bool: ...
    def save_state(self) -> str: ...
    def restore_state(self, text: str) -> None: ...

class Checkpointer:
    def __init__(
        self,
        directory: str,
        job: str = ...,
        rank: int = ...,
        world: int = ...,
        keep: int = ...,
        base_every: int = ...,
        zstd_level: int = ...,
        async_save: bool = ...,
        direct_io: bool = ...,
        compression: str = ...,
    ) -> None: ...
    def save(
        self,
        step: int,
        model: Union[torch.nn.Module, StateDict],
        optimizer: Union[torch.optim.Optimizer, StateDict, None] = ...,
        extra: Any = ...,
        data_position: int = ...,
    ) -> SaveResult: ...
    def wait(self) -> List[SaveResult]: ...
    def steps(self) -> List[int]: ...
    def load_latest(
        self,
        model: Union[torch.nn.Module, StateDict],
        optimizer: Union[torch.optim.Optimizer, StateDict, None] = ...,
        newest_step: Optional[int] = ...,
    ) -> Optional[Loaded]: ...

class HealthMonitor:
    def __init__(
        self,
        warn_c: Optional[float] = ...,
        critical_c: Optional[float] = ...,
        heartbeat_timeout_s: Optional[float] = ...,
    ) -> None: ...
    def observe(self, device: int, t: float, **readings: float) -> None: ...
    def heartbeat(self, device: int, t: float) -> None: ...
    def step(self, device: int, step: int, seconds: float, t: float) -> None: ...
    def evaluate(self, t: float) -> int: ...
    def device(self, device: int) -> Dict[str, Any]: ...

def plan(request: str, top: int = ...) -> Dict[str, Any]: ...

class ProcessGroup(torch.distributed.ProcessGroup):
    failure: Optional[Error]
    def __init__(self, session: Session, rank: int, size: int, timeout_s: float = ...) -> None: ...
    def getBackendName(self) -> str: ...
    def allreduce(self, tensors: List[torch.Tensor], opts: Any = ...) -> Any: ...
    def broadcast(self, tensors: List[torch.Tensor], opts: Any = ...) -> Any: ...
    def allgather(self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor], opts: Any = ...) -> Any: ...
    def barrier(self, opts: Any = ...) -> Any: ...
    def reduce_scatter(self, output_tensors: List[torch.Tensor], input_tensors: List[List[torch.Tensor]], opts: Any = ...) -> Any: ...
    def send(self, tensors: List[torch.Tensor], dst: int, tag: int) -> Any: ...
    def recv(self, tensors: List[torch.Tensor], src: int, tag: int) -> Any: ...
    def take_failure(self) -> Optional[Error]: ...

def init_process_group(timeout_s: float = ...) -> Session: ...
def run(
    total_steps: int,
    step_fn: Callable[[int], Any],
    model: Optional[torch.nn.Module] = ...,
    optimizer: Optional[torch.optim.Optimizer] = ...,
) -> Optional[int]: ...
