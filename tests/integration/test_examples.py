"""Every example runs under ``mpiexec -n 2`` (the tour on 1 and 3 ranks too; the
parameter-server example, which needs a coordinator, ps and workers, on 3 and 5; the TF1
trainer, 2 ps + 2 workers, at 4 ranks in tests/integration/test_tf1_jobs.py)."""

from pathlib import Path

import pytest

from tests.helpers import ROOT, run_mpi

PS_EXAMPLE = "parameter_server.py"
TF1_EXAMPLE = "tf1_trainer.py"
EXAMPLES = sorted(
    p.name for p in (ROOT / "examples").glob("*.py") if p.name not in (PS_EXAMPLE, TF1_EXAMPLE)
)


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_on_two_ranks(name):
    result = run_mpi(2, [str(Path("examples") / name)], timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("ranks", [1, 3])
def test_strategy_tour_gives_the_same_answer_at_any_size(ranks):
    result = run_mpi(ranks, ["examples/strategy_tour.py"], timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"on {ranks} replica(s)" in result.stdout
    assert "steps" in result.stdout


def test_digits_demo_reaches_95_percent():
    result = run_mpi(2, ["examples/digits.py", "--verbose", "0"], timeout=300)
    assert result.returncode == 0, result.stderr
    accuracy = float(result.stdout.rsplit("test accuracy", 1)[1].split()[0])
    assert accuracy >= 0.95, result.stdout


@pytest.mark.parametrize("ranks", [3, 5])
def test_parameter_server_example(ranks):
    result = run_mpi(ranks, [f"examples/{PS_EXAMPLE}"], timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "Finished epoch 3, accuracy is" in out, out
    assert float(out.split("Finished epoch 3, accuracy is")[1].split(".\n")[0]) >= 0.9, out
    assert "checkpoint restore of the sharded table: ok" in out, out
    shards = 1 if ranks == 3 else 2
    assert f"in {shards} shards on the ps ranks" in out, out
