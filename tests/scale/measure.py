"""Measure how hpcdist's cost grows with ranks: start-up time and MPI operations per rank.

    python tests/scale/measure.py [--ranks 2,4,8,16,32,64] [--out growth.json]

For each size N: `scripts/counts.py` with every rank on a node of its own
(``HPCDIST_RANKS_PER_NODE=1``, the across-nodes path) and ``HPCDIST_COUNT_MESSAGES=1``: the
start-up time (process start to the end of the first collective; median and max over ranks)
and the operations each rank starts per checked all-reduce (4 KiB and 1 MiB), per mismatch,
per poisoned all-reduce, per barrier and per checkpoint save; then, from N = 4, `scripts/ps.py`
with one ps and N - 2 workers, run with F = 0 and F = 200 functions: the coordinator's
operations per function (counted around schedule + join) and the workers' and ps's (the
difference of the two runs' totals, over F). Every launch is bounded by ``timeout``. Writes
the records as JSON and prints a table (docs/scaling.md).
"""

from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.helpers import clean_env, mpiexec  # noqa: E402

SCRIPTS = ROOT / "tests" / "scale" / "scripts"
FUNCTIONS = 200


def launch(n: int, args: list[str], limit: float = 300, **env: str) -> str:
    """Run ``mpiexec -n N python ARGS``; return stdout (raises on failure)."""
    job = subprocess.run(
        ["timeout", "--kill-after=10", str(limit), mpiexec(), "-n", str(n), sys.executable, *args],
        capture_output=True,
        text=True,
        env=clean_env(HPCDIST_TIMEOUT_SECONDS="120", HPCDIST_COUNT_MESSAGES="1", **env),
        cwd=ROOT,
    )
    if job.returncode:
        raise RuntimeError(f"N={n} {args}: exit {job.returncode}\n{job.stderr[-3000:]}")
    return job.stdout


def scale_line(out: str) -> dict:
    return json.loads([x for x in out.splitlines() if x.startswith("SCALE ")][-1][6:])


#: The counter of a creation's slow-path announcements (`hpcdist.comm.creation`).
ANNOUNCE = "p2p.announce"


def ps_totals(n: int, functions: int) -> tuple[dict, dict]:
    """Coordinator's counts around F functions; the sum over ps and workers of their totals."""
    with tempfile.TemporaryDirectory() as directory:
        launch(n, [str(SCRIPTS / "ps.py"), str(functions), directory], HPCDIST_NUM_PS="1")
        coordinator, servers = {}, {}
        for path in glob.glob(f"{directory}/counts-*.json"):
            record = json.loads(Path(path).read_text())
            if record["role"] == "coordinator":
                coordinator = record["counts"]
                continue
            for kind, (calls, nbytes) in record["counts"].items():
                c, b = servers.get(kind, (0, 0))
                servers[kind] = (c + calls, b + nbytes)
    return coordinator, servers


def measure(n: int, with_ps: bool = True) -> dict:
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as directory:
        record = scale_line(
            launch(n, [str(SCRIPTS / "counts.py"), directory], HPCDIST_RANKS_PER_NODE="1")
        )
    if n >= 4 and with_ps:
        coordinator, servers = ps_totals(n, FUNCTIONS)
        _, idle = ps_totals(n, 0)
        record["ps_coordinator_per_function"] = {
            k: [c / FUNCTIONS, b / FUNCTIONS] for k, (c, b) in coordinator.items()
        }
        # the announcements of a creation's slow path are a start-up cost that differs from
        # run to run (how late each rank came): reported apart, not as a cost per function
        record["ps_servers_per_function"] = {
            k: [(c - idle.get(k, (0, 0))[0]) / FUNCTIONS, (b - idle.get(k, (0, 0))[1]) / FUNCTIONS]
            for k, (c, b) in servers.items()
            if k != ANNOUNCE
        }
        record["ps_start_up_announcements"] = [
            counts.get(ANNOUNCE, (0, 0))[0] for counts in (idle, servers)
        ]
    record["measure_seconds"] = round(time.monotonic() - started, 1)
    return record


def calls(counts: dict, prefix: str = "") -> tuple[float, float]:
    """Total calls and bytes of the kinds starting with ``prefix``."""
    picked = [v for k, v in counts.items() if k.startswith(prefix)]
    return sum(c for c, _ in picked), sum(b for _, b in picked)


def table(records: list[dict]) -> str:
    head = (
        "| N | start-up median / max (s) | checked all-reduce 4 KiB: calls (header + payload), "
        "bytes | 1 MiB: bytes | mismatch | poisoned | checkpoint save: calls, bytes | "
        "ps function: coordinator sends, bytes | ps function: workers + ps ops, bytes |"
    )
    rows = [head, "|" + "---|" * 9]
    for r in records:
        c = r["counts"]
        a4, b4 = calls(c["allreduce_4KiB"])
        _, b1 = calls(c["allreduce_1MiB"])
        mm, _ = calls(c["mismatch"])
        po, _ = calls(c["poisoned"])
        ck, ckb = calls(c["checkpoint_save"])
        pc = r.get("ps_coordinator_per_function")
        ps = r.get("ps_servers_per_function")
        coord = "-" if pc is None else "{:.2f}, {:.0f}".format(*calls(pc))
        serv = "-" if ps is None else "{:.2f}, {:.0f}".format(*calls(ps))
        rows.append(
            f"| {r['ranks']} | {r['startup_median']:.2f} / {r['startup_max']:.2f} | "
            f"{a4:.0f}, {b4:.0f} | {b1:.0f} | {mm:.0f} | {po:.0f} | {ck:.0f}, {ckb:.0f} | "
            f"{coord} | {serv} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4,8,16,32,64")
    parser.add_argument("--out", default="growth.json")
    parser.add_argument("--no-ps", action="store_true", help="skip the parameter-server runs")
    args = parser.parse_args()
    records = []
    for n in (int(x) for x in args.ranks.split(",")):
        records.append(measure(n, not args.no_ps))
        print(json.dumps(records[-1]), flush=True)
        Path(args.out).write_text(json.dumps(records, indent=1))
    print(table(records))


if __name__ == "__main__":
    main()
