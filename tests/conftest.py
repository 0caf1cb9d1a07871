"""Test-wide guards: no test may hang.

Each test runs under a faulthandler alarm: past ``HPCDIST_TEST_TIMEOUT`` seconds (default 120)
every thread's traceback is printed and the process exits, which makes ``mpiexec`` end the
whole job. The test scripts also bound every ``mpiexec`` with ``timeout``.
"""

from __future__ import annotations

import faulthandler
import os
import sys

import pytest

TEST_TIMEOUT = float(os.environ.get("PYTEST_RANK_TIMEOUT", "120"))


@pytest.fixture(autouse=True)
def _hang_guard():
    # sys.__stderr__: pytest captures sys.stderr, and a dump into the capture would be lost.
    faulthandler.dump_traceback_later(TEST_TIMEOUT, exit=True, file=sys.__stderr__)
    yield
    faulthandler.cancel_dump_traceback_later()
