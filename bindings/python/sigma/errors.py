"""The exceptions libsigma raises in Python.

Every error from libsigma is a :class:`sigma.Error` whose message is the
library's own (what failed, where and why). Its subclass says what to do
about it: a :class:`TimeoutError` may be retried, an :class:`AbortedError`
is expected after a peer failed (the session recovers), a
:class:`DataLossError` means a checkpoint or snapshot cannot be trusted, an
:class:`InvalidArgumentError` is the caller's mistake (it is also a
``ValueError``).
"""

import builtins

__all__ = [
    "Error",
    "InvalidArgumentError",
    "NotSupportedError",
    "UnavailableError",
    "DeviceLostError",
    "TimeoutError",
    "AbortedError",
    "RemoteError",
    "OutOfMemoryError",
    "DataLossError",
]


class Error(RuntimeError):
    """Any error from libsigma; ``code`` is its stable lower-case name."""

    code = "internal"


class InvalidArgumentError(Error, ValueError):
    """A bad argument, config or input: the caller's to fix."""

    code = "invalid_argument"


class NotSupportedError(Error):
    """The vendor or this build does not do what was asked."""

    code = "not_supported"


class UnavailableError(Error):
    """Something needed is not there: the agent, a device, a disk."""

    code = "unavailable"


class DeviceLostError(Error):
    """The device stopped answering."""

    code = "device_lost"


class TimeoutError(Error, builtins.TimeoutError):
    """A peer or the device did not answer within the bound."""

    code = "timeout"


class AbortedError(Error):
    """The operation was aborted: a peer failed, or the agent ended the job."""

    code = "aborted"


class RemoteError(Error):
    """A peer reported a failure."""

    code = "remote_error"


class OutOfMemoryError(Error, MemoryError):
    """The device or host ran out of memory."""

    code = "out_of_memory"


class DataLossError(Error):
    """A checkpoint or snapshot is damaged or missing: it cannot be trusted."""

    code = "data_loss"
