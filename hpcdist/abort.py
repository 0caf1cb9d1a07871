"""Abort the whole MPI job when one rank dies of an uncaught exception.

Without this, the other ranks of a job wait forever in their next collective. This is the
behaviour of ``python -m mpi4py script.py``: print the failing rank's traceback, then
``MPI_Abort``, so the launcher ends every rank with a non-zero exit code.

`install` is called when hpcdist's world communicator is created on more than one rank (turn it
off with ``HPCDIST_ABORT_ON_EXCEPTION=0``); ``python -m hpcdist script.py`` installs it before
the script runs. `abort_job` is the one way hpcdist ends a job on purpose: it also ends a job
whose ranks do not all reach the end of the program within the deadline
(`hpcdist.comm.lifetime`).
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from types import TracebackType

from hpcdist import exit_codes

__all__ = ["ABORT_EXIT_CODE", "abort_job", "install", "installed"]

#: Error code passed to ``MPI_Abort``; the launcher turns it into the job's exit code.
ABORT_EXIT_CODE = exit_codes.ABORT_EXIT_CODE
_FORWARD_GRACE_S = 0.5

_previous_hook = None
_previous_thread_hook = None


def installed() -> bool:
    """Return whether the abort hook is installed."""
    return _previous_hook is not None


def abort_job(message: str, code: int) -> None:
    """Print ``message`` on stderr, then end every rank of the job with exit code ``code``.

    Returns only when MPI is not running on several ranks (nothing to abort).
    """
    from mpi4py import MPI

    sys.stderr.write(message if message.endswith("\n") else message + "\n")
    sys.stderr.flush()
    sys.stdout.flush()
    if MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
        # Give the launcher a moment to forward the message: MPI_Abort kills every process,
        # and output still in flight to mpiexec would be lost (seen with MPICH's hydra).
        time.sleep(_FORWARD_GRACE_S)
        MPI.COMM_WORLD.Abort(code)


def _abort(
    exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None, where: str
) -> None:
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank() if MPI.Is_initialized() else 0
    size = MPI.COMM_WORLD.Get_size() if MPI.Is_initialized() else 1
    lines = "".join(traceback.format_exception(exc_type, exc, tb))
    abort_job(
        f"hpcdist: uncaught exception on rank {rank} of {size} ({where}); "
        f"aborting all ranks\n{lines}",
        ABORT_EXIT_CODE,
    )


def _hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    _abort(exc_type, exc, tb, "main thread")
    _previous_hook(exc_type, exc, tb)


def _thread_hook(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        _previous_thread_hook(args)
        return
    name = args.thread.name if args.thread is not None else "unknown thread"
    _abort(args.exc_type, args.exc_value, args.exc_traceback, f"thread {name!r}")


def install() -> None:
    """Install the abort hooks for the main thread and for other threads. Idempotent."""
    global _previous_hook, _previous_thread_hook
    if _previous_hook is not None:
        return
    _previous_hook = sys.excepthook
    _previous_thread_hook = threading.excepthook
    sys.excepthook = _hook
    threading.excepthook = _thread_hook
