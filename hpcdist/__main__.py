"""``python -m hpcdist``: run a script with abort-on-exception, or the command line.

``python -m hpcdist script.py [args]`` runs a script so that an uncaught exception on any rank
aborts the whole MPI job (like ``python -m mpi4py``); ``python -m hpcdist info|run|bench`` runs
the command line.
"""

from __future__ import annotations

import runpy
import sys

from hpcdist import abort
from hpcdist.cli import main


def _main() -> int:
    argv = sys.argv[1:]
    if not argv or argv[0] in ("info", "run", "bench", "timeline", "-h", "--help"):
        return main(argv)
    abort.install()
    script = argv[0]
    sys.argv = argv
    if script == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
