"""Which communicator checkpoints synchronise on, and how ranks agree on a failure.

The chief writes, the others wait; a failure on any rank (the chief's write, a damaged file on
one node) must become an error on every rank, not a rank waiting forever for a partner that
raised. `agree` is that step: one small all-gather of every rank's outcome, under the
communicator's deadline.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numpy as np

from hpcdist.checkpoint.format import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointWriteError,
)
from hpcdist.comm import Communicator, world
from hpcdist.logger import process_rank
from hpcdist.strategies.ps.runtime import coordinator_only

__all__ = ["agree", "checkpoint_communicator", "is_checkpoint_chief", "local_checkpoints"]

#: Error classes `agree` tells apart, most specific last (any other error travels as the first).
_KINDS: tuple[type[CheckpointError], ...] = (
    CheckpointError,
    CheckpointCorruptError,
    CheckpointMismatchError,
    CheckpointWriteError,
)


class _Local(threading.local):
    """How many `local_checkpoints` blocks this thread is inside."""

    def __init__(self) -> None:
        self.depth = 0


_local = _Local()


@contextlib.contextmanager
def local_checkpoints() -> Iterator[None]:
    """Save and restore in this process alone, with no collective, inside the block.

    `checkpoint_communicator` returns None in this thread while the block runs, so this
    process writes and reads files without waiting for the other ranks (a TF1 chief saving
    the graph's variables while the other workers train). Blocks nest; other threads are not
    affected.
    """
    _local.depth += 1
    try:
        yield
    finally:
        _local.depth -= 1


def checkpoint_communicator() -> Communicator | None:
    """The world communicator, or None on one rank and on a parameter-server coordinator.

    A parameter-server coordinator is the only rank running the program, so checkpoints there
    use no collective; nor do checkpoints inside `local_checkpoints` (this thread). On more
    than one rank the first call creates hpcdist's world communicator (collective then).
    """
    if _local.depth or coordinator_only():
        return None
    if process_rank()[1] > 1:  # the size of ``COMM_WORLD``
        return world()
    return None


def is_checkpoint_chief(comm: Communicator | None) -> bool:
    """Whether this process writes files for ``comm`` (from `checkpoint_communicator`)."""
    return comm is None or comm.rank == 0


def agree(comm: Communicator | None, error: BaseException | None, action: str) -> None:
    """Raise on every rank when ``action`` failed on any rank (collective when ``comm`` is set).

    Every rank calls it once ``action`` is over, with the exception it caught or None. A rank
    that failed raises its own exception; the others raise a `CheckpointError` of the same kind
    (a `CheckpointWriteError` keeps the errno) naming the first rank that failed and its error.
    Also a barrier: no rank returns before every rank finished ``action``. One all-reduce of a
    flag when no rank failed; the outcomes are gathered only after a failure.

    Args:
        comm: From `checkpoint_communicator`; None means this process alone.
        error: What this rank caught, or None.
        action: What the ranks did, for the message (``"write '/ckpt/ckpt-3.h5'"``).

    Raises:
        CheckpointError: Some rank failed (this rank's own exception if it is one of them).
        DeadlineExceededError: A rank did not arrive within ``HPCDIST_TIMEOUT_SECONDS``.
    """
    if comm is None:
        if error is not None:
            raise error
        return
    # Whether any rank failed: 4 bytes per rank; only then every rank's outcome, O(N) bytes.
    anyone = comm.allreduce(np.array([error is not None], dtype=np.int32), op="max")
    outcomes = comm.allgather_object(_outcome(error)) if anyone[0] else []
    if error is not None:
        raise error
    failed = [r for r, outcome in enumerate(outcomes) if outcome is not None]
    if not failed:
        return
    first = failed[0]
    kind, code, text = outcomes[first]
    others = f" (and rank(s) {failed[1:]})" if len(failed) > 1 else ""
    message = f"could not {action}: rank {first}{others} failed: {text}"
    cls = _KINDS[kind]
    if cls is CheckpointWriteError:
        raise CheckpointWriteError(code, message, None)
    raise cls(message)


def _outcome(error: BaseException | None) -> tuple[int, int, str] | None:
    """What `agree` sends for this rank: None, or the error's kind, errno and text."""
    if error is None:
        return None
    kind = next((i for i in range(len(_KINDS) - 1, 0, -1) if isinstance(error, _KINDS[i])), 0)
    return kind, getattr(error, "errno", None) or 0, f"{type(error).__name__}: {error}"
