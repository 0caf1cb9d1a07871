"""The variable table under MultiWorkerMirroredStrategy, 2 workers x 1 replica, against TF 2.21.

TensorFlow runs as two processes with ``TF_CONFIG`` naming each worker (its gRPC collectives on
localhost), hpcdist as ``mpiexec -n 2``; both run tests/conformance/scripts/multi_worker_cases.py,
which records each case of tests/conformance/variable_table.py on each worker. Every case is
compared on both workers: TF's rules of aggregation are about the replicas in sync, so a Python
constant added in replica context to a SUM variable (``v.assign_add(1.0)``) is added once per
worker, 1.0 + 2 x 1.0 = 3.0, in both libraries; TF raises for it only with several local
replicas (test_variable_aggregation.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conformance.helpers import (
    ROOT,
    Raised,
    assert_documented,
    assert_same,
    families_of,
    family_of,
)
from tests.conformance.test_variable_aggregation import NONE_IN_REPLICA_CONTEXT
from tests.conformance.tf_workers import run_tf_workers
from tests.conformance.variable_table import ACTIONS, AGGS, SYNCS
from tests.helpers import clean_env, mpiexec

SCRIPT = ROOT / "tests" / "conformance" / "scripts" / "multi_worker_cases.py"
WORKERS = 2
TIMEOUT = 240
CASES = [f"{s}/{a}/{k}" for s in SYNCS for a in AGGS for k in ACTIONS]
FIRST_REPLICA_ON_EVERY_WORKER = (
    "docs/differences-from-tensorflow.md: ONLY_FIRST_REPLICA on an ON_WRITE variable takes "
    "replica 0's value on every worker."
)
REPLICA_WRITES = (
    "replica_assign",
    "replica_assign_add",
    "replica_assign_add_constant",
    "replica_assign_constant",
)


def _load(out_dir) -> list[dict]:
    return [json.loads((out_dir / f"task{t}.json").read_text()) for t in range(WORKERS)]


def _decode(x):
    """The script's JSON back as the suite's plain data: `Raised` by family, lists as arrays."""
    if isinstance(x, dict) and set(x) == {"raised", "message"}:
        names = x["raised"]
        return Raised(family_of(names), x["message"], families_of(names))
    if isinstance(x, dict):
        return {k: _decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return np.asarray(x) if all(isinstance(v, int | float) for v in x) else x
    if isinstance(x, int | float):
        return np.asarray(x)
    return x


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> tuple[list[dict], list[dict]]:
    """``(tf, hpcdist)``: each worker's record of every case."""
    tf_dir, hd_dir = tmp_path_factory.mktemp("tf"), tmp_path_factory.mktemp("hpcdist")
    run_tf_workers(lambda task: [str(SCRIPT), "tf", str(tf_dir)], WORKERS, TIMEOUT)
    env = clean_env(HPCDIST_TIMEOUT_SECONDS="60")
    hd = subprocess.run(
        [mpiexec(), "-n", str(WORKERS), sys.executable, str(SCRIPT), "hpcdist", str(hd_dir)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert hd.returncode == 0, hd.stdout + hd.stderr
    return _load(tf_dir), _load(hd_dir)


def test_replicas_in_sync(outcomes) -> None:
    tf, hd = outcomes
    assert [o["num_replicas_in_sync"] for o in tf] == [WORKERS] * WORKERS
    assert [o["num_replicas_in_sync"] for o in hd] == [WORKERS] * WORKERS


def test_a_constant_added_to_a_sum_variable_by_every_worker_counts_once_per_worker(outcomes):
    """``v.assign_add(1.0)`` in replica context, SUM, 2 workers x 1 replica: TF does not raise."""
    for side in outcomes:
        for worker in side:
            case = worker["ON_WRITE/SUM/replica_assign_add_constant"]
            assert case["action"] == [3.0] and case["read"] == 3.0, case


@pytest.mark.parametrize("case", CASES)
def test_variable_table_on_two_workers(outcomes, case: str) -> None:
    sync, agg, action = case.split("/")
    tf, hd = outcomes
    for task in range(WORKERS):
        expected, got = _decode(tf[task][case]), _decode(hd[task][case])
        if sync == "ON_WRITE" and agg == "NONE" and action in REPLICA_WRITES:
            assert_documented(NONE_IN_REPLICA_CONTEXT)
            assert isinstance(got["action"], Raised) and got["action"].family == "ValueError"
            assert np.allclose(got["copies"], 1.0), got  # nothing changed
            assert not isinstance(expected["action"], Raised)  # TF: each worker keeps its write
            continue
        if sync == "ON_WRITE" and agg == "ONLY_FIRST_REPLICA" and action in REPLICA_WRITES:
            assert_documented(FIRST_REPLICA_ON_EVERY_WORKER)
            assert_same(_decode(hd[0][case]), got, f"{case}: worker {task} against worker 0")
            assert_same(_decode(tf[0][case]), got, f"{case}: hpcdist worker {task}, TF worker 0")
            continue
        assert_same(expected, got, f"{case} on worker {task}")
