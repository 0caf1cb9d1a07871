"""ParameterServerStrategy jobs: 1 coordinator, 2 ps and 2 workers (``mpiexec -n 5``).

The cases live in ``scripts/ps_cases.py`` and run in one job (starting a job per case would
cost seconds each); each case is reported here as its own test.
"""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

import hpcdist as hd
from tests.helpers import ROOT, clean_env, mpiexec, run_mpi

SCRIPT = "tests/integration/scripts/ps_cases.py"
CASES = sorted(re.findall(r"^def case_(\w+)\(", (ROOT / SCRIPT).read_text(), re.M))


@pytest.fixture(scope="module")
def ps_job(tmp_path_factory):
    out = tmp_path_factory.mktemp("ps")
    env = clean_env(HPCDIST_NUM_PS="2", HPCDIST_PS_SEGMENT_BYTES="65536")
    result = run_mpi(5, [SCRIPT, str(out)], timeout=240, env=env)
    outcomes = dict(re.findall(r"^CASE (\w+) (PASS|FAIL.*)$", result.stdout, re.M))
    return result, outcomes, out


def test_every_rank_exits_cleanly(ps_job):
    result, _, _ = ps_job
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.mark.parametrize("case", CASES)
def test_case(ps_job, case):
    result, outcomes, _ = ps_job
    assert case in outcomes, f"case did not report:\n{result.stdout[-2000:]}{result.stderr[-3000:]}"
    assert outcomes[case] == "PASS", outcomes[case].replace(" | ", "\n")


def test_ps_checkpoint_restores_in_one_process(ps_job):
    """The file holds whole logical tensors: it restores at any world size, sharded or not."""
    _, outcomes, out = ps_job
    assert outcomes.get("checkpoint_restores_into_other_shard_count") == "PASS"
    path = (out / "ps_checkpoint_path").read_text()
    table = hd.strategies.Variable(np.zeros((12, 3), np.float32))
    scalar = hd.strategies.Variable(np.float32(0))
    hd.Checkpoint(table=table, scalar=scalar).restore(path)
    assert np.array_equal(table.numpy(), np.arange(36, dtype=np.float32).reshape(12, 3))
    assert float(scalar.numpy()) == 4.0


MINIMAL = "tests/integration/scripts/ps_minimal.py"


@pytest.mark.parametrize(
    ("ranks", "env", "message"),
    [
        (3, {}, "needs exactly one chief task"),
        (3, {"HPCDIST_NUM_PS": "2"}, "leaves no worker"),
        (1, {}, "needs at least 3 ranks"),
        (2, {}, "needs at least 3 ranks"),
    ],
)
def test_bad_layouts_fail_on_every_rank(ranks, env, message):
    result = run_mpi(ranks, [MINIMAL], timeout=60, env=clean_env(**env))
    assert result.returncode != 0
    assert result.stderr.count(message) == ranks, result.stderr
    assert "coordinator ready" not in result.stdout


def test_program_ending_with_queued_functions_exits_cleanly(tmp_path):
    """At exit, queued functions are cancelled and running ones finish; every rank exits 0."""
    log = tmp_path / "ran.log"
    result = run_mpi(
        4, [MINIMAL, "queued", str(log)], timeout=60, env=clean_env(HPCDIST_NUM_PS="1")
    )
    assert result.returncode == 0, result.stderr
    assert "leaving with functions queued" in result.stdout
    ran = len(log.read_text().splitlines()) if log.exists() else 0
    assert ran < 200, "the queue was run to the end instead of cancelled"


def test_layout_from_resolver_jobs():
    result = run_mpi(4, [MINIMAL, "jobs"], timeout=60)
    assert result.returncode == 0, result.stderr
    assert "coordinator ready: 1 ps, 2 workers" in result.stdout


def test_layout_from_tf_config():
    """Each rank's TF_CONFIG names its task (an MPMD launch): ps is rank 1, the chief rank 2."""
    cluster = {"chief": ["h:1"], "ps": ["h:2"], "worker": ["h:3", "h:4"]}
    tasks = [("worker", 1), ("ps", 0), ("chief", 0), ("worker", 0)]
    command = [mpiexec()]
    for i, (kind, index) in enumerate(tasks):
        config = json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})
        command += [":"] if i else []
        command += ["-n", "1", "-env", "TF_CONFIG", config, sys.executable, MINIMAL, "tfconfig"]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=60, env=clean_env(), cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert "coordinator ready: 1 ps, 2 workers" in result.stdout


def test_function_cache_is_bounded():
    """300 distinct closures of 256 KiB (75 MiB), each dropped once scheduled: memory stays flat.

    A cache keeping every function and its pickle for the job's life grew the coordinator by
    about twice that and each worker by its share.
    """
    result = subprocess.run(
        [sys.executable, "benchmarks/ps_function_cache.py", "--closures", "300", "--kib", "256"],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    measured = json.loads(result.stdout)
    assert measured["coordinator_rss_growth_mib"] < 20, measured
    assert len(measured["worker_rss_growth_mib"]) == 2, measured
    for rank, growth in measured["worker_rss_growth_mib"].items():
        assert growth < 20, f"worker rank {rank} grew by {growth} MiB: {measured}"


RESOLVED = """\
from mpi4py import MPI

import hpcdist as hd

resolver = hd.cluster.resolve()
rank = MPI.COMM_WORLD.Get_rank()
print(f"rank {rank} task {resolver.task_type}:{resolver.task_id}", flush=True)
strategy = hd.ParameterServerStrategy(resolver)
coordinator = hd.ClusterCoordinator(strategy)
with strategy.scope():
    v = strategy.Variable(1.0)
coordinator.schedule(lambda: v.assign_add(1.0)).fetch()
spec = strategy.cluster_resolver.cluster_spec()
print(f"coordinator ready: {spec.num_tasks('ps')} ps, {spec.num_tasks('worker')} workers",
      flush=True)
"""


def test_resolve_honours_num_ps(tmp_path):
    """``ParameterServerStrategy(hd.cluster.resolve())`` with HPCDIST_NUM_PS=1 on 4 ranks.

    ``resolve()`` gives the layout ``ParameterServerStrategy()`` builds from HPCDIST_NUM_PS:
    rank 0 chief, rank 1 ps, ranks 2-3 workers.
    """
    script = tmp_path / "resolved_ps.py"
    script.write_text(RESOLVED)
    result = run_mpi(4, [str(script)], timeout=60, env=clean_env(HPCDIST_NUM_PS="1"))
    assert result.returncode == 0, result.stderr
    assert "set HPCDIST_NUM_PS" not in result.stderr
    tasks = sorted(re.findall(r"rank (\d) task ([a-z]+:\d)", result.stdout))
    assert tasks == [("0", "chief:0"), ("1", "ps:0"), ("2", "worker:0"), ("3", "worker:1")]
    assert "coordinator ready: 1 ps, 2 workers" in result.stdout
