"""Ported from TF's tfconfig_cluster_resolver_test, plus hpcdist's bad-input rules."""

import json

import pytest

from hpcdist.cluster import ClusterSpec, TFConfigClusterResolver
from hpcdist.errors import ClusterConfigError

BASE = {
    "cluster": {
        "ps": ["ps0:2222", "ps1:2222"],
        "worker": ["worker0:2222", "worker1:2222", "worker2:2222"],
    },
    "task": {"type": "ps", "index": 0},
}


@pytest.fixture
def tf_config(monkeypatch):
    def set_config(config):
        monkeypatch.setenv("TF_CONFIG", config if isinstance(config, str) else json.dumps(config))

    return set_config


def test_normal_cluster_spec_read(tf_config):
    tf_config(BASE)
    assert TFConfigClusterResolver().cluster_spec() == ClusterSpec(BASE["cluster"])


def test_master(tf_config):
    tf_config(BASE)
    r = TFConfigClusterResolver()
    assert r.master() == "ps0:2222"
    assert r.master("worker", 1) == "worker1:2222"
    tf_config({**BASE, "session_master": "sessionmaster:2222"})
    assert TFConfigClusterResolver().master() == "sessionmaster:2222"
    tf_config({**BASE, "rpc_layer": "grpc"})
    assert TFConfigClusterResolver().master() == "grpc://ps0:2222"


def test_task_type_index_rpc_and_overrides(tf_config):
    tf_config({**BASE, "rpc_layer": "grpc", "task": {"type": "ps", "index": 1}})
    r = TFConfigClusterResolver(task_type="ps", task_id=0)
    assert r.master() == "grpc://ps0:2222"
    assert (r.task_type, r.task_id, r.rpc_layer) == ("ps", 0, "grpc")
    r.task_type, r.task_id, r.rpc_layer = "worker", 1, "test"
    assert r.master() == "test://worker1:2222"
    assert (r.task_type, r.task_id, r.rpc_layer) == ("worker", 1, "test")


def test_casts(tf_config):
    # TF casts task.index with int(); hpcdist keeps that for integers written as strings.
    tf_config({"cluster": {"ps": ["a:1"], "worker": ["b:1"]}, "task": {"type": "ps", "index": "0"}})
    r = TFConfigClusterResolver()
    assert r.task_type == "ps"
    assert r.task_id == 0
    tf_config({"cluster": {"worker": {"1": "b:1"}}, "task": {"type": "worker", "index": " 1 "}})
    assert TFConfigClusterResolver().task_id == 1


def test_task_index_override(tf_config):
    tf_config(
        {"cluster": {"worker": ["w0:2222", "w1:2222"]}, "task": {"type": "worker", "index": "0"}}
    )
    assert TFConfigClusterResolver(task_id=1).task_id == 1


def test_zero_and_one_item_master(tf_config):
    tf_config("{}")
    assert TFConfigClusterResolver().master() == ""
    tf_config({"cluster": {"worker": ["worker0:2222"]}})
    assert TFConfigClusterResolver().master() == ""


TWO_WORKERS = {"worker": ["w0:1", "w1:1"]}
MASTER_CALLS = [
    ((), {}),
    ((), {"rpc_layer": "grpc+verbs"}),
    (("worker", 0), {}),
    (("worker", 0), {"rpc_layer": "http"}),
]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        # Expected values: TF 2.21's TFConfigClusterResolver.master() for the same TF_CONFIG
        # and calls (checked by running TF). session_master wins, exactly as given.
        (
            {
                "cluster": TWO_WORKERS,
                "task": {"type": "worker", "index": 1},
                "session_master": "sm:3333",
            },
            ["sm:3333"] * 4,
        ),
        (
            {
                "cluster": TWO_WORKERS,
                "task": {"type": "worker", "index": 1},
                "session_master": "sm:3333",
                "rpc_layer": "grpc",
            },
            ["sm:3333"] * 4,
        ),
        (
            {"cluster": TWO_WORKERS, "task": {"type": "worker", "index": 1}, "session_master": ""},
            [""] * 4,
        ),
        # One task in the cluster, or no cluster: "" even for a named task or an rpc layer.
        (
            {
                "cluster": {"worker": ["w0:1"]},
                "task": {"type": "worker", "index": 0},
                "rpc_layer": "grpc",
            },
            [""] * 4,
        ),
        ({"cluster": {}}, [""] * 4),
        (None, [""] * 4),
        # Several tasks: the task's address, the rpc layer always prefixed.
        (
            {"cluster": TWO_WORKERS, "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc"},
            ["grpc://w1:1", "grpc+verbs://w1:1", "grpc://w0:1", "http://w0:1"],
        ),
        (
            {
                "cluster": {"worker": ["grpc://w0:1", "w1:1"]},
                "task": {"type": "worker", "index": 0},
                "rpc_layer": "grpc",
            },
            [
                "grpc://grpc://w0:1",
                "grpc+verbs://grpc://w0:1",
                "grpc://grpc://w0:1",
                "http://grpc://w0:1",
            ],
        ),
        # Several tasks and no task: TF raises ValueError unless a task is named.
        ({"cluster": TWO_WORKERS}, [ValueError, ValueError, "w0:1", "http://w0:1"]),
    ],
)
def test_master_follows_tf(tf_config, monkeypatch, config, expected):
    if config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        tf_config(config)
    r = TFConfigClusterResolver()
    for (args, kwargs), want in zip(MASTER_CALLS, expected, strict=True):
        if want is ValueError:
            with pytest.raises(ValueError, match="task_type=None, task_id=None"):
                r.master(*args, **kwargs)
        else:
            assert r.master(*args, **kwargs) == want, (args, kwargs)


