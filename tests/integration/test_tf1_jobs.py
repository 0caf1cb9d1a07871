"""TF1 distributed training (`hpcdist.compat.v1`) as real MPI jobs: ps ranks and workers.

TF's sync_replicas_optimizer_test numbers at 3, 4 and 5 ranks, the guide's trainer
(asynchronous, synchronous, restarted from its checkpoint, launched SPMD and MPMD), and
clusters that do not fit the ranks.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import ROOT, clean_env, mpiexec, run_mpi

SCRIPTS = ROOT / "tests" / "integration" / "scripts"
TRAINER = str(ROOT / "examples" / "tf1_trainer.py")
ENV = clean_env(HPCDIST_TIMEOUT_SECONDS="60")


@pytest.mark.parametrize(
    ("case", "workers", "ranks"),
    [
        ("2workers", 2, 3),
        ("2workers", 2, 4),
        ("3workers1backup", 3, 5),
        ("1of2", 2, 4),
    ],
)
def test_sync_replicas_tf_numbers(case: str, workers: int, ranks: int) -> None:
    """Every worker asserts TF's values after each step (see the script)."""
    out = run_mpi(ranks, [str(SCRIPTS / "tf1_sync_cases.py"), case, str(workers)], 120, ENV)
    assert out.returncode == 0, out.stdout + out.stderr
    for task in range(workers):
        assert f"{case} ok worker {task}" in out.stdout, out.stdout + out.stderr


def _results(stdout: str) -> dict[int, dict[str, float]]:
    found = {}
    for m in re.finditer(
        r"worker (\d) runs (\d+) first_loss (\S+) last_loss (\S+) global_step (\d+)", stdout
    ):
        found[int(m[1])] = {
            "runs": int(m[2]),
            "first": float(m[3]),
            "last": float(m[4]),
            "global_step": int(m[5]),
        }
    return found


def _trainer(tmp_path, *args: str, ranks: int = 4) -> subprocess.CompletedProcess:
    out = run_mpi(ranks, [TRAINER, f"--checkpoint_dir={tmp_path / 'logs'}", *args], 100, ENV)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def test_trainer_async_exact_last_step_then_restart(tmp_path) -> None:
    """Both workers train the shared variables; the last step is exact; a rerun continues."""
    out = _trainer(tmp_path, "--last_step=200")
    results = _results(out.stdout)
    assert sorted(results) == [0, 1], out.stdout
    assert all(r["global_step"] == 200 for r in results.values())
    assert 200 <= sum(r["runs"] for r in results.values()) <= 201
    assert all(r["last"] < 1e-3 for r in results.values()), results
    placement = json.loads(re.search(r"worker 0 placement (\{[^}]*\})", out.stdout)[1])
    assert placement == {
        "w": "/job:ps/task:0",
        "b": "/job:ps/task:1",
        "global_step": "/job:ps/task:0",
        "w/Adagrad": "/job:ps/task:0",
        "b/Adagrad": "/job:ps/task:1",
    }
    logs = tmp_path / "logs"
    # The chief saves once when its session is created and once at the end. As in TF, the
    # workers may start once the chief has initialized the variables, before its hooks run,
    # so the first save holds whatever step the global step had reached by then.
    steps = sorted(int(p.name[len("model.ckpt-") : -3]) for p in logs.glob("model.ckpt-*.h5"))
    assert len(steps) == 2 and steps[0] < 200 and steps[1] == 200, steps

    again = _trainer(tmp_path, "--last_step=300")
    results = _results(again.stdout)
    assert all(r["global_step"] == 300 for r in results.values())
    # Restored at 200: 100 more steps, and the loss was already low at the first run.
    assert 100 <= sum(r["runs"] for r in results.values()) <= 101
    assert all(r["first"] < 1e-3 for r in results.values()), results
    assert (logs / "model.ckpt-300.h5").exists()


def test_trainer_sync_replicas(tmp_path) -> None:
    """SyncReplicasOptimizer: 60 updates of exactly 2 gradients; the first runs are stale."""
    results = _results(_trainer(tmp_path, "--sync", "--last_step=60").stdout)
    assert sorted(results) == [0, 1]
    assert all(r["global_step"] == 60 for r in results.values())
    # 120 gradients applied, plus the stale first run of each worker (a worker that pushed
    # before the chief's first tokens may lose one more).
    assert 122 <= sum(r["runs"] for r in results.values()) <= 124, results
    assert all(r["last"] < 1e-3 for r in results.values()), results


