"""Cluster resolvers and ClusterSpec: TF_CONFIG, Slurm's variables, sparse and empty jobs."""

import json
import os

import pytest

from tests.conformance.helpers import HD, TF, Raised, assert_documented, attempt, both, conform

EMPTY_JOB_TASKS = (
    "docs/differences-from-tensorflow.md: `ClusterSpec.job_tasks` of a job without tasks is `[]`"
)

TF_CONFIG_CHECKED = "docs/differences-from-tensorflow.md: `TF_CONFIG` is checked where it is read."
SPEC_EQ_DICT = (
    "docs/differences-from-tensorflow.md: `ClusterSpec == dict` compares tasks, whatever form the "
    "dict uses"
)
SLURM_ORDER = "docs/differences-from-tensorflow.md: Slurm: node order is Slurm's"

CLUSTER = {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222"], "ps": ["p0:2222"]}
TF_CONFIGS = {
    "worker-1": {"cluster": CLUSTER, "task": {"type": "worker", "index": 1}},
    "chief": {"cluster": CLUSTER, "task": {"type": "chief", "index": 0}},
    "ps-rpc": {"cluster": CLUSTER, "task": {"type": "ps", "index": 0}, "rpc_layer": "grpc"},
    "session-master": {
        "cluster": CLUSTER,
        "task": {"type": "worker", "index": 0},
        "session_master": "sm:3333",
    },
    "session-master-rpc": {
        "cluster": CLUSTER,
        "task": {"type": "worker", "index": 0},
        "session_master": "sm:3333",
        "rpc_layer": "grpc",
    },
    "no-task": {"cluster": {"worker": ["w0:1"]}},
    "no-task-several": {"cluster": CLUSTER},
    "evaluator": {"cluster": CLUSTER, "task": {"type": "evaluator", "index": 0}},
    "index-as-string": {"cluster": CLUSTER, "task": {"type": "worker", "index": "1"}},
    "empty": {},
}


def describe_tfconfig(lib):
    r = lib.resolvers.TFConfigClusterResolver()
    return {
        "cluster": attempt(lambda: r.cluster_spec().as_dict()),
        "task": attempt(lambda: (r.task_type, r.task_id)),
        "rpc_layer": attempt(lambda: r.rpc_layer),
        "master": attempt(lambda: r.master()),
        "master_ps": attempt(lambda: r.master("ps", 0)),
        "master_worker_grpc": attempt(lambda: r.master("worker", 1, rpc_layer="grpc")),
    }


@pytest.mark.parametrize("config", list(TF_CONFIGS))
def test_tfconfig_resolver(config, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps(TF_CONFIGS[config]))
    conform(describe_tfconfig)


def test_tfconfig_resolver_without_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    out = conform(describe_tfconfig)
    assert out["master"] == ""


def test_session_master_and_empty_master(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps(TF_CONFIGS["session-master"]))
    assert conform(lambda lib: lib.resolvers.TFConfigClusterResolver().master()) == "sm:3333"
    monkeypatch.delenv("TF_CONFIG")
    assert conform(lambda lib: lib.resolvers.TFConfigClusterResolver().master()) == ""


def test_resolver_attributes(monkeypatch):
    """Attributes a ported program may read beyond cluster_spec/master/task_type/task_id."""
    monkeypatch.setenv("TF_CONFIG", json.dumps(TF_CONFIGS["worker-1"]))
    slurm_env(monkeypatch, 0, 2, "h1", "2")

    def case(lib):
        tfc = lib.resolvers.TFConfigClusterResolver()
        slurm = lib.resolvers.SlurmClusterResolver(auto_set_gpu=False)
        return {
            "tfconfig.environment": attempt(lambda: tfc.environment),
            "slurm.get_task_info": attempt(lambda: slurm.cluster_spec() and slurm.get_task_info()),
            "slurm.environment": attempt(lambda: slurm.environment),
        }

    conform(case)


def test_tfconfig_arguments_override(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps(TF_CONFIGS["worker-1"]))

    def case(lib):
        r = lib.resolvers.TFConfigClusterResolver(task_type="ps", task_id=0, rpc_layer="grpc")
        return r.task_type, r.task_id, r.master(), r.cluster_spec().as_dict()

    conform(case)


def test_two_chiefs_is_a_documented_difference(monkeypatch):
    assert_documented(TF_CONFIG_CHECKED)
    config = {"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    expected, got = both(
        lambda lib: lib.resolvers.TFConfigClusterResolver().cluster_spec().as_dict()
    )
    assert expected == {"chief": ["a:1", "b:1"]}  # TF accepts it here
    assert got.family == "ValueError" and "ClusterConfigError" in got.message


def test_task_outside_its_job_is_a_documented_difference(monkeypatch):
    """TF accepts task index 5 of a two-task job and fails in master(); hpcdist at once."""
    assert_documented(TF_CONFIG_CHECKED)
    config = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 5}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    expected, got = both(describe_tfconfig)
    assert expected["cluster"] == {"worker": ["a:1", "b:1"]} and expected["task"] == ("worker", 5)
    assert expected["master"].family == "ValueError"
    assert got.family == "ValueError" and "ClusterConfigError" in got.message


