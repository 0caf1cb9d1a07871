"""TensorFlow multi-worker runs for the conformance suite: one process per worker.

TF's multi-worker strategies learn the cluster from ``TF_CONFIG``; each worker is a process
with its own, on free localhost ports (TF's gRPC collectives), all started at once and bounded
by a wall-clock limit.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence

from tests.conformance.helpers import ROOT
from tests.helpers import clean_env


def free_ports(n: int) -> list[int]:
    """``n`` localhost ports free at the time of the call."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def run_tf_workers(
    argv: Callable[[int], Sequence[str]], workers: int, timeout: float, **env: str
) -> list[str]:
    """Run ``python argv(task)`` for each worker under TF; every worker's output (stderr too).

    With one worker no ``TF_CONFIG`` is set (a single process). Raises AssertionError with the
    output of a worker that failed.
    """
    cluster = {"worker": [f"localhost:{p}" for p in free_ports(workers)]}
    procs = []
    for task in range(workers):
        extra = dict(env, TF_CPP_MIN_LOG_LEVEL="3")
        if workers > 1:
            task_spec = {"type": "worker", "index": task}
            extra["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task_spec})
        procs.append(
            subprocess.Popen(
                [sys.executable, *argv(task)],
                env=clean_env(**extra),
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    for task, (p, out) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, f"TF worker {task} exited {p.returncode}:\n{out[-4000:]}"
    return outs
