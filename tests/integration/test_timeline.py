"""The timeline (`hpcdist.timeline`): a well-formed trace from real jobs, and the stragglers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

from hpcdist.cli.timeline_summary import load_trace, summarize
from tests.helpers import ROOT, clean_env, run_mpi

JOB = "tests/integration/scripts/timeline_job.py"


def check_trace_format(doc: dict, ranks: int) -> list[dict]:
    """Every event well-formed, one track per rank, each rank's timestamps in order."""
    assert isinstance(doc["traceEvents"], list)
    complete = []
    names = {}
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "M"), e
        assert isinstance(e["name"], str) and e["name"], e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if e["ph"] == "M":
            names[(e["pid"], e["name"])] = e["args"]
            continue
        assert isinstance(e["ts"], float | int) and isinstance(e["dur"], float | int), e
        assert e["dur"] >= 0, e
        assert e["cat"] in ("collective", "step", "ps", "checkpoint", "input"), e
        complete.append(e)
    assert sorted(p for p, n in names if n == "process_name") == list(range(ranks))
    by_track = defaultdict(list)
    for e in complete:
        by_track[(e["pid"], e["tid"])].append(e["ts"])
    for stamps in by_track.values():
        assert stamps == sorted(stamps)
    assert {e["pid"] for e in complete} <= set(range(ranks))
    return complete


def test_trace_of_a_two_rank_job_and_its_straggler(tmp_path) -> None:
    trace = tmp_path / "trace.json"
    job = run_mpi(2, [JOB, "1", "0.02", str(tmp_path)], 120, clean_env(HPCDIST_TIMELINE=str(trace)))
    assert job.returncode == 0, job.stdout + job.stderr
    events = check_trace_format(json.loads(trace.read_text()), 2)
    kinds = defaultdict(int)
    for e in events:
        kinds[(e["pid"], e["cat"], e["name"])] += 1
    for rank in (0, 1):
        assert kinds[(rank, "collective", "allreduce")] >= 20
        assert kinds[(rank, "collective", "grouped_allreduce")] == 20
        assert kinds[(rank, "collective", "broadcast")] >= 20
        assert kinds[(rank, "step", "strategy.run")] == 30
        assert kinds[(rank, "input", "next element")] == 11  # 10 batches, then the end
        assert kinds[(rank, "checkpoint", "snapshot")] == 1
        assert kinds[(rank, "checkpoint", "read and verify")] == 1
    assert kinds[(0, "checkpoint", "write")] == 1  # the chief writes
    assert kinds[(1, "checkpoint", "write")] == 0
    sample = next(e for e in events if e["name"] == "allreduce" and e["args"]["bytes"] == 1 << 18)
    assert sample["args"]["dtype"] == "float32"
    summary = summarize(load_trace(str(trace)))
    late = summary["stragglers"][1]
    assert summary["collectives_matched"] >= 60
    # rank 1 sleeps 20 ms before each round: it arrives last at the round's first collective.
    assert late["last"] >= 20 and late["mean_late_ms"] > 5, summary["stragglers"]
    # rank 0 is last only where the two arrive together (by microseconds on a quiet machine;
    # a loaded one deschedules it for milliseconds now and then): rank 1's 20 x 20 ms make
    # most of the time the ranks waited for one another
    early = summary["stragglers"][0]
    total = {rank: row["last"] * row["mean_late_ms"] for rank, row in ((0, early), (1, late))}
    assert total[1] >= 20 * 10 and total[0] < total[1] / 2, summary["stragglers"]
    # rank 1's pipeline sleeps 20 ms a batch: its iterator waits for input, rank 0's hardly
    waits = summary["input"]
    assert waits[1]["input_s"] >= 10 * 0.02 and waits[1]["share"] > waits[0]["share"], waits
    cli = subprocess.run(
        [sys.executable, "-m", "hpcdist", "timeline", str(trace)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert (
        cli.returncode == 0 and "stragglers" in cli.stdout and "collective/allreduce" in cli.stdout
    )
    assert "input share" in cli.stdout, cli.stdout


def test_parameter_server_functions_on_the_timeline(tmp_path) -> None:
    trace = tmp_path / "ps.json"
    env = clean_env(HPCDIST_TIMELINE=str(trace), HPCDIST_NUM_PS="1")
    job = run_mpi(3, ["tests/integration/scripts/ps_minimal.py"], 120, env)
    assert job.returncode == 0, job.stdout + job.stderr
    events = check_trace_format(json.loads(trace.read_text()), 3)
    ps = [(e["pid"], e["name"].split()[0]) for e in events if e["cat"] == "ps"]
    assert (0, "queued") in ps and (0, "remote") in ps  # the coordinator
    assert (2, "run") in ps  # the worker (rank 2; rank 1 is the ps)


def test_hpcdist_run_timeline_flag_and_a_bad_file(tmp_path) -> None:
    trace = tmp_path / "run.json"
    job = subprocess.run(
        [
            sys.executable,
            "-m",
            "hpcdist",
            "run",
            "-n",
            "2",
            "--timeline",
            str(trace),
            JOB,
            "0",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        cwd=ROOT,
    )
    assert job.returncode == 0, job.stdout + job.stderr
    check_trace_format(json.loads(trace.read_text()), 2)
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a trace"}')
    cli = subprocess.run(
        [sys.executable, "-m", "hpcdist", "timeline", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert cli.returncode == 2 and "expected a trace-event document" in cli.stderr
