"""Bug 4 of issue 22: TF's parameter-server tutorial passes a resolver without a task.

``ParameterServerStrategy(SimpleClusterResolver(cluster_spec, rpc_layer="grpc"))`` is how TF's
tutorial builds its in-process cluster; under MPI every rank needs its task, and the strategy
says so with a `ClusterConfigError` (it raised ``TypeError: int() ... NoneType`` before).
"""

from __future__ import annotations

import textwrap

import pytest

import hpcdist as hd
from hpcdist.errors import ClusterConfigError
from tests.helpers import clean_env, run_mpi

SPEC = {
    "worker": ["localhost:2222", "localhost:2223", "localhost:2224"],
    "ps": ["localhost:2225", "localhost:2226"],
}


def test_a_resolver_without_task_is_a_cluster_config_error():
    resolver = hd.cluster.SimpleClusterResolver(hd.cluster.ClusterSpec(SPEC), rpc_layer="grpc")
    with pytest.raises(ClusterConfigError) as info:
        hd.ParameterServerStrategy(resolver)
    message = str(info.value)
    assert "rank 0: task_type=None, task_id=None" in message
    assert "SimpleClusterResolver gave no task on 1 of 1 rank(s)" in message
    assert "task_type= and task_id=" in message and "MPIClusterResolver" in message
    assert "HPCDIST_NUM_PS" in message


# Every rank builds the strategy; each writes the ClusterConfigError it got (or exits 3).
_RAISE = """
try:
    hd.ParameterServerStrategy(resolver)
except hd.errors.ClusterConfigError as exc:
    with open(os.path.join(sys.argv[1], f"rank{rank}"), "w") as f:
        f.write(str(exc))
    sys.exit(0)
sys.exit(3)
"""


def _errors_on_three_ranks(tmp_path, setup: str, **env: str) -> list[str]:
    """Run ``setup`` then the strategy's construction on 3 ranks; each rank's error message."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(setup) + _RAISE)
    out = tmp_path / "out"
    out.mkdir()
    done = run_mpi(
        3, [str(script), str(out)], timeout=90, env=clean_env(HPCDIST_TIMEOUT_SECONDS="30", **env)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["rank0", "rank1", "rank2"]
    return [(out / f"rank{rank}").read_text() for rank in range(3)]


def test_every_rank_raises_when_some_rank_has_no_task(tmp_path):
    setup = """
    import os, sys
    import hpcdist as hd
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    spec = {"worker": ["w0:1", "w1:1"], "ps": ["p0:1"]}
    # rank 1 names its task, the others do not: every rank must raise the same error
    task = ("worker", 0) if rank == 1 else (None, None)
    resolver = hd.cluster.SimpleClusterResolver(spec, task[0], task[1], rpc_layer="grpc")
    """
    for message in _errors_on_three_ranks(tmp_path, setup):
        assert "gave no task on 2 of 3 rank(s) (rank 0: task_type=None" in message
        assert "rank 2: task_type=None, task_id=None" in message


def test_every_rank_raises_when_some_rank_runs_below_thread_multiple(tmp_path):
    # The coordinator's dispatcher and a worker's batch watchdog call MPI beside the user's
    # thread: a rank below MPI_THREAD_MULTIPLE is an error on every rank, not a hang.
    setup = """
    import os, sys
    import mpi4py
    mpi4py.rc.thread_level = "serialized" if os.environ["PMI_RANK"] == "2" else "multiple"
    import hpcdist as hd
    from mpi4py import MPI

    rank, resolver = MPI.COMM_WORLD.Get_rank(), None
    """
    messages = _errors_on_three_ranks(tmp_path, setup, HPCDIST_NUM_PS="1")
    for rank, message in enumerate(messages):
        assert message.startswith(f"rank {rank}: ParameterServerStrategy expected MPI_THREAD")
        assert "lower thread level (MPI.Query_thread()) on rank(s) [2]" in message
