"""Which communicator checkpoints synchronise on, and how ranks agree on a failure.

The chief writes, the others wait; a failure on any rank (the chief's write, a damaged file on
one node) must become an error on every rank, not a rank waiting forever for a partner that
raised. `agree` is that step: one small all-gather of fixed-size byte rows (array traffic, no
pickle), under the communicator's deadline.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from hpcdist.checkpoint.format import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointWriteError,
)
from hpcdist.comm import Communicator, world
from hpcdist.strategies.ps.runtime import coordinator_only

__all__ = ["agree", "checkpoint_communicator", "is_checkpoint_chief"]

#: Bytes per rank in `agree`: a 4-byte header (kind, errno) and the error text, truncated.
_ROW = 1024
#: Error classes by the code `agree` sends (0: no error; an unknown error travels as 1).
_KINDS: tuple[type[CheckpointError], ...] = (
    CheckpointError,
    CheckpointError,
    CheckpointCorruptError,
    CheckpointMismatchError,
    CheckpointWriteError,
)


def checkpoint_communicator() -> Communicator | None:
    """The world communicator, or None on one rank and on a parameter-server coordinator.

    A parameter-server coordinator is the only rank running the program, so checkpoints there
    use no collective. On more than one rank the first call creates hpcdist's world
    communicator (collective then).
    """
    if coordinator_only():
        return None
    if MPI.COMM_WORLD.Get_size() > 1:
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
    Also a barrier: no rank returns before every rank finished ``action``.

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
    rows = comm.allgather(_encode(error)).reshape(comm.size, _ROW)
    if error is not None:
        raise error
    failed = [r for r in range(comm.size) if rows[r, 0]]
    if not failed:
        return
    first = failed[0]
    kind, code = int(rows[first, 0]), int(rows[first, 1]) | int(rows[first, 2]) << 8
    text = bytes(rows[first, 4:]).rstrip(b"\0").decode("utf-8", "replace")
    others = f" (and rank(s) {failed[1:]})" if len(failed) > 1 else ""
    message = f"could not {action}: rank {first}{others} failed: {text}"
    cls = _KINDS[kind] if kind < len(_KINDS) else CheckpointError
    if cls is CheckpointWriteError:
        raise CheckpointWriteError(code, message, None)
    raise cls(message)


def _encode(error: BaseException | None) -> np.ndarray:
    """One row of `agree`: kind code, errno (two bytes), a spare byte, the error text."""
    row = np.zeros((1, _ROW), np.uint8)
    if error is None:
        return row
    kind = next((i for i in range(len(_KINDS) - 1, 1, -1) if isinstance(error, _KINDS[i])), 1)
    code = getattr(error, "errno", None) or 0
    text = f"{type(error).__name__}: {error}".encode("utf-8", "replace")[: _ROW - 4]
    row[0, :4] = (kind, code & 0xFF, (code >> 8) & 0xFF, 0)
    row[0, 4 : 4 + len(text)] = np.frombuffer(text, np.uint8)
    return row
