"""Run one rank of a fault-tolerant launch's server job under a guard process (MPICH's hydra).

``python rank_guard.py COMMAND...`` starts ``COMMAND`` as its child and exits with the child's
exit code, ``128 + N`` when signal ``N`` ended it. hydra's proxy SIGKILLs every process of the
job as soon as it reaps one that a signal ended, whatever ``-disable-auto-cleanup`` says
(``src/pm/hydra/proxy/pmip.c``: ``if (WIFSIGNALED(ret_status)) PMIP_bcast_signal(SIGKILL)``), so
a SIGKILLed ps used to take the coordinator with it whenever the proxy reaped the ps before the
coordinator had raised (about a quarter of the tries here). Under the guard the proxy's child
is the guard, and it exits normally: the coordinator lives on and raises `UnavailableError`.

The child keeps the guard's environment, descriptors (hydra's PMI socket) and process group.
hydra and ``hpcdist run`` signal a rank's whole process group, so the rank receives every
signal itself; the guard only ignores them (SIGUSR1 is hydra's notice of a failed rank) and
waits. A guard that is itself SIGKILLed still ends the job, as a rank did before.

Run by its path, not as a module of the package: it imports nothing but the standard library.
"""

from __future__ import annotations

import signal
import subprocess
import sys

#: Signals sent to a rank's process group that the guard outlives (the rank handles them).
GROUP_SIGNALS = (
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
)


def _ignore(signum: int, frame: object) -> None:
    del signum, frame


def main(argv: list[str]) -> int:
    """Run ``argv``; its exit code, or ``128 + N`` when signal ``N`` ended it.

    Until the child has started the handlers are Python functions, not ``SIG_IGN``: an
    ignored signal would stay ignored in the child across ``exec``, a caught one is reset to
    its default there. Then they are ``SIG_IGN``, which Python's shutdown keeps (it puts the
    default action back for Python handlers, and a SIGUSR1 in that window would end the guard
    by a signal, what the guard is there to prevent).
    """
    if not argv:
        sys.stderr.write("rank_guard: expected a command to run, got none\n")
        return 2
    for sig in GROUP_SIGNALS:
        signal.signal(sig, _ignore)
    child = subprocess.Popen(argv, close_fds=False)  # returns once the child has exec'd
    for sig in GROUP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
