"""hpcdist across two real nodes (``scripts/twonode.sh``: namespaces, a bridge, TCP on veths).

Node counts, local ranks and shared memory come from the real layout here: each node has its
own hostname, /dev/shm and PIDs, and inter-node traffic crosses the veths. The MPI suite itself
runs at 2+2 in ``tests/twonode/run.sh``; these tests run the tools and examples, the rate-limited
runs (``tc tbf``) and the wait messages at 5 Mbit.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.helpers import run_mpi

SCRIPTS = "tests/twonode/scripts"


def output(job) -> str:
    """stdout and stderr, without UCX's shutdown warnings."""
    text = job.stdout + job.stderr
    return "\n".join(line for line in text.splitlines() if " UCX " not in line)


def test_info_shows_two_nodes(cluster):
    job = cluster.run("2+2", ["-m", "hpcdist", "info"], timeout=60)
    assert job.returncode == 0, output(job)
    assert "ranks:            4 on 2 node(s) (node-a, node-b)" in job.stdout, job.stdout
    assert "local ranks:      2 on this node" in job.stdout, job.stdout


def test_allreduce_check(cluster):
    job = cluster.run("2+2", ["examples/allreduce_check.py"], timeout=60)
    assert job.returncode == 0, output(job)
    assert "allreduce check passed on 4 ranks (2 node(s))" in job.stdout, output(job)


def test_digits_reaches_95_percent(cluster):
    job = cluster.run("2+2", ["examples/digits.py", "--verbose", "0"], timeout=180)
    assert job.returncode == 0, output(job)
    accuracy = float(job.stdout.rsplit("test accuracy", 1)[1].split()[0])
    assert accuracy >= 0.95, job.stdout


def check_parameter_server(job) -> None:
    out = job.stdout
    assert job.returncode == 0, output(job)
    assert float(out.split("Finished epoch 3, accuracy is")[1].split(".\n")[0]) >= 0.9, out
    assert "checkpoint restore of the sharded table: ok" in out, out
    assert "in 2 shards on the ps ranks" in out, out


def test_parameter_server_at_3_plus_2(cluster):
    check_parameter_server(cluster.run("3+2", ["examples/parameter_server.py"], timeout=120))


def test_checkpoint_saved_on_two_nodes_restores_on_one(cluster, tmp_path):
    script = "tests/integration/scripts/save_restore.py"
    saved = cluster.run("2+2", [script, "save", str(tmp_path)], timeout=90)
    assert saved.returncode == 0, output(saved)
    restored = cluster.run("2+0", [script, "restore", str(tmp_path)], timeout=90)
    assert restored.returncode == 0, output(restored)
    assert "restored on 2 rank(s) what 4 rank(s) saved" in restored.stdout, output(restored)
    alone = run_mpi(1, [script, "restore", str(tmp_path)], timeout=90)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert "restored on 1 rank(s) what 4 rank(s) saved" in alone.stdout


def test_tf1_trainer_at_2_plus_2(cluster, tmp_path):
    args = ["examples/tf1_trainer.py", "--checkpoint_dir", str(tmp_path / "train_logs")]
    job = cluster.run("2+2", args, timeout=120)
    assert job.returncode == 0, output(job)
    finals = re.findall(
        r"worker (\d) runs (\d+) first_loss \S+ last_loss (\S+) global_step (\d+)", job.stdout
    )
    assert sorted(int(w) for w, *_ in finals) == [0, 1], job.stdout
    for _, runs, last, step in finals:
        assert int(step) >= 200 and int(runs) > 0, job.stdout
        assert float(last) < 1e-3, job.stdout
    assert sum(int(runs) for _, runs, _, _ in finals) >= 200, job.stdout
    assert any(p.name.startswith("model.ckpt") for p in (tmp_path / "train_logs").iterdir())


@pytest.fixture(scope="module")
def reference_weights(cluster, tmp_path_factory):
    """The weights that netcheck.py trains at full speed (the rate-limited runs must match)."""
    path = tmp_path_factory.mktemp("netcheck") / "full.npz"
    cluster.rate("off")
    job = cluster.run("2+2", [f"{SCRIPTS}/netcheck.py", str(path)], timeout=120)
    assert job.returncode == 0, output(job)
    return np.load(path)