def test_trainer_mpmd_launch_with_job_flags(tmp_path) -> None:
    """The guide's four command lines joined by ':' (each rank gets its own flags)."""
    cmd = [mpiexec()]
    for job, task in [("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1)]:
        if cmd[-1] != mpiexec():
            cmd.append(":")
        cmd += ["-n", "1", sys.executable, TRAINER, f"--job_name={job}", f"--task_index={task}"]
        cmd += [f"--checkpoint_dir={tmp_path / 'logs'}", "--last_step=50"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=100, env=ENV, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    results = _results(out.stdout)
    assert sorted(results) == [0, 1]
    assert all(r["global_step"] == 50 for r in results.values())


@pytest.mark.parametrize(
    ("case", "ranks", "message"),
    [
        ("too_few_ranks", 2, "the cluster has 3 tasks but the job has 2 ranks: no rank runs"),
        ("same_task", 3, "ranks 0 and 1 both claim task worker:0"),
        ("different_specs", 3, "ranks were given different clusters"),
        ("ps_only", 2, "the cluster has a 'ps' job but no other job"),
    ],
)
def test_cluster_that_does_not_fit_fails_on_every_rank(case: str, ranks: int, message: str):
    out = run_mpi(ranks, [str(SCRIPTS / "tf1_bad_cluster.py"), case], 60, ENV)
    assert out.returncode != 0
    for rank in range(ranks):
        assert f"rank {rank} ClusterConfigError: {message}" in out.stdout, out.stdout


def _sessions(stdout: str) -> tuple[dict, dict]:
    """``starts[(task, session)] = (step, w, b)`` and ``ends[(task, session)] = (runs, step)``."""
    starts, ends = {}, {}
    for m in re.finditer(r"worker (\d) session (\d) start_step (\d+) w (\S+) b (\S+)", stdout):
        w = [float(x) for x in m[4].split(",")]
        starts[(int(m[1]), int(m[2]))] = (int(m[3]), w, float(m[5]))
    for m in re.finditer(r"worker (\d) session (\d) runs (\d+) end_step (\d+)", stdout):
        ends[(int(m[1]), int(m[2]))] = (int(m[3]), int(m[4]))
    return starts, ends


@pytest.mark.parametrize("sessions", [2, 3])
def test_consecutive_monitored_sessions_keep_the_trained_state(tmp_path, sessions: int) -> None:
    """A second (third) session in the same program starts where the previous one ended.

    TF: a non-chief's session is ready once its variables are initialized; the ps tasks still
    hold the trained values and the chief restores its checkpoint, so on every worker the
    session starts at step >= the previous final step with the trained weights.
    """
    steps = 60
    args = [str(SCRIPTS / "tf1_consecutive_sessions.py"), str(tmp_path / "logs")]
    out = run_mpi(4, [*args, str(sessions), str(steps)], 150, ENV)
    assert out.returncode == 0, out.stdout + out.stderr
    starts, ends = _sessions(out.stdout)
    every = [(t, k) for t in (0, 1) for k in range(1, sessions + 1)]
    assert sorted(starts) == every and sorted(ends) == every, out.stdout
    # The last session ends exactly at its last step; an earlier one may read a later step, as
    # in TF: the other worker may already train in the next session.
    assert all(ends[(t, sessions)][1] == sessions * steps for t in (0, 1)), ends
    assert all(ends[(t, k)][1] >= k * steps for t, k in every), ends
    for k in range(2, sessions + 1):
        chief_step, chief_w, chief_b = starts[(0, k)]
        # The chief restored the last checkpoint (worker 1 may have trained on since).
        assert (k - 1) * steps <= chief_step < k * steps, starts
        # Trained: the model is y = x.(1, -2, 3, 0.5) + 0.25; the initial weights are zeros.
        assert np.allclose(chief_w, [1.0, -2.0, 3.0, 0.5], atol=0.15), chief_w
        assert abs(chief_b - 0.25) < 0.15, chief_b
        step, w, b = starts[(1, k)]
        assert step >= (k - 1) * steps, (k, starts)
        # What the chief saw, up to the updates the workers applied meanwhile in this session.
        assert np.allclose(w, chief_w, atol=0.05) and abs(b - chief_b) < 0.05, (k, w, chief_w)
