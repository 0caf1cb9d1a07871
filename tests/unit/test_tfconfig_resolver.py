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
    tf_config(
        {"cluster": {"123456": ["a:1"], "worker": ["b:1"]}, "task": {"type": 123456, "index": "0"}}
    )
    r = TFConfigClusterResolver()
    assert r.task_type == "123456"
    assert r.task_id == 0


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


def test_evaluator_outside_cluster_is_allowed(tf_config):
    tf_config({"cluster": {"worker": ["w0:1"]}, "task": {"type": "evaluator", "index": 0}})
    assert TFConfigClusterResolver().task_type == "evaluator"
