import subprocess
import sys

import pytest

from hpcdist.cli import launcher_command
from hpcdist.cluster import resolve
from hpcdist.errors import ClusterConfigError
from tests.helpers import ROOT, clean_env, run_mpi


def hpcdist(*args, env=None, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "hpcdist", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or clean_env(),
        cwd=ROOT,
    )


def test_info_single_process():
    result = hpcdist("info")
    assert result.returncode == 0, result.stderr
    for key in (
        "MPI library:",
        "thread level:",
        "ranks:            1 on 1 node",
        "CUDA:",
        "NCCL:",
        "CUDA-aware MPI:",
        "h5py parallel:",
        "resolver:         SimpleClusterResolver",
        "freed memory:     ",
    ):
        assert key in result.stdout


def test_info_on_two_ranks_prints_once():
    result = run_mpi(2, ["-m", "hpcdist", "info"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("MPI library:") == 1
    assert "ranks:            2 on 1 node" in result.stdout
    assert "MPIClusterResolver" in result.stdout


def test_run_returns_the_jobs_exit_code():
    ok = hpcdist("run", "-n", "2", "examples/allreduce_check.py", timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "allreduce check passed on 2 ranks" in ok.stdout
    bad = hpcdist("run", "-n", "4", "tests/integration/scripts/raise_plain_mpi4py.py", timeout=120)
    assert bad.returncode != 0
    assert "plain failure on rank 2" in bad.stderr


@pytest.mark.parametrize(
    "counts",
    [["--ps", "0", "--workers", "2"], ["--ps", "1", "--workers", "0"], ["--ps", "1"]],
)
def test_run_with_bad_parameter_server_counts_says_why_and_starts_nothing(counts):
    """A usage error (exit 2, one line, no traceback), as argparse's own."""
    result = hpcdist("run", *counts, "examples/parameter_server.py", timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("hpcdist run: "), result.stderr
    assert "Traceback" not in result.stderr and not result.stdout, result.stderr


def test_launcher_command_uses_srun_inside_slurm(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    cmd = launcher_command(4, ["train.py", "--x"], {"SLURM_JOB_ID": "7"})
    assert cmd[:4] == ["srun", "--mpi=pmi2", "-n", "4"]
    assert cmd[-3:] == ["hpcdist", "train.py", "--x"]
    cmd = launcher_command(2, ["train.py"], {})
    assert cmd[1:3] == ["-n", "2"] and cmd[0].endswith("mpiexec")


def test_bench_lists_benchmarks():
    result = hpcdist("bench")
    assert result.returncode == 0
    assert "allreduce" in result.stdout


def test_srun_without_pmi_is_detected(monkeypatch):
    # What every process sees under `srun --mpi=none -n 2`: Slurm says 2 tasks, MPI says 1.
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "2")
    with pytest.raises(ClusterConfigError, match=r"srun --mpi=pmi2"):
        resolve()


def test_single_process_and_tf_config(monkeypatch):
    for key in ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "TF_CONFIG"):
        monkeypatch.delenv(key, raising=False)
    r = resolve()
    assert (r.world_size, r.rank, r.is_chief) == (1, 0, True)
    monkeypatch.setenv(
        "TF_CONFIG",
        '{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}',
    )
    r = resolve()
    assert type(r).__name__ == "TFConfigClusterResolver" and r.rank == 1
