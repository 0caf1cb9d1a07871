"""Batches of scheduled functions: one message carries several to a worker, one brings back all
their results, and each `RemoteValue` still gets its own result or error.

The cases live in ``scripts/ps_batches.py`` and run in one job per layout: one worker
(``mpiexec -n 3``) and two (``-n 4``), one ps each.
"""

import re

import pytest

from tests.helpers import ROOT, clean_env, run_mpi

SCRIPT = "tests/integration/scripts/ps_batches.py"
CASES = sorted(re.findall(r"^def case_(\w+)\(", (ROOT / SCRIPT).read_text(), re.M))


@pytest.fixture(scope="module", params=[3, 4], ids=["one_worker", "two_workers"])
def batches_job(request):
    result = run_mpi(request.param, [SCRIPT], timeout=180, env=clean_env(HPCDIST_NUM_PS="1"))
    outcomes = dict(re.findall(r"^CASE (\w+) (PASS|FAIL.*)$", result.stdout, re.M))
    return result, outcomes


def test_every_rank_exits_cleanly(batches_job):
    result, _ = batches_job
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.mark.parametrize("case", CASES)
def test_case(batches_job, case):
    result, outcomes = batches_job
    assert case in outcomes, f"case did not report:\n{result.stdout[-2000:]}{result.stderr[-3000:]}"
    assert outcomes[case] == "PASS", outcomes[case].replace(" | ", "\n")