def test_task_type_outside_the_cluster_is_a_documented_difference(monkeypatch):
    """TF accepts a task type the cluster has no job for; master() then names the job."""
    assert_documented(TF_CONFIG_CHECKED)
    config = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "ps", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    expected, got = both(describe_tfconfig)
    assert expected["cluster"] == {"worker": ["a:1", "b:1"]} and expected["task"] == ("ps", 0)
    assert expected["master"].family == "ValueError" and "ps" in expected["master"].message
    assert expected["master_worker_grpc"] == "grpc://b:1"
    assert got.family == "ValueError" and "ClusterConfigError" in got.message
    assert "task type 'ps' is not a job of the cluster ['worker']" in got.message


# -- ClusterSpec ------------------------------------------------------------------------------

SPECS = {
    "dense": {"worker": ["w0:1", "w1:1"], "ps": ["p0:1"]},
    "sparse": {"worker": {1: "w1:1", 3: "w3:1"}},
    "empty-job": {"worker": ["w0:1"], "ps": []},
    "empty-sparse-job": {"worker": ["w0:1"], "ps": {}},
    "nothing": {},
}


@pytest.mark.parametrize("spec", list(SPECS))
def test_cluster_spec(spec):
    def case(lib):
        s = (
            lib.train.ClusterSpec(SPECS[spec])
            if lib is TF
            else lib.resolvers.ClusterSpec(SPECS[spec])
        )
        out = {"as_dict": s.as_dict(), "jobs": sorted(s.jobs), "bool": bool(s)}
        for job in s.jobs:
            empty = not s.task_indices(job)  # job_tasks of an empty job: a documented difference
            out[job] = (
                attempt(lambda j=job: s.num_tasks(j)),
                attempt(lambda j=job: s.task_indices(j)),
                None if empty else attempt(lambda j=job: s.job_tasks(j)),
            )
        out["missing"] = attempt(lambda: s.task_address("worker", 2))
        out["no_job"] = attempt(lambda: s.num_tasks("evaluator"))
        return out

    conform(case)
    if spec.startswith("empty"):
        tf_spec = TF.train.ClusterSpec(SPECS[spec])
        assert isinstance(attempt(lambda: tf_spec.job_tasks("ps")), Raised)
        assert HD.resolvers.ClusterSpec(SPECS[spec]).job_tasks("ps") == []
        assert_documented(EMPTY_JOB_TASKS)


