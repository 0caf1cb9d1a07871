"""Test-wide guards: no test may hang.

Each test runs under a faulthandler alarm: past its limit every thread's traceback is printed
on the terminal's stderr (not into pytest's capture, where it would be lost) and the process
exits, which makes ``mpiexec`` end the whole job. The limit is ``PYTEST_RANK_TIMEOUT`` seconds
(default 120) in MPI ranks; a test process that is not a rank only launches jobs, each bounded
by its own ``timeout`` (up to 300 s, `tests.helpers.run_mpi`), so its alarm is a backstop
behind those: ``PYTEST_RANK_TIMEOUT`` + 300 s. The test scripts also bound every ``mpiexec``
with ``timeout``.
"""

from __future__ import annotations

import faulthandler
import os
import sys

import pytest

RANK = any(v in os.environ for v in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"))
TEST_TIMEOUT = float(os.environ.get("PYTEST_RANK_TIMEOUT", "120")) + (0 if RANK else 300)


def _terminal_stderr(config: pytest.Config):
    """pytest's saved copy of the original stderr (fd capture redirects fd 2 to a file)."""
    capman = config.pluginmanager.getplugin("capturemanager")
    err = getattr(getattr(capman, "_global_capturing", None), "err", None)
    fd = getattr(err, "targetfd_save", None)
    return os.fdopen(os.dup(fd), "w") if isinstance(fd, int) else sys.__stderr__


@pytest.fixture(scope="session")
def _alarm_file(pytestconfig):
    return _terminal_stderr(pytestconfig)


@pytest.fixture(autouse=True)
def _hang_guard(_alarm_file):
    faulthandler.dump_traceback_later(TEST_TIMEOUT, exit=True, file=_alarm_file)
    yield
    faulthandler.cancel_dump_traceback_later()