def test_master_single_task_ignores_named_task(tf_config):
    # TF 2.21: a one-task cluster gives "" even for master("chief", 0) of a chief-only cluster.
    tf_config({"cluster": {"chief": ["c0:1"]}, "task": {"type": "chief", "index": 0}})
    assert TFConfigClusterResolver().master("chief", 0) == ""


def test_reread_on_every_access(tf_config):
    tf_config(BASE)
    r = TFConfigClusterResolver()
    assert r.task_type == "ps"
    tf_config({**BASE, "task": {"type": "worker", "index": 2}})
    assert (r.task_type, r.task_id) == ("worker", 2)
    assert r.rank == 4 and r.world_size == 5


def test_rank_order_and_chief(tf_config):
    tf_config(
        {
            "cluster": {"worker": ["h1:1", "h1:2"], "chief": ["h0:1"]},
            "task": {"type": "worker", "index": 1},
        }
    )
    r = TFConfigClusterResolver()
    assert r.rank == 2
    assert not r.is_chief
    assert (r.local_rank, r.local_size, r.node_rank, r.num_nodes) == (1, 2, 1, 2)


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ({"cluster": {"worker": "w0:1"}}, "list of addresses"),
        ({"cluster": {"worker": ["w0:1"]}, "task": {"type": "ps", "index": 0}}, "not a job"),
        ({"cluster": {"worker": ["w0:1"]}, "task": {"type": "worker", "index": 3}}, "not a task"),
        (
            {"cluster": {"worker": ["w0:1"]}, "task": {"type": "worker", "index": "x"}},
            "not an integer",
        ),
    ],
)
def test_bad_tf_config(tf_config, config, match):
    tf_config(config)
    with pytest.raises(ClusterConfigError, match=match) as info:
        TFConfigClusterResolver()
    if isinstance(config, str):
        assert config in str(info.value)


W2 = {"worker": ["w0:1", "w1:1"]}


@pytest.mark.parametrize(
    ("config", "match"),
    [
        # TF's resolver casts with int(): 0.5 -> 0 and true -> 1, silently another task.
        ({"cluster": W2, "task": {"type": "worker", "index": 0.5}}, r"index 0\.5 .*integer"),
        ({"cluster": W2, "task": {"type": "worker", "index": True}}, r"index True .*integer"),
        ({"cluster": W2, "task": {"type": "worker", "index": "0.5"}}, r"index '0\.5' .*integer"),
        ({"cluster": W2, "task": {"type": "worker", "index": -1}}, r"index -1 .*integer >= 0"),
        ({"cluster": W2, "task": {"type": "worker", "index": [0]}}, r"index \[0\] .*integer"),
        ({"cluster": {"worker": {"0.5": "w0:1"}}}, r"index '0\.5' of job 'worker'"),
        # TF's multi-worker strategies reject these (multi_worker_util._validate_cluster_spec).
        ({"cluster": {"chief": ["c0:1", "c1:1"], "worker": ["w0:1"]}}, r"at most one 'chief'"),
        ({"cluster": {"evaluator": ["e0:1", "e1:1"], **W2}}, r"at most one 'evaluator'"),
        ({"cluster": {"boss": ["b0:1"], **W2}}, r"unknown role 'boss'.*chief"),
        (
            {"cluster": {"123456": ["a:1"]}, "task": {"type": 123456, "index": 0}},
            r"unknown role '123456'",
        ),
        ({"cluster": {"worker": ["h:1", "h:1"]}}, r"address 'h:1' .*worker:0 and worker:1"),
        (
            {"cluster": {"chief": ["h:1"], "worker": ["h:2", "h:1"]}},
            r"address 'h:1' .*chief:0 and worker:1",
        ),
    ],
)
def test_lenient_tf_config_is_rejected_quoting_the_input(tf_config, config, match):
    tf_config(config)
    with pytest.raises(ClusterConfigError, match=match) as info:
        TFConfigClusterResolver()
    assert "TF_CONFIG" in str(info.value)


@pytest.mark.parametrize("task_id", [0.5, True, "x", -2])
def test_task_id_argument_must_be_an_index(tf_config, task_id):
    tf_config({"cluster": W2})
    with pytest.raises(ClusterConfigError, match="integer"):
        TFConfigClusterResolver(task_type="worker", task_id=task_id)


def test_evaluator_outside_cluster_is_allowed(tf_config):
    tf_config({"cluster": {"worker": ["w0:1"]}, "task": {"type": "evaluator", "index": 0}})
    assert TFConfigClusterResolver().task_type == "evaluator"
