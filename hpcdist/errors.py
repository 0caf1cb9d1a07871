"""Errors raised by hpcdist.

Every error that involves several ranks says which ranks, which operation and what each rank
sent, so that a failure on a large job can be read from any one rank's log.
"""

from __future__ import annotations

__all__ = [
    "AbortedError",
    "CancelledError",
    "ClusterConfigError",
    "CollectiveMismatchError",
    "DataLossError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "HpcdistError",
    "InvalidArgumentError",
    "NotFoundError",
    "OutOfRangeError",
    "UnavailableError",
    "WorkerPreemptedError",
]


class HpcdistError(Exception):
    """Base class of every error hpcdist raises on purpose."""


class DeadlineExceededError(HpcdistError, TimeoutError):
    """A collective did not complete within `timeout_seconds`.

    Attributes:
        missing_ranks: The ranks that had not joined the collective when the deadline passed
            (empty when they could not be determined).
    """

    def __init__(self, message: str, missing_ranks: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.missing_ranks = tuple(missing_ranks)


class CollectiveMismatchError(HpcdistError, ValueError):
    """Ranks called different collectives, or the same one with different shapes or dtypes.

    Raised on every rank of the communicator, with the same message everywhere.

    Attributes:
        descriptions: What each rank sent, indexed by rank.
    """

    def __init__(self, message: str, descriptions: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.descriptions = tuple(descriptions)


class UnavailableError(HpcdistError, RuntimeError):
    """A resource (a communicator, a worker, a device) can no longer be used."""


class CancelledError(HpcdistError):
    """An operation was cancelled before it ran, because an earlier one failed."""


class OutOfRangeError(HpcdistError):
    """An iterator read inside a scheduled function was exhausted (TF's ``OutOfRangeError``)."""


class WorkerPreemptedError(HpcdistError):
    """The worker running a scheduled function was preempted; the function is retried."""


class ClusterConfigError(HpcdistError, ValueError, RuntimeError):
    """The cluster description (Slurm variables, `TF_CONFIG`, a hostlist, jobs) is invalid.

    A `ValueError`, as TF's `TF_CONFIG` and ClusterSpec checks raise, and a `RuntimeError`, as
    TF's ``SlurmClusterResolver`` raises: a ported ``except`` of either catches it.
    """


class AbortedError(HpcdistError):
    """An operation was aborted (TF's ``AbortedError``); a monitored session re-creates itself."""


class FailedPreconditionError(HpcdistError):
    """The system is not in a state to run the operation (TF's ``FailedPreconditionError``).

    For example, a TF1 variable read before a session gave it a value.
    """


class InvalidArgumentError(HpcdistError, ValueError):
    """An argument is invalid (TF's ``InvalidArgumentError``)."""


class NotFoundError(HpcdistError, FileNotFoundError):
    """A file or checkpoint that was asked for does not exist (TF's ``NotFoundError``)."""


class DataLossError(HpcdistError, OSError):
    """Unrecoverable data loss or corruption, e.g. a damaged record (TF's ``DataLossError``)."""
