"""What a ps death starts in the server job: the error, the launcher's note, the abort timer.

A dead ps ends a parameter-server job (as in TF), and MPI cannot end the server job in order
once one of its ranks is gone. `PsFailure` is armed by whichever thread sees the death first,
the admission thread the moment the ps's socket ends or the dispatch loop when it takes the
event in, and arming it once:

* writes ``failure`` (``ps J (rank R)``) into the launch directory, whole or not at all, so that
  the launcher names the ps even when hydra kills the coordinator right after;
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

__all__ = ["PS_FAILURE_ABORT_SECONDS", "PS_FAILURE_EXIT_CODE", "PsFailure", "ps_died_error"]

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

    def arm(self, ps: int, rank: int) -> None:
        """Ps ``ps`` (rank ``rank``) died: the note and the timer, unless armed or ending."""
        with self._lock:
            if self._died is not None or self._ending:
                return
            self._died = ps_died_error(ps, rank)
            with contextlib.suppress(OSError):  # whole or absent, even if hydra kills us now
                write_private_text(self._note, f"ps {ps} (rank {rank})\n")
            message = (
                f"hpcdist: {self._died} (the program did not end within "
                f"{PS_FAILURE_ABORT_SECONDS:g} s; aborting the server job)"
            )
            timer = threading.Timer(
                PS_FAILURE_ABORT_SECONDS, abort_job, (message, PS_FAILURE_EXIT_CODE)
            )
            timer.daemon = True
            timer.start()

    def ending(self) -> UnavailableError | None:
        """The job ends (the ps ranks' sockets will close): arm no more; the death, if any."""
        with self._lock:
            self._ending = True
            return self._died
