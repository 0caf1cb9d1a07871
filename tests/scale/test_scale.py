"""Many ranks: 64 (or 32) processes oversubscribed on the machine's cores, one launch per case.

Each case is one ``mpiexec`` of a script in tests/scale/scripts, bounded by ``timeout``, whose
rank 0 prints one ``SCALE {json}`` line with the case's results and every rank's peak memory;
the conftest prints the wall-clock and memory of each case after the run. Timings at this
oversubscription say nothing about speed (docs/scaling.md measures that); what is checked here
is that results, errors and the ranks they name are right at this size.
"""

from __future__ import annotations

import json
import re
import time

from tests.helpers import clean_env, run_mpi

RANKS = 64
SCRIPTS = "tests/scale/scripts"
LIMIT = 240
#: What each TF1 worker prints at its end: index, runs, last loss, final global step.
FINISHED = r"worker (\d+) runs (\d+) first_loss \S+ last_loss ([-+.\deE]+) global_step (\d+)"


def scale_line(out: str) -> dict:
    """The ``SCALE`` record of a finished job (fails showing the output without one)."""
    found = [line for line in out.splitlines() if line.startswith("SCALE ")]
    assert found, out[-4000:]
    return json.loads(found[-1][len("SCALE ") :])


def launch(n: int, args: list[str], **env: str):
    start = time.monotonic()
    job = run_mpi(n, args, timeout=LIMIT, env=clean_env(HPCDIST_TIMEOUT_SECONDS="60", **env))
    elapsed = time.monotonic() - start
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    return job, elapsed


def memory(line: dict) -> str:
    return f"max RSS {line['rss_mib_max']:.0f} MiB/rank (median {line['rss_mib_median']:.0f})"


def test_training_equals_one_process_and_strategy_semantics(record):
    job, seconds = launch(RANKS, [f"{SCRIPTS}/train.py"])
    line = scale_line(job.stdout)
    assert line["replicas"] == RANKS and line["max_weight_diff"] < 1e-5
    record(
        "train+semantics",
        str(RANKS),
        seconds,
        memory(line),
        "MWMS fit == 1 process (weights within 1e-5); reduce, mirrored and sync-on-read "
        "variable tables, reductions of variables",
    )


def test_parameter_server_4_ps_59_workers(record, tmp_path):
    job, seconds = launch(RANKS, [f"{SCRIPTS}/ps.py", "300", str(tmp_path)], HPCDIST_NUM_PS="4")
    line = scale_line(job.stdout)
    assert (line["ps"], line["workers"], line["functions"], line["shards"]) == (4, 59, 300, 4)
    rss = sorted(json.loads(p.read_text())["rss_mib"] for p in tmp_path.glob("counts-*.json"))
    assert len(rss) == RANKS, rss
    record(
        "parameter server",
        str(RANKS),
        seconds,
        f"max RSS {rss[-1]:.0f} MiB/rank (median {rss[len(rss) // 2]:.0f})",
        "4 ps + 59 workers: 300 functions scheduled and joined, results i*i and ps "
        "variables (one sharded over the 4 ps) exact",
    )


def test_tf1_trainer_4_ps_28_workers(record, tmp_path):
    job, seconds = launch(32, [f"{SCRIPTS}/tf1.py", "4", str(tmp_path)])
    out = job.stdout
    finished = re.findall(FINISHED, out)
    assert sorted(int(w) for w, *_ in finished) == list(range(28)), out[-3000:]
    assert all(int(step) >= 300 for *_, step in finished), finished
    assert sum(int(runs) for _, runs, _, _ in finished) >= 300, finished
    # The loss starts near 4.8 (E[(x.w + b)^2] of the example's linear model). How stale the
    # 28 asynchronous workers' gradients are depends on how 32 ranks share the 2 cores: the
    # last losses measured 0.01-0.05 on a quiet machine and 0.18-0.37 with other tests running
    # beside. A tenth of the start on every worker is what training must reach either way.
    assert all(float(last) < 0.48 for _, _, last, _ in finished), finished
    rss = sorted(float(m) for m in re.findall(r"RSS rank \d+ ([\d.]+) MiB", out))
    assert len(rss) == 32, out[-3000:]
    record(
        "TF1 trainer",
        "32",
        seconds,
        f"max RSS {rss[-1]:.0f} MiB/rank (median {rss[len(rss) // 2]:.0f})",
        "examples/tf1_trainer.py, 4 ps + 28 async workers to global step 300, last losses "
        f"<= {max(float(last) for _, _, last, _ in finished):.3g} (start ~4.8)",
    )


def test_checkpoint_saved_at_64_restored_at_3(record, tmp_path):
    job, save_seconds = launch(RANKS, [f"{SCRIPTS}/checkpoint.py", "save", str(tmp_path)])
    saved = scale_line(job.stdout)
    job, restore_seconds = launch(3, [f"{SCRIPTS}/checkpoint.py", "restore", str(tmp_path)])
    restored = scale_line(job.stdout)
    assert (saved["saved_by"], restored["saved_by"], restored["restored_on"]) == (RANKS, RANKS, 3)
    assert restored["path"] == saved["path"]
    record(
        "checkpoint",
        f"{RANKS}->3",
        save_seconds + restore_seconds,
        memory(saved),
        "model, optimizer slots and a sync-on-read metric saved at 64, restored bit for bit at 3",
    )


def test_mismatch_and_stall_name_the_right_rank(record):
    job, seconds = launch(RANKS, [f"{SCRIPTS}/faults.py", "37", "50"])
    line = scale_line(job.stdout)
    assert line["ranks"] == RANKS
    assert line["wrong_count"] == 0, line["wrong"]
    record(
        "mismatch+stall",
        str(RANKS),
        seconds,
        memory(line),
        "shape mismatch on rank 37: CollectiveMismatchError naming 37 on all 64; rank 50 "
        "stalled: DeadlineExceededError with missing_ranks (50,) on the 63 others",
    )
