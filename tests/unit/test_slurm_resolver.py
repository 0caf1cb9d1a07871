"""Ported from TF's slurm_cluster_resolver_test where semantics agree; hpcdist's own rules after."""

import pytest

from hpcdist.cluster import ClusterSpec, SlurmClusterResolver
from hpcdist.errors import ClusterConfigError
from hpcdist.settings import get_settings


@pytest.fixture
def slurm_env(monkeypatch):
    for key in list(__import__("os").environ):
        if key.startswith("SLURM_") or key == "CUDA_VISIBLE_DEVICES":
            monkeypatch.delenv(key)

    def set_env(**values):
        for k, v in values.items():
            monkeypatch.setenv(k, v)

    return set_env


def test_simple_retrieval_from_env(slurm_env, monkeypatch):
    slurm_env(
        SLURM_PROCID="0",
        SLURM_STEP_NUM_TASKS="3",
        SLURM_STEP_TASKS_PER_NODE="1(x3)",
        SLURM_STEP_NODELIST="t02n13,t02n41,t02n43",
        CUDA_VISIBLE_DEVICES="0",
    )
    r = SlurmClusterResolver()
    assert r.cluster_spec() == ClusterSpec(
        {"worker": ["t02n13:8888", "t02n41:8888", "t02n43:8888"]}
    )
    assert r.master("worker", 0, rpc_layer="grpc") == "grpc://t02n13:8888"
    assert r.num_accelerators() == {"GPU": 1}
    assert __import__("os").environ["CUDA_VISIBLE_DEVICES"] == "0"


def test_simple_successful_retrieval_with_jobs(slurm_env):
    slurm_env(
        SLURM_PROCID="0", SLURM_STEP_NUM_TASKS="3", SLURM_STEP_NODELIST="t02n13,t02n41,t02n43"
    )
    r = SlurmClusterResolver(
        jobs={"ps": 1, "worker": 2},
        tasks_per_node=1,
        gpus_per_node=1,
        gpus_per_task=1,
        auto_set_gpu=False,
    )
    assert r.cluster_spec() == ClusterSpec(
        {"ps": ["t02n13:8888"], "worker": ["t02n41:8888", "t02n43:8888"]}
    )
    assert (r.task_type, r.task_id) == ("ps", 0)


def test_master_retrieval(slurm_env):
    slurm_env(
        SLURM_PROCID="0", SLURM_STEP_NUM_TASKS="3", SLURM_STEP_NODELIST="t02n13,t02n41,t02n43"
    )
    r = SlurmClusterResolver(
        jobs={"ps": 1, "worker": 2}, tasks_per_node=1, rpc_layer="grpc", auto_set_gpu=False
    )
    r.task_type, r.task_id = "worker", 1
    assert r.master() == "grpc://t02n43:8888"
    r.rpc_layer = "ab"
    assert r.master("ps", 0) == "ab://t02n13:8888"
    assert r.master("ps", 0, rpc_layer="test") == "test://t02n13:8888"


def test_rpc_layer_defaults_to_grpc_as_in_tf(slurm_env):
    slurm_env(
        SLURM_PROCID="3",
        SLURM_STEP_NUM_TASKS="4",
        SLURM_STEP_TASKS_PER_NODE="2(x2)",
        SLURM_STEP_NODELIST="node[01-02]",
    )
    r = SlurmClusterResolver(auto_set_gpu=False)
    assert (r.rpc_layer, r.master()) == ("grpc", "grpc://node02:8889")
    assert r.master("worker", 0) == "grpc://node01:8888"
    assert r.master("worker", 0, rpc_layer="http") == "http://node01:8888"
    bare = SlurmClusterResolver(auto_set_gpu=False, rpc_layer=None)
    assert (bare.rpc_layer, bare.master()) == (None, "node02:8889")
    r.task_type, r.task_id = None, None
    assert r.master() == ""


def test_one_task_step_master_is_its_address_as_in_tf(slurm_env):
    slurm_env(
        SLURM_PROCID="0",
        SLURM_STEP_NUM_TASKS="1",
        SLURM_STEP_TASKS_PER_NODE="1",
        SLURM_STEP_NODELIST="node01",
    )
    assert SlurmClusterResolver(auto_set_gpu=False).master() == "grpc://node01:8888"


