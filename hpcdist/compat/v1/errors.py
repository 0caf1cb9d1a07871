"""``tf.errors`` of the TF1 layer (hpcdist's errors under TF's names)."""

from hpcdist.errors import (
    AbortedError,
    CancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    UnavailableError,
)

__all__ = [
    "AbortedError",
    "CancelledError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "NotFoundError",
    "OutOfRangeError",
    "UnavailableError",
]
