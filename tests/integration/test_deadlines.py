import pytest

from tests.helpers import clean_env, run_mpi


@pytest.mark.parametrize("impl", ["shm", "mpi"], ids=["shared-memory", "mpi-library"])
def test_missing_rank_gives_deadline_error_naming_it(impl):
    env = clean_env(HPCDIST_TIMEOUT_SECONDS="1.5")
    result = run_mpi(3, ["tests/integration/scripts/stall.py", "20", impl], timeout=60, env=env)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    for rank in (0, 1):
        assert f"rank {rank} DeadlineExceededError missing=[2]" in output, output
    assert "allreduce #2 SUM float64[8] did not complete within 1.5 s" in output
    assert "rank(s) 2 never joined" in output
    assert "then UnavailableError" in output


def test_stall_warning_names_the_late_rank_and_the_run_completes():
    env = clean_env(HPCDIST_STALL_WARNING_SECONDS="0.5", HPCDIST_LOG_ALL_RANKS="1")
    result = run_mpi(2, ["tests/integration/scripts/stall.py", "2", "auto"], timeout=60, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "ranks not yet arrived: 1" in output
    assert "rank 0 result 2.0" in output and "rank 1 result 2.0" in output
