"""The model gallery (examples/models) trains under each strategy at a small size: 1 rank
(default strategy, and two local replicas), 2 ranks (MultiWorkerMirroredStrategy) and 3 ranks
(a parameter server); each run's loss falls from its first epoch to its last."""

import re

import pytest

from tests.helpers import clean_env, run_mpi

SMALL = {
    "resnet20.py": ["--width", "4", "--blocks", "1", "--image-size", "16"],
    "transformer_encoder.py": ["--dim", "16", "--layers", "1"],
}
COMMON = ["--examples", "256", "--epochs", "3", "--batch-size", "32"]
RUNS = [(1, "default"), (1, "mirrored"), (2, "multiworker"), (3, "ps")]


def epoch_losses(stdout: str) -> list[float]:
    return [float(v) for v in re.findall(r"^epoch \d+: loss ([0-9.]+),", stdout, re.M)]


@pytest.mark.parametrize("script", sorted(SMALL))
@pytest.mark.parametrize(("ranks", "strategy"), RUNS)
def test_gallery_model_trains_and_its_loss_falls(script, ranks, strategy):
    env = clean_env(**({"HPCDIST_NUM_PS": "1"} if strategy == "ps" else {}))
    args = [f"examples/models/{script}", "--strategy", strategy, *COMMON, *SMALL[script]]
    result = run_mpi(ranks, args, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    losses = epoch_losses(result.stdout)
    assert len(losses) == 3, result.stdout
    assert losses[-1] < losses[0], result.stdout
    replicas = {"default": 1, "mirrored": 2, "multiworker": 2, "ps": 1}[strategy]
    assert f"({replicas} replica(s))" in result.stdout, result.stdout


def test_mirrored_and_multiworker_train_alike():
    """Two local replicas and two ranks split the same global batches: the same losses."""
    args = ["examples/models/resnet20.py", *COMMON, *SMALL["resnet20.py"]]
    local = run_mpi(1, [*args, "--strategy", "mirrored"], timeout=300)
    ranks = run_mpi(2, [*args, "--strategy", "multiworker"], timeout=300)
    assert local.returncode == 0 and ranks.returncode == 0, local.stderr + ranks.stderr
    assert epoch_losses(local.stdout) == pytest.approx(epoch_losses(ranks.stdout), rel=1e-4)
