import pytest

from hpcdist.cluster import ClusterSpec, SimpleClusterResolver, assign_jobs, is_chief
from hpcdist.errors import ClusterConfigError


def test_cluster_spec_dense_and_sparse():
    spec = ClusterSpec({"worker": ["w0:1", "w1:1"], "ps": {1: "p1:2", 3: "p3:2"}})
    assert spec.jobs == ["worker", "ps"]
    assert spec.num_tasks("ps") == 2
    assert spec.task_indices("ps") == [1, 3]
    assert spec.task_address("ps", 3) == "p3:2"
    assert spec.job_tasks("ps") == [None, "p1:2", None, "p3:2"]
    assert spec.as_dict() == {"worker": ["w0:1", "w1:1"], "ps": {1: "p1:2", 3: "p3:2"}}
    assert ClusterSpec(spec) == spec
    assert spec == {"worker": ["w0:1", "w1:1"], "ps": {1: "p1:2", 3: "p3:2"}}
    assert not ClusterSpec({})
    assert spec


def test_cluster_spec_errors():
    with pytest.raises(ValueError, match="no such job"):
        ClusterSpec({"worker": ["a"]}).num_tasks("ps")
    with pytest.raises(ValueError, match="no task 5"):
        ClusterSpec({"worker": ["a"]}).task_address("worker", 5)
    with pytest.raises(ClusterConfigError, match="not an integer"):
        ClusterSpec({"worker": {"x": "a"}})
    with pytest.raises(ClusterConfigError, match="must be a string"):
        ClusterSpec({"worker": [1]})
    with pytest.raises(TypeError, match="list of addresses"):  # TF's TypeError
        ClusterSpec({"worker": "a"})
    with pytest.raises(TypeError, match="must be a dict"):
        ClusterSpec(["a:1"])


@pytest.mark.parametrize("index", [0.5, 1.0, True, "1.5", "-1", -1, None])
def test_cluster_spec_indices_must_be_integers(index):
    with pytest.raises(ClusterConfigError, match=f"task index {index!r} of job 'ps'"):
        ClusterSpec({"ps": {index: "p:1"}})


def test_cluster_spec_accepts_integer_strings_as_indices():
    assert ClusterSpec({"ps": {"3": "p:1", 1: "q:1"}}).task_indices("ps") == [1, 3]


def test_assign_jobs_order_is_sorted_roles():
    assert assign_jobs(None, 3) == [("worker", 0), ("worker", 1), ("worker", 2)]
    assert assign_jobs({"worker": 2, "ps": 1, "chief": 1}, 4) == [
        ("chief", 0),
        ("ps", 0),
        ("worker", 0),
        ("worker", 1),
    ]


@pytest.mark.parametrize(
    ("jobs", "size", "match"),
    [
        ({"boss": 1}, 1, "unknown role"),
        ({"worker": 2}, 3, "ask for 2 tasks"),
        ({"chief": 2}, 2, "at most one chief"),
        ({"worker": -1, "ps": 2}, 1, "non-negative"),
        ([("worker", 1)], 1, "must be a dict"),
    ],
)
def test_assign_jobs_errors(jobs, size, match):
    with pytest.raises(ClusterConfigError, match=match):
        assign_jobs(jobs, size)


def test_chief_rule():
    with_chief = ClusterSpec({"chief": ["c"], "worker": ["w0", "w1"]})
    without = ClusterSpec({"worker": ["w0", "w1"]})
    assert is_chief(with_chief, "chief", 0)
    assert not is_chief(with_chief, "worker", 0)
    assert is_chief(without, "worker", 0)
    assert not is_chief(without, "worker", 1)
    assert not is_chief(without, "ps", 0)
    assert is_chief(ClusterSpec(), None, None)


def test_simple_resolver():
    r = SimpleClusterResolver(
        {"chief": ["c:1"], "worker": ["w0:1", "w1:1"]},
        task_type="worker",
        task_id=1,
        num_accelerators={"GPU": 2},
        rpc_layer="grpc",
    )
    assert r.rank == 2
    assert r.world_size == 3
    assert not r.is_chief
    assert r.master() == "grpc://w1:1"
    assert r.master("chief", 0, rpc_layer="x") == "x://c:1"
    assert r.num_accelerators() == {"GPU": 2}
    r2 = SimpleClusterResolver({"worker": ["a:1", "b:1"]}, "worker", 0, master="m:9")
    assert r2.master() == "m:9"
    assert r2.is_chief
