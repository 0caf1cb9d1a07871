import time

import pytest

from tests.helpers import run_mpi


@pytest.mark.parametrize(
    "args",
    [
        ["tests/integration/scripts/raise_on_rank2.py"],
        ["-m", "hpcdist", "tests/integration/scripts/raise_plain_mpi4py.py"],
        ["tests/integration/scripts/raise_in_strategy.py"],
    ],
    ids=["hook-installed-by-world", "python-m-hpcdist", "hook-installed-by-strategy"],
)
def test_exception_on_one_rank_aborts_the_job(args):
    start = time.monotonic()
    result = run_mpi(4, args, timeout=60)
    elapsed = time.monotonic() - start
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert elapsed < 30, f"job took {elapsed:.1f} s to end"
    assert ("uncaught exception on rank 2 of 4" in output) or (
        "uncaught exception on rank 3 of 4" in output
    )
    assert "Traceback" in output
    assert any(
        m in output for m in ("boom on rank 2", "plain failure on rank 2", "boom in a strategy")
    )
