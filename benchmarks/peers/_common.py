"""Shared parts of the peer benchmarks: launching contenders, timing, BLAS facts, plots.

Every workload script is both a driver (run with plain ``python``) and its own workers
(``--worker NAME``). The driver starts each contender in its own processes, once per round
(``mpiexec -n 2`` for the collective workloads, also for torch and TensorFlow, which only use
it to start two processes and read their rank from ``PMI_RANK``), so the rounds interleave
the contenders and no process ever holds two frameworks. A worker writes its measurement as
JSON to ``--result``; the driver takes medians over rounds and the ratios within rounds.

This module imports neither mpi4py nor hpcdist nor torch nor TensorFlow: the driver and the
peers' workers import it as they are.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

RATIO_NOTE = "ratio = peer time / hpcdist time (above 1: hpcdist is faster)"


def worker_rank() -> tuple[int, int]:
    """Rank and size of this process from the launcher's environment (MPICH or Open MPI)."""
    for rank_var, size_var in (
        ("PMI_RANK", "PMI_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMIX_RANK", "PMIX_SIZE"),
    ):
        if rank_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ.get(size_var, "1"))
    return 0, 1


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on localhost that are free right now."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def launch(
    script: str,
    worker: str,
    args: Sequence[str],
    ranks: int,
    timeout_s: float,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``script --worker worker`` on ``ranks`` processes and return its JSON result.

    ``ranks`` above 1 runs under ``mpiexec``. A failed or timed-out run returns
    ``{"error": ...}`` with the tail of its output instead of raising, so one contender that
    cannot run here does not take the others down.
    """
    fd, path = tempfile.mkstemp(prefix=f"peers-{worker}-", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, script, "--worker", worker, "--result", path, *args]
    if ranks > 1:
        cmd = ["mpiexec", "-n", str(ranks), *cmd]
    full_env = {**os.environ, **(env or {})}
    # its own session: on a timeout the whole group goes (mpiexec, its proxies, the ranks)
    proc = subprocess.Popen(
        cmd,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        if proc.returncode != 0:
            tail = output.strip().splitlines()[-12:]
            return {"error": f"{worker}: exit {proc.returncode}: " + " | ".join(tail)}
        with open(path) as f:
            return json.load(f)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"error": f"{worker}: no result within {timeout_s:.0f} s"}
    except (OSError, json.JSONDecodeError) as exc:
        return {"error": f"{worker}: {exc!r}"}
    finally:
        os.unlink(path)


def driver_parser(description: str | None, names: Sequence[str], rounds: int = 5):
    """The options every workload script takes, as driver and as worker."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--worker", choices=list(names))
    parser.add_argument("--result")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--workers", default=",".join(names))
    parser.add_argument("--timeout", type=float, default=600, help="seconds per launch")
    parser.add_argument("--out")
    parser.add_argument("--plot")
    return parser


def launch_round(
    script: str,
    workers: Sequence[str],
    round_index: int,
    passed: Sequence[str],
    timeout_s: float,
    errors: list[str],
    ranks: int = 2,
) -> list[tuple[str, dict[str, Any]]]:
    """Start each contender once, the order rotated by round; ``(worker, result)`` pairs.

    A contender that failed is left out, its error appended to ``errors`` (and printed).
    """
    k = round_index % len(workers)
    out = []
    for w in [*workers[k:], *workers[:k]]:
        res = launch(script, w, passed, ranks, timeout_s, peer_env(w) if ranks > 1 else None)
        if "error" in res:
            errors.append(res.pop("error"))
            print(errors[-1], file=sys.stderr)
            continue
        out.append((w, res))
    return out


def collect_rounds(
    script: str, args: Any, passed: Sequence[str], names: Sequence[str]
) -> tuple[list[dict[str, float]], list[str], dict[str, Any]]:
    """Run ``args.rounds`` rounds of the contenders in ``args.workers`` (see `launch_round`).

    Returns:
        One dict per round (contender name in ``names`` -> its figure), the failures, and the
        workers' other results merged (a dict-valued one key by key: each worker adds its own).
    """
    workers = args.workers.split(",")
    rounds: list[dict[str, float]] = []
    errors: list[str] = []
    extra: dict[str, Any] = {}
    for r in range(args.rounds):
        got: dict[str, float] = {}
        for _, res in launch_round(script, workers, r, passed, args.timeout, errors):
            for key, value in res.items():
                if key in names:
                    got[key] = value
                elif isinstance(value, dict):
                    extra.setdefault(key, {}).update(value)
                else:
                    extra[key] = value
        rounds.append(got)
        print(f"round {r + 1}/{args.rounds}: " + str(got), file=sys.stderr)
    return rounds, errors, extra


