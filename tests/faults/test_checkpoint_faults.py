"""Checkpoint faults: a model that changed, a full disk, a chief that cannot write.

Each case runs an ``mpiexec -n 2`` job under a ``timeout=`` and reads one line per rank.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import clean_env, run_mpi

SCRIPTS = "tests/faults/scripts"
RANKS = 2


def _env() -> dict[str, str]:
    return clean_env(HPCDIST_TIMEOUT_SECONDS="30", PATH=os.environ.get("PATH", ""))


def _lines(job: subprocess.CompletedProcess, out: Path, rank: int, count: int) -> list[str]:
    """The ``count`` lines rank ``rank`` wrote to ``out`` (fails with the job's output else)."""
    report = out / f"rank{rank}.txt"
    lines = report.read_text().splitlines() if report.exists() else []
    assert len(lines) == count, f"rank {rank}: expected {count} lines, got {lines}\n{job.stderr}"
    assert all(line.startswith(f"rank {rank}: ") for line in lines), lines
    return lines


def test_model_changed_restore_raises_and_keeps_every_checkpoint(tmp_path):
    out = tmp_path / "out"
    job = run_mpi(
        RANKS, [f"{SCRIPTS}/ckpt_model_changed.py", str(tmp_path / "ckpt"), str(out)], 90, _env()
    )
    assert job.returncode == 0, job.stdout + job.stderr
    for rank in range(RANKS):
        error, weights, files = _lines(job, out, rank, 3)
        assert "CheckpointMismatchError" in error, job.stdout
        # Names the variable and both shapes: the file's and the object's.
        assert "model/weights/2" in error and "(4, 2)" in error and "(4, 3)" in error, error
        assert weights.endswith("weights untouched=True"), weights
        assert "ckpt-2.h5" in files and "ckpt-3.h5" in files, files
        assert files.endswith("unchanged=True"), files
    assert "skipping unreadable checkpoint" not in job.stderr


def test_chief_failed_save_raises_on_every_rank(tmp_path):
    out = tmp_path / "out"
    job = run_mpi(
        RANKS, [f"{SCRIPTS}/ckpt_chief_fails.py", str(tmp_path / "ckpt"), str(out)], 60, _env()
    )
    assert job.returncode == 0, job.stdout + job.stderr
    for rank in range(RANKS):
        sync, latest, late, last = _lines(job, out, rank, 4)
        assert "sync: CheckpointWriteError" in sync, job.stdout + job.stderr
        assert "ckpt-2.h5" in sync and "rank 0" in sync, sync
        assert latest.endswith("latest ckpt-1.h5"), latest
        assert "async: CheckpointWriteError" in late and "ckpt-4.h5" in late, late
        assert last.endswith("latest ckpt-6.h5"), last


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs mounted on a fresh directory (root only), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "full"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30)


def test_disk_full_save_keeps_the_previous_checkpoint_loadable(small_tmpfs):
    out = small_tmpfs.parent / "out"
    job = run_mpi(RANKS, [f"{SCRIPTS}/ckpt_disk_full.py", str(small_tmpfs), str(out)], 60, _env())
    assert job.returncode == 0, job.stdout + job.stderr
    for rank in range(RANKS):
        error, result = _lines(job, out, rank, 2)
        assert "CheckpointWriteError enospc=True" in error, job.stdout + job.stderr
        assert "ckpt-2.h5" in error and "errno 28" in error, error
        # Only the first checkpoint and the state file: no temporary file left behind.
        assert "files ['checkpoint', 'ckpt-1.h5']" in result, result
        assert result.endswith("restored ckpt-1.h5 ok=True"), result
