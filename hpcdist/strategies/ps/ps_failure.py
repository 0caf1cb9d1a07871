"""What a ps death starts in the server job: the error, the launcher's note, the abort timer.

A dead ps ends a parameter-server job (as in TF), and MPI cannot end the server job in order
once one of its ranks is gone. So does a ps that does not come to a collective of the server
job within the deadline (stopped or hung: the admission of a worker waits for every ps).
`PsFailure` is armed by whichever thread sees the failure first (the admission thread the moment
the ps's socket ends, or the dispatch loop when it takes the event in or when the admission's
deadline passes), and arming it once:

* writes ``failure`` (``ps J (rank R) of the server job died``, or ``... did not answer within
  the deadline``) into the launch directory, whole or not at all, so that the launcher names
  the ps even when hydra kills the coordinator right after;
* starts a timer that aborts the server job `PS_FAILURE_ABORT_SECONDS` later with the error's
  message, for a program that never calls ``schedule``/``join``/``done`` again (blocked on the
  dead ps, or computing).

Nothing here makes an MPI call but the abort itself.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from hpcdist.abort import ABORT_EXIT_CODE, abort_job
from hpcdist.errors import UnavailableError
from hpcdist.utils.files import write_private_text

__all__ = [
    "PS_FAILURE_ABORT_SECONDS",
    "PS_FAILURE_EXIT_CODE",
    "PsFailure",
    "ps_died_error",
    "ps_hung_error",
]

#: Seconds after a ps died within which the coordinator's program must end by itself; then
#: the server job is aborted.
PS_FAILURE_ABORT_SECONDS = 30.0
#: The server job's exit code when a ps died (``MPI_Abort``'s code, as an uncaught error's).
PS_FAILURE_EXIT_CODE = ABORT_EXIT_CODE


def ps_died_error(ps: int, rank: int) -> UnavailableError:
    """The error every later ``schedule``/``join``/``done`` raises once ps ``ps`` died."""
    return UnavailableError(
        f"ps {ps} (rank {rank} of the server job) died: its process ended and the "
        "coordinator cannot reach its variables; restart the whole job from its last "
        "checkpoint (hpcdist run --max-restarts K restarts it)"
    )


def ps_hung_error(ps: int, rank: int) -> UnavailableError:
    """The error every later call raises once ps ``ps`` missed the deadline of the server job."""
    return UnavailableError(
        f"ps {ps} (rank {rank} of the server job) did not answer within the deadline "
        "(HPCDIST_TIMEOUT_SECONDS): it is stopped or hung, and the coordinator cannot go on "
        "without its variables; restart the whole job from its last checkpoint (hpcdist run "
        "--max-restarts K restarts it)"
    )


class PsFailure:
    """The first ps death of a server job, armed once from any thread (see the module).

    Args:
        launch_dir: The launch directory, where the launcher reads ``failure``.
    """

    def __init__(self, launch_dir: str | Path) -> None:
        self._note = Path(launch_dir) / "failure"
        self._lock = threading.Lock()
        self._died: UnavailableError | None = None
        self._ending = False

    def arm(self, ps: int, rank: int, hung: bool = False) -> UnavailableError:
        """Ps ``ps`` (rank ``rank``) died (or ``hung``): the note and the timer, once.

        Returns:
            The error of the first failure armed (this one, unless one came before).
        """
        with self._lock:
            if self._died is not None or self._ending:
                return self._died or (ps_hung_error if hung else ps_died_error)(ps, rank)
            self._died = (ps_hung_error if hung else ps_died_error)(ps, rank)
            what = "did not answer within the deadline (stopped or hung)" if hung else "died"
            with contextlib.suppress(OSError):  # whole or absent, even if hydra kills us now
                write_private_text(self._note, f"ps {ps} (rank {rank}) of the server job {what}\n")
            message = (
                f"hpcdist: {self._died} (the program did not end within "
                f"{PS_FAILURE_ABORT_SECONDS:g} s; aborting the server job)"
            )
            timer = threading.Timer(
                PS_FAILURE_ABORT_SECONDS, abort_job, (message, PS_FAILURE_EXIT_CODE)
            )
            timer.daemon = True
            timer.start()
            return self._died

    def ending(self) -> UnavailableError | None:
        """The job ends (the ps ranks' sockets will close): arm no more; the death, if any."""
        with self._lock:
            self._ending = True
            return self._died
