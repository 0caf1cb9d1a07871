"""``python -m hpcdist``: run a script with abort-on-exception, or the command line.

``python -m hpcdist script.py [args]`` (or ``-m module [args]``) runs a script so that an
uncaught exception on any rank aborts the whole MPI job (like ``python -m mpi4py``);
``python -m hpcdist info|run|bench|timeline`` runs the command line (`hpcdist.cli`).

A script interrupted by SIGINT (Ctrl-C, or ``hpcdist run`` forwarding a SIGINT to every rank)
ends the job with exit code 130 and one line per rank instead of a traceback per rank.
"""

from __future__ import annotations

import runpy
import signal
import sys

from hpcdist import abort
from hpcdist.cli import main
from hpcdist.logger import process_rank

_COMMANDS = ("info", "run", "bench", "timeline", "-h", "--help")


def _run_script(argv: list[str]) -> int:
    abort.install()
    sys.argv = argv
    try:
        if argv[0] == "-m":
            sys.argv = argv[1:]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(argv[0], run_name="__main__")
    except KeyboardInterrupt:
        code = 128 + int(signal.SIGINT)
        rank, size = process_rank()
        message = f"hpcdist: rank {rank} of {size} interrupted (SIGINT); ending the job"
        abort.abort_job(message, code)
        return code
    return 0


def _main() -> int:
    argv = sys.argv[1:]
    if not argv or argv[0] in _COMMANDS:
        return main(argv)
    return _run_script(argv)


if __name__ == "__main__":
    sys.exit(_main())
