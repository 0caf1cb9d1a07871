"""The two-node cluster of ``scripts/twonode.sh`` for the tests of this directory.

The ``cluster`` fixture reuses a cluster that is already up (``tests/twonode/run.sh`` brings one
up for the whole step), else brings one up for the session and always takes it down. Where it
cannot be built (not root, no namespaces) the tests that need it are skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.helpers import ROOT, clean_env

SCRIPT = str(ROOT / "scripts" / "twonode.sh")
STATE = os.environ.get("TWONODE_STATE", "/tmp/hpcdist-twonode")


class Cluster:
    """Runs jobs across node-a and node-b."""

    def run(
        self, layout: str, args: list[str], timeout: float = 120, **env: str
    ) -> subprocess.CompletedProcess:
        """``mpiexec`` of ``python ARGS`` with ``layout`` ranks (e.g. ``"2+2"``), bounded.

        Output is captured as text; ``env`` is added to the environment without hpcdist's.
        """
        environ = clean_env(PYTHONDONTWRITEBYTECODE="1", TWONODE_LIMIT=str(int(timeout)), **env)
        return subprocess.run(
            ["bash", SCRIPT, "run", layout, "python", *args],
            capture_output=True,
            text=True,
            timeout=timeout + 20,
            env=environ,
            cwd=ROOT,
        )

    def rate(self, rate: str) -> None:
        """Limit both veths to ``rate`` (tc tbf), or ``"off"``."""
        subprocess.run(["bash", SCRIPT, "rate", rate], check=True, timeout=30)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    check = subprocess.run(["bash", SCRIPT, "check"], capture_output=True, text=True, timeout=30)
    if check.returncode != 0:
        pytest.skip(f"no two-node cluster on this machine: {check.stdout.strip()}")
    ours = not os.path.exists(os.path.join(STATE, "pids"))
    if ours:
        subprocess.run(["bash", SCRIPT, "up"], check=True, timeout=60)
    try:
        yield Cluster()
    finally:
        if ours:
            subprocess.run(["bash", SCRIPT, "down"], timeout=60)
        else:
            subprocess.run(["bash", SCRIPT, "rate", "off"], timeout=30)