def peer_env(worker: str) -> dict[str, str]:
    """Rendezvous settings for a two-process torch or TensorFlow job on localhost."""
    if worker.startswith("torch"):
        return {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_ports(1)[0]),
            "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo"),
        }
    if worker.startswith("tf"):
        return {"PEERS_TF_PORTS": ",".join(map(str, free_ports(2)))}
    return {}


def tf_config(rank: int, size: int) -> str:
    """TF_CONFIG of worker ``rank`` in a ``size``-worker cluster on localhost."""
    ports = os.environ["PEERS_TF_PORTS"].split(",")[:size]
    return json.dumps(
        {
            "cluster": {"worker": [f"localhost:{p}" for p in ports]},
            "task": {"type": "worker", "index": rank},
        }
    )


def write_result(path: str, result: dict[str, Any]) -> None:
    """A worker's answer to its driver."""
    with open(path, "w") as f:
        json.dump(result, f)


def loop_time(fn: Callable[[], Any], sync: Callable[[], Any], reps: int, warmup: int = 2) -> float:
    """Seconds per call of ``reps`` back-to-back calls of ``fn``, started after ``sync()``.

    ``sync`` is the contender's own barrier; the same ``reps`` runs on every rank (a
    collective). The loop ends with another ``sync()`` (not counted in the calls: it is
    measured once and subtracted), so its time covers the slowest rank.
    """
    for _ in range(warmup):
        fn()
    sync()
    t0 = time.perf_counter()
    sync()
    barrier_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return max(time.perf_counter() - t0 - barrier_s, 1e-9) / reps


def reps_for(nbytes: int, budget_bytes: int = 256 << 20, most: int = 200, least: int = 3) -> int:
    """Calls per timing of a message of ``nbytes``: the same for every contender."""
    return int(max(least, min(most, budget_bytes // max(nbytes, 1))))


def numpy_blas() -> dict[str, Any]:
    """The BLAS numpy runs here (threadpoolctl), with the OpenBLAS settings of the environment."""
    info: dict[str, Any] = {
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
    }
    try:
        from threadpoolctl import threadpool_info

        blas = [p for p in threadpool_info() if p.get("user_api") == "blas"]
        info.update(
            {k: blas[0].get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
            if blas
            else {}
        )
    except ImportError:
        info["note"] = "threadpoolctl not installed"
    return info


def summarise(
    rounds: list[dict[str, float]], base: str, names: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Median of each contender over rounds, and its median per-round ratio to ``base``.

    ``rounds`` holds one dict per round: contender -> seconds (missing when it failed).
    """
    out: dict[str, dict[str, float]] = {}
    for name in names:
        times = [r[name] for r in rounds if name in r]
        if not times:
            continue
        row = {"median_s": float(np.median(times)), "rounds": len(times)}
        if name != base:
            ratios = [r[name] / r[base] for r in rounds if name in r and base in r]
            if ratios:
                row["ratio"] = float(np.median(ratios))
        out[name] = row
    return out


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_avg_1min": os.getloadavg()[0],
        "threads_per_process": 1,
    }


def emit(result: dict[str, Any], path: str | None) -> None:
    """Print the driver's result as JSON and write it to ``path``."""
    text = json.dumps(result, indent=1)
    print(text)
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            f.write(text + "\n")
    sys.stdout.flush()


def pyplot() -> Any:
    """Matplotlib's pyplot with the file-only backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bar_plot(
    path: str,
    title: str,
    ylabel: str,
    groups: dict[str, dict[str, float]],
    note: str = "",
) -> None:
    """Grouped bars: ``groups`` maps a group (x tick) to contender -> value."""
    plt = pyplot()
    names: list[str] = []
    for series in groups.values():
        names += [n for n in series if n not in names]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        xs = [g + (i - (len(names) - 1) / 2) * width for g in range(len(groups))]
        values = [series.get(name, 0.0) for series in groups.values()]
        bars = ax.bar(xs, values, width, label=name)
        ax.bar_label(bars, fmt="%.4g", fontsize=7)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="gray")
    ax.legend(fontsize=8)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=120)
