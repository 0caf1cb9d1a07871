"""End-to-end tests against a real local Slurm (started by scripts/slurm-up.sh), each bounded."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="starting Slurm daemons needs root")


@pytest.fixture(scope="module", autouse=True)
def slurm():
    result = subprocess.run(
        ["bash", "scripts/slurm-up.sh"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    if result.returncode != 0 or shutil.which("srun") is None:
        pytest.skip(f"could not start a local Slurm: {result.stderr.strip()[-500:]}")


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPCDIST_", "PMI_"))}
    e["PATH"] = f"{Path(sys.executable).parent}:{e.get('PATH', '')}"
    return e


def run(cmd, timeout=120):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env())


@pytest.mark.parametrize("n", [2, 4])
def test_srun_ranks_agree_with_slurm_and_mpi(n):
    result = run(
        [
            "timeout",
            "100",
            "srun",
            "--mpi=pmi2",
            "-n",
            str(n),
            sys.executable,
            "tests/slurm/scripts_resolver.py",
        ]
    )
    assert result.returncode == 0, result.stderr
    rows = sorted(
        (json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")),
        key=lambda row: row["mpi"][0],
    )
    assert [row["mpi"] for row in rows] == [[i, n] for i in range(n)]
    for i, row in enumerate(rows):
        assert row["resolver"] == "SlurmClusterResolver"
        assert row["slurm"] == [i, n] and row["rank"] == [i, n, 1]
        assert row["local"] == [i, i, n]
        assert row["task"] == ["worker", i, i == 0]
        assert row["gpus"] == {"GPU": 0}
        assert len(row["hosts"]) == n


def test_srun_without_pmi_fails_with_the_fix():
    result = run(
        [
            "timeout",
            "100",
            "srun",
            "--mpi=none",
            "-n",
            "2",
            sys.executable,
            "tests/slurm/scripts_resolver.py",
        ]
    )
    assert result.returncode != 0
    assert "srun --mpi=pmi2" in result.stderr
    assert "single rank" in result.stderr


def test_sbatch_cpu_template_and_hpcdist_run_inside_an_allocation(tmp_path):
    out = tmp_path / "job.out"
    e = env()
    e.update(
        SCRIPT="examples/digits.py", SCRIPT_ARGS="--epochs 3 --verbose 0", PYTHON=sys.executable
    )
    result = subprocess.run(
        ["timeout", "200", "sbatch", "--wait", f"--output={out}", "slurm/train-cpu.sbatch"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=220,
        env=e,
    )
    assert result.returncode == 0, (
        result.stderr + out.read_text() if out.exists() else result.stderr
    )
    assert "digits: 2 replica(s), 3 epochs" in out.read_text()
    out2 = tmp_path / "run.out"
    wrapped = f"{Path(sys.executable).parent}/hpcdist run -n 2 examples/strategy_tour.py"
    result = subprocess.run(
        ["timeout", "200", "sbatch", "--wait", "-n", "2", f"--output={out2}", "--wrap", wrapped],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=220,
        env=env(),
    )
    text = out2.read_text() if out2.exists() else ""
    assert result.returncode == 0, result.stderr + text
    assert "on 2 replica(s)" in text  # srun --mpi=pmi2 started both ranks inside the allocation


def _sbatch_wait(script, out, extra_env, timeout=240):
    e = env()
    e.update(PYTHON=sys.executable, **extra_env)
    result = subprocess.run(
        ["timeout", str(timeout), "sbatch", "--wait", f"--output={out}", str(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout + 20,
        env=e,
    )
    text = out.read_text() if out.exists() else ""
    assert result.returncode == 0, result.stderr + text
    return text


def test_sbatch_parameter_server_template(tmp_path):
    """1 coordinator, 2 ps, 2 workers from HPCDIST_NUM_PS through SlurmClusterResolver."""
    text = _sbatch_wait("slurm/parameter-server.sbatch", tmp_path / "ps.out", {})
    assert "embedding table (7, 64) in 2 shards on the ps ranks" in text, text
    assert "Finished epoch 3, accuracy is" in text, text
    assert "checkpoint restore of the sharded table: ok" in text, text


def test_sbatch_gpu_template_in_cpu_only_form(tmp_path):
    """The GPU template without its GPU request: 4 tasks, the resolver sees no GPU."""
    lines = (ROOT / "slurm/train-gpu.sbatch").read_text().splitlines()
    script = tmp_path / "cpu-only.sbatch"
    script.write_text("\n".join(ln for ln in lines if "--gpus-per-task" not in ln) + "\n")
    text = _sbatch_wait(script, tmp_path / "gpu.out", {"SCRIPT": "tests/slurm/scripts_resolver.py"})
    rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert sorted(row["mpi"][0] for row in rows) == [0, 1, 2, 3], text
    assert all(row["resolver"] == "SlurmClusterResolver" for row in rows)
    assert all(row["gpus"] == {"GPU": 0} for row in rows)


def _job_state(job):
    out = run(["scontrol", "show", "job", job], timeout=30).stdout
    for field in out.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1], out
    return "UNKNOWN", out


def _wait_state(job, wanted, limit=150):
    import time

    deadline = time.monotonic() + limit
    state, text = _job_state(job)
    while state not in wanted and time.monotonic() < deadline:
        time.sleep(1)
        state, text = _job_state(job)
    return state, text


def test_preempted_job_requeues_itself_and_finishes_like_an_uninterrupted_run(tmp_path):
    import time

    import numpy as np

    script = "tests/integration/scripts/preemptible_train.py"
    straight = run(
        [
            "timeout",
            "100",
            "srun",
            "--mpi=pmi2",
            "-n",
            "2",
            sys.executable,
            script,
            str(tmp_path / "a"),
            str(tmp_path / "a.npz"),
        ]
    )
    assert straight.returncode == 0, straight.stderr
    out = tmp_path / "job.out"
    e = env()
    e.update(
        SCRIPT=script,
        SCRIPT_ARGS=f"{tmp_path / 'b'} {tmp_path / 'b.npz'}",
        PYTHON=sys.executable,
        STEP_SLEEP="0.5",
    )
    sub = subprocess.run(
        ["sbatch", "--parsable", "--time=00:10:00", f"--output={out}", "slurm/preemptible.sbatch"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=e,
    )
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 120
        while "starting at step" not in (out.read_text() if out.exists() else ""):
            assert time.monotonic() < deadline, _job_state(job)[1]
            time.sleep(0.5)
        time.sleep(2.0)  # a few steps in
        signal = run(["scancel", "--signal=USR2", job], timeout=30)  # to the job's steps
        assert signal.returncode == 0, signal.stderr
        state, text = _wait_state(job, {"PENDING", "REQUEUED", "COMPLETED", "FAILED"}, 120)
        assert state in ("PENDING", "REQUEUED"), text + (out.read_text() if out.exists() else "")
        # slurmd refuses a credential issued in the second its job was revoked ("Job credential
        # revoked"): let the clock move past the requeue before starting the job again.
        time.sleep(2.0)
        run(["scontrol", "update", f"JobId={job}", "StartTime=now"], timeout=30)
        state, text = _wait_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, 150)
        log = out.read_text()
        assert state == "COMPLETED", text + log
    finally:
        run(["scancel", job], timeout=30)
    assert "run 0 of job" in log and "run 1 of job" in log
    assert "preemption signal: saved" in log  # "run 1 of job" above proves the requeue
    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    assert int(b["start"]) > 0 and int(b["steps"]) == int(a["steps"])
    for key in a.files:
        if key.startswith("arr_"):
            assert np.array_equal(a[key], b[key]), key  # bitwise


def test_sbatch_tf1_template_trains_then_continues(tmp_path):
    """The TF1 trainer under srun: roles from the rank, exact last step, resubmit continues."""
    logs = tmp_path / "logs"
    first = _sbatch_wait("slurm/tf1-ps.sbatch", tmp_path / "a.out", {"CHECKPOINT_DIR": str(logs)})
    for task in (0, 1):
        assert f"worker {task} runs" in first and "global_step 200" in first, first
    assert (logs / "model.ckpt-200.h5").exists()
    again = _sbatch_wait(
        "slurm/tf1-ps.sbatch",
        tmp_path / "b.out",
        {"CHECKPOINT_DIR": str(logs), "SCRIPT_ARGS": "--last_step=260"},
    )
    assert again.count("global_step 260") == 2, again
    assert (logs / "model.ckpt-260.h5").exists()