def test_multi_task_per_node_and_gpu_binding(slurm_env):
    import os

    slurm_env(
        SLURM_PROCID="1",
        SLURM_STEP_NUM_TASKS="5",
        SLURM_STEP_TASKS_PER_NODE="2(x2),1",
        SLURM_STEP_NODELIST="t02n13,t02n41,t02n43",
        CUDA_VISIBLE_DEVICES="",
    )
    r = SlurmClusterResolver(jobs={"ps": 1, "worker": 4}, gpus_per_node=2, gpus_per_task=1)
    assert r.cluster_spec() == ClusterSpec(
        {
            "ps": ["t02n13:8888"],
            "worker": ["t02n13:8889", "t02n41:8888", "t02n41:8889", "t02n43:8888"],
        }
    )
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    assert (r.local_rank, r.local_size, r.node_rank, r.num_nodes) == (1, 2, 0, 3)


def test_multiple_gpus_per_task(slurm_env):
    import os

    slurm_env(
        SLURM_PROCID="1",
        SLURM_STEP_NUM_TASKS="5",
        SLURM_STEP_TASKS_PER_NODE="2(x2),1",
        SLURM_STEP_NODELIST="t02n13,t02n41,t02n43",
        CUDA_VISIBLE_DEVICES="",
    )
    SlurmClusterResolver(jobs={"ps": 1, "worker": 4}, gpus_per_node=4, gpus_per_task=2)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_gpu_ids_come_from_slurms_visible_devices(slurm_env):
    import os

    slurm_env(
        SLURM_PROCID="3",
        SLURM_LOCALID="1",
        SLURM_NODEID="1",
        SLURM_STEP_NUM_TASKS="4",
        SLURM_STEP_TASKS_PER_NODE="2(x2)",
        SLURM_STEP_NODELIST="g[07-08]",
        CUDA_VISIBLE_DEVICES="4,5,6,7",
    )
    r = SlurmClusterResolver()
    assert r.num_accelerators() == {"GPU": 2}
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert (r.rank, r.local_rank, r.node_rank, r.hosts) == (3, 1, 1, ["g07", "g08"])


def test_zero_gpus_is_valid_and_leaves_visible_devices_alone(slurm_env):
    import os

    slurm_env(
        SLURM_PROCID="0", SLURM_NTASKS="2", SLURM_JOB_NODELIST="cpu1", SLURM_TASKS_PER_NODE="2"
    )
    r = SlurmClusterResolver()
    assert r.num_accelerators() == {"GPU": 0}
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    assert r.world_size == 2 and r.local_size == 2


def test_node_order_is_slurms_not_sorted(slurm_env):
    slurm_env(
        SLURM_PROCID="0",
        SLURM_STEP_NUM_TASKS="4",
        SLURM_STEP_TASKS_PER_NODE="1(x4)",
        SLURM_STEP_NODELIST="zeta,alpha,mid[2,1]",
    )
    r = SlurmClusterResolver()
    # TF would sort; Slurm's order (and so rank placement) is kept.
    assert r.cluster_spec().job_tasks("worker") == [
        "zeta:8888",
        "alpha:8888",
        "mid2:8888",
        "mid1:8888",
    ]


@pytest.mark.parametrize("missing", ["SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST"])
def test_missing_variables_are_named(slurm_env, missing):
    values = dict(
        SLURM_PROCID="0",
        SLURM_STEP_NUM_TASKS="1",
        SLURM_STEP_NODELIST="n1",
        SLURM_STEP_TASKS_PER_NODE="1",
    )
    del values[missing]
    slurm_env(**values)
    with pytest.raises(RuntimeError, match=missing):
        SlurmClusterResolver()


