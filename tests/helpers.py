"""Helpers for tests that launch MPI jobs as subprocesses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def mpiexec() -> str:
    """The ``mpiexec`` next to this Python (the MPICH wheel's), else the one on PATH."""
    local = Path(sys.executable).parent / "mpiexec"
    if local.exists():
        return str(local)
    found = shutil.which("mpiexec")
    if found is None:
        raise RuntimeError("mpiexec not found: install the 'mpich' extra")
    return found


def read_log(path: Path) -> str:
    """A job's output file as text ("" if not there yet); bytes that are not UTF-8 replaced.

    A dying process's UCX warnings can carry raw memory into the log.
    """
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without Slurm or hpcdist variables, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "HPCDIST_", "PMI_", "TF_CONFIG"))
    }
    env.update(extra)
    return env


def run_mpi(
    n: int, args: list[str], timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``mpiexec -n N python ARGS`` with a wall-clock bound; output captured as text."""
    return subprocess.run(
        [mpiexec(), "-n", str(n), sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env() if env is None else env,
        cwd=ROOT,
    )