@pytest.mark.parametrize("rate", ["1gbit", "20mbit"])
def test_rate_limited_collectives_fit_and_parameter_server(
    cluster, reference_weights, rate, tmp_path
):
    # A deadline and a stall warning far above what the slowest transfer needs (4 MiB at
    # 20 Mbit: about 2 s): neither may fire.
    deadlines = {"HPCDIST_TIMEOUT_SECONDS": "60", "HPCDIST_STALL_WARNING_SECONDS": "30"}
    cluster.rate(rate)
    try:
        path = tmp_path / "limited.npz"
        job = cluster.run("2+2", [f"{SCRIPTS}/netcheck.py", str(path)], timeout=150, **deadlines)
        text = output(job)
        assert job.returncode == 0, text
        assert "netcheck: 17 collective checks and fit on 4 ranks (2 nodes) ok" in text, text
        weights = np.load(path)
        for key in reference_weights:  # the same training, bit for bit, at any link speed
            assert np.array_equal(weights[key], reference_weights[key]), key
        ps = cluster.run("3+2", ["examples/parameter_server.py"], timeout=150, **deadlines)
        check_parameter_server(ps)
        for done in (job, ps):
            assert "DeadlineExceededError" not in output(done), output(done)
            assert "has waited" not in output(done), output(done)
    finally:
        cluster.rate("off")


def test_at_5_mbit_the_messages_tell_a_slow_transfer_from_a_late_rank(cluster):
    cluster.rate("5mbit")
    try:
        # every rank arrives; 4 MiB cannot cross 5 Mbit within the 3 s deadline
        slow = cluster.run(
            "2+2",
            [f"{SCRIPTS}/slow.py", "slow", "4"],
            timeout=60,
            HPCDIST_TIMEOUT_SECONDS="3",
            HPCDIST_STALL_WARNING_SECONDS="1",
            HPCDIST_LOG_ALL_RANKS="1",
        )
        # the last rank arrives 4 s late at a small all-reduce: no deadline, a warning
        late = cluster.run(
            "2+2",
            [f"{SCRIPTS}/slow.py", "late", "0.001", "4"],
            timeout=60,
            HPCDIST_STALL_WARNING_SECONDS="1",
        )
    finally:
        cluster.rate("off")
    text = output(slow)
    assert slow.returncode != 0, text
    assert "never joined" not in text and "not yet arrived" not in text, text
    errors = re.findall(r"rank (\d) DeadlineExceededError: (.*)", text)
    assert errors, text
    for _, message in errors:
        assert message.endswith(
            "every rank joined (4 of 4); the data has not finished moving: up to 4.0 MiB "
            "outstanding on this rank (no partial progress is known)"
        ), message
    assert "has waited 1 s; every rank has arrived (4 of 4); the data has not finished" in text
    text = output(late)
    assert late.returncode == 0, text
    assert re.search(
        r"allreduce #2 SUM float32\[262\] has waited \d+ s; ranks not yet arrived: 3", text
    ), text
    assert len(re.findall(r"rank \d ok=True", text)) == 4, text


def test_wait_messages_on_a_real_arrival_board():
    """One node, 3 ranks: the texts of a wait where every rank arrived vs where one is late."""
    job = run_mpi(3, [f"{SCRIPTS}/wait_text.py"], timeout=60)
    out = job.stdout
    assert job.returncode == 0, out + job.stderr
    tail = "did not complete within 0.3 s on rank 0 of 3"
    assert f"seq 5 missing=[]: allreduce #5 SUM float32[1024] {tail}" in out, out
    assert (
        "every rank joined (3 of 3); the data has not finished moving: up to 4096 bytes "
        "outstanding on this rank (no partial progress is known)" in out
    ), out
    assert "3072 bytes of 4096 bytes outstanding on this rank" in out, out
    assert f"seq 6 missing=[2]: allreduce #6 SUM float32[1024] {tail}" in out, out
    assert out.rstrip().endswith("seq 6 warning: ranks not yet arrived: 2"), out
    assert "rank(s) 2 never joined" in out, out
