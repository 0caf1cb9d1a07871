"""End-to-end tests against a real local Slurm (started by scripts/slurm-up.sh), each bounded."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, read_log
from tests.slurm.preemption import check_preempted_job_resumes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="starting Slurm daemons needs root")


def _daemons_running() -> bool:
    """Whether the daemons of scripts/slurm-up.sh run (by their PID files)."""
    for pid_file in ("/run/slurmctld.pid", "/run/slurmd.pid"):
        try:
            os.kill(int(Path(pid_file).read_text()), 0)
        except (OSError, ValueError):
            return False
    return True


@pytest.fixture(scope="module", autouse=True)
def slurm():
    ours = not _daemons_running()
    result = subprocess.run(
        ["bash", "scripts/slurm-up.sh"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    if result.returncode != 0 or shutil.which("srun") is None:
        pytest.skip(f"could not start a local Slurm: {result.stderr.strip()[-500:]}")
    yield
    if ours:  # started here: stopped here
        subprocess.run(["bash", "scripts/slurm-down.sh"], cwd=ROOT, timeout=60)


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPCDIST_", "PMI_"))}
    e["PATH"] = f"{Path(sys.executable).parent}:{e.get('PATH', '')}"
    return e


def run(cmd, timeout=120, **extra):
    """Run ``cmd`` bounded by ``timeout``, with ``extra`` added to its environment."""
    return subprocess.run(
        ["timeout", str(timeout), *cmd],
        cwd=ROOT,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout + 20,
        env=dict(env(), **extra),
    )


@pytest.mark.parametrize("n", [2, 4])
def test_srun_ranks_agree_with_slurm_and_mpi(n):
    result = run(
        [
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
    assert result.returncode == 0, result.stderr + read_log(out)
    assert "digits: 2 replica(s), 3 epochs" in read_log(out)
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
    text = read_log(out2)
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
    text = read_log(out)
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


def test_preempted_job_requeues_itself_and_finishes_like_an_uninterrupted_run(tmp_path):
    check_preempted_job_resumes(run, tmp_path, ["-n", "2"], [])


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