def test_cluster_spec_equality():
    def case(lib):
        spec = TF.train.ClusterSpec if lib is TF else HD.resolvers.ClusterSpec
        sparse = spec({"worker": {0: "w0:1", 1: "w1:1"}})
        return {
            "sparse==dense-spec": sparse == spec({"worker": ["w0:1", "w1:1"]}),
            "sparse==sparse-dict": sparse == {"worker": {0: "w0:1", 1: "w1:1"}},
            "copy==": spec(sparse) == sparse,
            "!=": spec({"worker": ["a:1"]}) != spec({"worker": ["b:1"]}),
            "empty-job-spec==": spec({"worker": ["a:1"], "ps": []})
            == spec({"worker": ["a:1"], "ps": []}),
        }

    conform(case)


def test_cluster_spec_equals_a_dense_dict_is_a_documented_difference():
    """TF compares its sparse form with the dict as given: a dense list is unequal."""
    assert_documented(SPEC_EQ_DICT)

    def case(lib):
        spec = TF.train.ClusterSpec if lib is TF else HD.resolvers.ClusterSpec
        return [
            spec({"worker": {0: "w0:1", 1: "w1:1"}}) == {"worker": ["w0:1", "w1:1"]},
            spec({"worker": ["a:1"]}) == {"worker": ["a:1"]},
            spec({"worker": ["a:1"], "ps": []}) == {"worker": ["a:1"], "ps": []},
        ]

    expected, got = both(case)
    assert expected == [False, False, False]
    assert got == [True, True, True]


def test_cluster_spec_of_a_cluster_spec_and_bad_input():
    def case(lib):
        spec = TF.train.ClusterSpec if lib is TF else HD.resolvers.ClusterSpec
        return (
            spec(spec({"worker": ["a:1"]})).as_dict(),
            attempt(lambda: spec(["a:1"])),
            attempt(lambda: spec({"worker": "a:1"}).as_dict()),
            attempt(lambda: spec({"worker": {"x": "a:1"}}).as_dict()),
        )

    conform(case)


# -- Slurm ------------------------------------------------------------------------------------


def slurm_env(monkeypatch, procid, ntasks, nodelist, tasks_per_node, gpus="0,1,2,3"):
    for var in (
        "HPCDIST_NUM_PS",
        "SLURM_NTASKS",
        "SLURM_JOB_NODELIST",
        "SLURM_TASKS_PER_NODE",
        "SLURM_LOCALID",
        "SLURM_NODEID",
        "SLURM_GPUS_ON_NODE",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SLURM_PROCID", str(procid))
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", str(ntasks))
    monkeypatch.setenv("SLURM_STEP_NODELIST", nodelist)
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", tasks_per_node)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", gpus)


def describe_slurm(lib, **kw):
    kw.setdefault("auto_set_gpu", False)
    r = lib.resolvers.SlurmClusterResolver(**kw)
    spec = r.cluster_spec().as_dict()
    return {
        "cluster": spec,
        "task": (r.task_type, r.task_id),
        "master_grpc": attempt(lambda: r.master(rpc_layer="grpc")),
        "master_worker_0": attempt(lambda: r.master("worker", 0, rpc_layer="grpc")),
        "accelerators": r.num_accelerators(),
    }


SLURM_CASES = {
    "2-nodes-2-each-rank-3": (3, 4, "node[1-2]", "2(x2)", {}),
    "2-nodes-rank-0": (0, 4, "node[1-2]", "2(x2)", {}),
    "uneven-tasks": (2, 3, "n1,n2", "2,1", {}),
    "jobs": (1, 4, "node[1-2]", "2(x2)", {"jobs": {"chief": 1, "ps": 1, "worker": 2}}),
    "jobs-rank-3": (3, 4, "node[1-2]", "2(x2)", {"jobs": {"chief": 1, "ps": 1, "worker": 2}}),
    "port-base": (1, 2, "h1", "2", {"port_base": 3000}),
    "gpus-per-task": (1, 2, "h1", "2", {"gpus_per_node": 4, "gpus_per_task": 1}),
    "tasks-per-node-arg": (1, 4, "node[1-2]", "2(x2)", {"tasks_per_node": 2}),
    "jobs-mismatch": (0, 4, "node[1-2]", "2(x2)", {"jobs": {"worker": 3}}),
    "too-many-gpus": (0, 2, "h1", "2", {"gpus_per_node": 2, "gpus_per_task": 2}),
}


