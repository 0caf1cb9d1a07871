"""The ``hpcdist`` command: ``info``, ``run``, ``bench`` and ``timeline``.

``run`` and ``bench`` start mpiexec or srun and must not start MPI in this process, so the
``info`` command's module (which does) is loaded only when ``info`` runs. A SIGTERM, SIGINT or
SIGHUP to ``run`` or ``bench`` stops the whole job (`hpcdist.cli.launch`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from hpcdist.cli.launch import DEFAULT_KILL_AFTER_S, JobSignals, launcher_command, run_job
from hpcdist.cli.ps_launch import run_fault_tolerant
from hpcdist.cli.restarts import run_with_restarts
from hpcdist.cli.timeline_summary import format_summary, load_trace, summarize
from hpcdist.logger import process_rank

__all__ = ["main"]

#: Exit codes of a job whose rank was killed (SIGKILL, as hydra and a shell report it).
_KILLED_CODES = (9, 137)
_BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks"


def _cmd_info(_: argparse.Namespace) -> int:
    from hpcdist.cli.info import info_lines  # starts MPI: only for `hpcdist info`

    lines = info_lines()
    if process_rank()[0] == 0:
        print("\n".join(lines))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    argv = [args.script, *args.args]
    if args.timeline:
        os.environ["HPCDIST_TIMELINE"] = os.path.abspath(args.timeline)
    if args.workers is not None or args.ps is not None:
        mixed = args.n is not None or args.min_ranks is not None
        if args.workers is None or args.ps is None or mixed:
            print(
                "hpcdist run: the fault-tolerant parameter-server launch takes --ps P and "
                "--workers W together, without -n or --min-ranks",
                file=sys.stderr,
            )
            return 2
        try:
            return run_fault_tolerant(
                argv,
                args.ps,
                args.workers,
                args.worker_restarts,
                kill_after=args.kill_after,
                max_restarts=args.max_restarts,
            )
        except ValueError as exc:  # bad counts: the message, no traceback (as argparse)
            print(exc, file=sys.stderr)
            return 2
    if args.n is None:
        print("hpcdist run: expected -n N (or --ps P --workers W)", file=sys.stderr)
        return 2
    if args.max_restarts == 0 and args.min_ranks is None:
        with JobSignals() as signals:
            code = run_job(launcher_command(args.n, argv), signals, kill_after=args.kill_after)
        if code in _KILLED_CODES and signals.received is None:
            print(
                f"hpcdist run: a rank was killed (exit code {code}) and the MPI launcher ended "
                "the job: one MPI job cannot outlive a dead rank. A ParameterServerStrategy "
                "job survives dead workers when launched as `hpcdist run --ps P --workers W "
                "[--worker-restarts K] script.py` (docs/parameter-server.md)",
                file=sys.stderr,
            )
        return code
    return run_with_restarts(
        lambda n: launcher_command(n, argv),
        args.n,
        args.max_restarts,
        args.min_ranks,
        kill_after=args.kill_after,
    )


def _cmd_timeline(args: argparse.Namespace) -> int:
    try:
        summary = summarize(load_trace(args.trace))
    except (OSError, ValueError) as exc:
        print(f"hpcdist timeline: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1) if args.json else format_summary(summary))
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    available = sorted(p.stem for p in _BENCH_DIR.glob("*.py") if not p.stem.startswith("_"))
    if not args.name:
        print("benchmarks: " + ", ".join(available))
        return 0
    if args.name not in available:
        print(
            f"unknown benchmark {args.name!r}; available: {', '.join(available)}", file=sys.stderr
        )
        return 2
    command = launcher_command(args.n, [str(_BENCH_DIR / f"{args.name}.py"), *args.args])
    with JobSignals() as signals:
        return run_job(command, signals)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hpcdist", description="tf.distribute on MPI clusters")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="describe the MPI library, ranks, GPUs and the cluster")
    p.set_defaults(fn=_cmd_info)
    p = sub.add_parser("run", help="run a script on N ranks (srun in Slurm, else mpiexec)")
    p.add_argument("-n", type=int, default=None, help="number of ranks")
    p.add_argument(
        "--ps",
        type=int,
        default=None,
        help="fault-tolerant parameter-server launch: the coordinator and this many ps ranks "
        "as one job (with --workers)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="fault-tolerant parameter-server launch: this many workers, each its own job",
    )
    p.add_argument(
        "--worker-restarts",
        type=int,
        default=0,
        help="restart a worker that dies this many times (each, same index)",
    )
    p.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        help="relaunch the job this many times when it fails (HPCDIST_RESTART_COUNT tells the "
        "script which attempt it is)",
    )
    p.add_argument(
        "--min-ranks",
        type=int,
        default=None,
        help="each restart runs on one rank fewer, down to this many (the checkpoint reshards)",
    )
    p.add_argument(
        "--timeline", default=None, help="record a timeline of every rank into this trace file"
    )
    p.add_argument(
        "--kill-after",
        type=float,
        default=DEFAULT_KILL_AFTER_S,
        metavar="SECONDS",
        help="after a SIGTERM, SIGINT or SIGHUP (forwarded to the job), kill every process of "
        f"the job that is still running this many seconds later (default {DEFAULT_KILL_AFTER_S:g})",
    )
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(fn=_cmd_run)
    p = sub.add_parser("timeline", help="summarise a trace recorded with --timeline")
    p.add_argument("trace")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(fn=_cmd_timeline)
    p = sub.add_parser("bench", help="run a benchmark from benchmarks/ (list them without a name)")
    p.add_argument("name", nargs="?")
    p.add_argument("-n", type=int, default=2, help="number of ranks")
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(fn=_cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hpcdist`` command."""
    args = _parser().parse_args(argv)
    return args.fn(args)
