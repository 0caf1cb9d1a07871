"""``hpcdist timeline trace.json``: what a recorded run spent its time on, and who was late.

Reads a trace written by `hpcdist.timeline` (Chrome trace-event JSON, one process track per
rank) and summarises it:

* per kind of operation (``collective/allreduce``, ``step/strategy.run``, ``ps/remote ...``):
  count, total and mean time over all ranks, bytes, and achieved bandwidth (bytes per second of
  the median call, counting each rank's input once);
* the input share: per rank, the time its distributed iterators waited for their next
  element (``input`` events) against that plus its ``step`` time, the share of a training
  loop spent waiting for data;
* a straggler table: each collective call is matched across ranks by its communicator and call
  number; the rank that arrived last is the straggler of that call, and its lateness is its
  arrival minus the first rank's. Per rank: how often it was last, and how late on average.

Nothing here starts MPI.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import numpy as np

__all__ = ["format_summary", "load_trace", "summarize"]


def load_trace(path: str) -> list[dict[str, Any]]:
    """The complete (``"ph": "X"``) events of a trace file.

    Raises:
        ValueError: The file is not a trace-event document (names what is wrong).
    """
    with open(path) as f:
        doc = json.load(f)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise ValueError(
            f"{path}: expected a trace-event document with 'traceEvents', got {type(doc).__name__}"
        )
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def summarize(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-kind totals and the straggler table of ``events`` (see the module docstring)."""
    ranks = sorted({int(e["pid"]) for e in events})
    kinds: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        kinds[f"{e.get('cat', '')}/{e['name']}"].append(e)
    per_kind = {}
    for kind, group in sorted(kinds.items()):
        durations = np.array([e["dur"] for e in group], dtype=float) * 1e-6
        nbytes = [int(e.get("args", {}).get("bytes", 0)) for e in group]
        median = float(np.median(durations))
        per_kind[kind] = {
            "count": len(group),
            "total_s": float(durations.sum()),
            "mean_ms": float(durations.mean()) * 1e3,
            "bytes": int(sum(nbytes)),
            "GBps": (float(np.median(nbytes)) / median / 1e9)
            if median > 0 and any(nbytes)
            else None,
        }
    calls: dict[tuple[int, int], dict[int, float]] = defaultdict(dict)
    for e in events:
        args = e.get("args") or {}
        if e.get("cat") == "collective" and "seq" in args:
            calls[(int(args["comm"]), int(args["seq"]))][int(e["pid"])] = float(e["ts"])
    last_count = dict.fromkeys(ranks, 0)
    lateness: dict[int, list[float]] = {r: [] for r in ranks}
    matched = 0
    for arrivals in calls.values():
        if len(arrivals) < 2:
            continue
        matched += 1
        first = min(arrivals.values())
        latest = max(arrivals, key=lambda r: arrivals[r])
        last_count[latest] += 1
        lateness[latest].append((arrivals[latest] - first) * 1e-3)
    stragglers = {
        r: {
            "last": last_count[r],
            "share": last_count[r] / matched if matched else 0.0,
            "mean_late_ms": float(np.mean(lateness[r])) if lateness[r] else 0.0,
        }
        for r in ranks
    }
    waits = {r: {"input_s": 0.0, "step_s": 0.0} for r in ranks}
    for e in events:
        cat = e.get("cat")
        if cat in ("input", "step"):
            waits[int(e["pid"])][f"{cat}_s"] += float(e["dur"]) * 1e-6
    for row in waits.values():
        busy = row["input_s"] + row["step_s"]
        row["share"] = row["input_s"] / busy if busy > 0 else 0.0
    return {
        "ranks": ranks,
        "kinds": per_kind,
        "input": waits,
        "collectives_matched": matched,
        "stragglers": stragglers,
    }


def format_summary(summary: dict[str, Any]) -> str:
    """The summary as text tables."""
    lines = [f"ranks: {len(summary['ranks'])}", ""]
    lines.append(
        f"{'operation':<40} {'count':>7} {'total s':>9} {'mean ms':>9} {'bytes':>12} {'GB/s':>7}"
    )
    for kind, row in summary["kinds"].items():
        rate = f"{row['GBps']:.3f}" if row["GBps"] is not None else "-"
        lines.append(
            f"{kind[:40]:<40} {row['count']:>7} {row['total_s']:>9.3f} {row['mean_ms']:>9.3f} "
            f"{row['bytes']:>12} {rate:>7}"
        )
    waits = summary.get("input", {})
    if any(row["input_s"] for row in waits.values()):
        lines += ["", f"{'rank':>6} {'input s':>9} {'step s':>9} {'input share':>12}"]
        for rank, row in waits.items():
            lines.append(
                f"{rank:>6} {row['input_s']:>9.3f} {row['step_s']:>9.3f} {row['share']:>12.1%}"
            )
    lines += [
        "",
        f"stragglers ({summary['collectives_matched']} collective calls matched across ranks):",
    ]
    lines.append(f"{'rank':>6} {'last':>7} {'share':>7} {'mean late ms':>13}")
    for rank, row in summary["stragglers"].items():
        lines.append(
            f"{rank:>6} {row['last']:>7} {row['share']:>7.0%} {row['mean_late_ms']:>13.3f}"
        )
    return "\n".join(lines)