@pytest.mark.parametrize("case_name", list(SLURM_CASES))
def test_slurm_resolver(case_name, monkeypatch):
    procid, ntasks, nodes, per_node, kw = SLURM_CASES[case_name]
    slurm_env(monkeypatch, procid, ntasks, nodes, per_node)
    conform(lambda lib: describe_slurm(lib, **kw))


SLURM_MASTER_CASES = {
    "default": (3, 4, "node[01-02]", "2(x2)", {}),
    "one-task": (0, 1, "node01", "1", {}),
    "ps-layout": (3, 4, "node[01-02]", "2(x2)", {"jobs": {"ps": 2, "worker": 2}}),
    "rpc-none": (1, 2, "node[01-02]", "1,1", {"rpc_layer": None}),
    "rpc-custom": (1, 2, "node[01-02]", "1,1", {"rpc_layer": "grpc+verbs"}),
}


@pytest.mark.parametrize("case_name", list(SLURM_MASTER_CASES))
def test_slurm_rpc_layer_and_master(case_name, monkeypatch):
    """TF's SlurmClusterResolver defaults to rpc_layer "grpc": master() is grpc://host:port."""
    procid, ntasks, nodes, per_node, kw = SLURM_MASTER_CASES[case_name]
    slurm_env(monkeypatch, procid, ntasks, nodes, per_node)

    def case(lib):
        r = lib.resolvers.SlurmClusterResolver(auto_set_gpu=False, **kw)
        r.cluster_spec()
        out = {
            "rpc_layer": r.rpc_layer,
            "master": r.master(),
            "master_worker_0": attempt(lambda: r.master("worker", 0)),
            "master_override": attempt(lambda: r.master(rpc_layer="http")),
        }
        r.task_type, r.task_id = None, None
        out["master_without_task"] = r.master()
        return out

    out = conform(case)
    if case_name == "default":
        assert out["rpc_layer"] == "grpc" and out["master"] == "grpc://node02:8889"


def test_slurm_sets_cuda_visible_devices(monkeypatch):
    def case(lib):
        slurm_env(monkeypatch, 1, 2, "h1", "2")
        r = lib.resolvers.SlurmClusterResolver(gpus_per_node=4)
        r.cluster_spec()
        return os.environ["CUDA_VISIBLE_DEVICES"]

    assert conform(case) == "2,3"


def test_slurm_node_order_is_a_documented_difference(monkeypatch):
    assert_documented(SLURM_ORDER)
    slurm_env(monkeypatch, 0, 2, "b1,a1", "1,1")
    expected, got = both(lambda lib: describe_slurm(lib)["cluster"])
    assert expected == {"worker": ["a1:8888", "b1:8888"]}  # TF sorts the host names
    assert got == {"worker": ["b1:8888", "a1:8888"]}  # hpcdist keeps Slurm's order


def test_slurm_zero_gpus_is_a_documented_difference(monkeypatch):
    assert_documented(SLURM_ORDER)  # the same entry: "... zero GPUs is valid"
    slurm_env(monkeypatch, 0, 2, "h1", "2", gpus="")
    expected, got = both(lambda lib: describe_slurm(lib, gpus_per_node=0)["cluster"])
    assert expected.family == "ValueError"  # TF: range() arg 3 must not be zero
    assert got == {"worker": ["h1:8888", "h1:8889"]}


def test_slurm_missing_variables(monkeypatch):
    for var in ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    conform(lambda lib: lib.resolvers.SlurmClusterResolver(gpus_per_node=1))