@pytest.mark.parametrize(
    ("env", "kwargs", "match"),
    [
        (dict(SLURM_STEP_TASKS_PER_NODE="1,1"), {}, "name 2 nodes"),
        (dict(SLURM_STEP_TASKS_PER_NODE="1"), {}, r"SLURM_STEP_TASKS_PER_NODE='1' .* 1 task"),
        (dict(SLURM_STEP_TASKS_PER_NODE="3"), {}, r"SLURM_STEP_TASKS_PER_NODE='3' .* 3 tasks"),
        ({}, dict(tasks_per_node=3), r"tasks_per_node=3 .* 3 tasks .*SLURM_STEP_NUM_TASKS='2'"),
        ({}, dict(tasks_per_node=[1]), r"tasks_per_node=\[1\] .* 1 task"),
        (dict(SLURM_NODEID="1"), {}, r"SLURM_NODEID='1' .* 1 node"),
        (dict(SLURM_NODEID="-1"), {}, r"SLURM_NODEID='-1'"),
        (dict(SLURM_NODEID="zero"), {}, r"SLURM_NODEID='zero' is not an integer"),
        (dict(SLURM_LOCALID="2"), {}, r"SLURM_LOCALID='2' .* 2 tasks on node 0 \('n1'\)"),
        (dict(SLURM_LOCALID="1.0"), {}, r"SLURM_LOCALID='1.0' is not an integer"),
        (dict(SLURM_GPUS_ON_NODE="two"), {}, r"SLURM_GPUS_ON_NODE='two' is not an integer"),
        (dict(SLURM_PROCID="7"), {}, "outside"),
        (dict(SLURM_PROCID="x"), {}, "not an integer"),
        (dict(SLURM_STEP_NODELIST="n[2-1]"), {}, "runs backwards"),
        ({}, dict(gpus_per_node=1, gpus_per_task=1), "GPU"),
        ({}, dict(jobs={"worker": 3}), "ask for 3"),
    ],
)
def test_contradictions(slurm_env, env, kwargs, match):
    values = dict(
        SLURM_PROCID="0",
        SLURM_STEP_NUM_TASKS="2",
        SLURM_STEP_NODELIST="n1",
        SLURM_STEP_TASKS_PER_NODE="2",
    )
    values.update(env)
    slurm_env(**values)
    with pytest.raises(ClusterConfigError, match=match):
        SlurmClusterResolver(**kwargs)


def test_localid_is_checked_against_its_own_node(slurm_env):
    slurm_env(
        SLURM_PROCID="2",
        SLURM_NODEID="1",
        SLURM_LOCALID="1",
        SLURM_STEP_NUM_TASKS="3",
        SLURM_STEP_TASKS_PER_NODE="2,1",
        SLURM_STEP_NODELIST="a,b",
    )
    with pytest.raises(ClusterConfigError, match=r"SLURM_LOCALID='1' .* 1 task on node 1 \('b'\)"):
        SlurmClusterResolver()
    slurm_env(SLURM_LOCALID="0")
    r = SlurmClusterResolver()
    assert (r.rank, r.node_rank, r.local_rank, r.local_size) == (2, 1, 0, 1)


def test_task_counts_from_the_job_must_match_the_step_too(slurm_env):
    slurm_env(
        SLURM_PROCID="0", SLURM_NTASKS="3", SLURM_JOB_NODELIST="a,b", SLURM_TASKS_PER_NODE="2(x2)"
    )
    with pytest.raises(ClusterConfigError, match=r"SLURM_TASKS_PER_NODE='2\(x2\)' .* 4 tasks"):
        SlurmClusterResolver()


@pytest.fixture
def num_ps(monkeypatch):
    """Set HPCDIST_NUM_PS for one test (settings are read again before and after)."""

    def set_num_ps(value):
        monkeypatch.setenv("HPCDIST_NUM_PS", value)
        get_settings(refresh=True)

    yield set_num_ps
    monkeypatch.delenv("HPCDIST_NUM_PS", raising=False)
    get_settings(refresh=True)


def test_num_ps_gives_the_parameter_server_layout(slurm_env, num_ps):
    # The layout ParameterServerStrategy() builds from HPCDIST_NUM_PS: chief 0, ps 1..n, workers.
    slurm_env(
        SLURM_PROCID="1",
        SLURM_STEP_NUM_TASKS="4",
        SLURM_STEP_TASKS_PER_NODE="2(x2)",
        SLURM_STEP_NODELIST="n[1-2]",
    )
    num_ps("1")
    r = SlurmClusterResolver(auto_set_gpu=False)
    assert (r.task_type, r.task_id) == ("ps", 0)
    assert r.cluster_spec() == ClusterSpec(
        {"chief": ["n1:8888"], "ps": ["n1:8889"], "worker": ["n2:8888", "n2:8889"]}
    )
    # Explicit jobs win over HPCDIST_NUM_PS.
    assert SlurmClusterResolver(jobs={"worker": 4}, auto_set_gpu=False).task_type == "worker"
    num_ps("3")
    with pytest.raises(ClusterConfigError, match="HPCDIST_NUM_PS=3 leaves no worker among 4"):
        SlurmClusterResolver(auto_set_gpu=False)
