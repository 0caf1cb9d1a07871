"""replica_device_setter: TF's device_setter_test.py and the contrib greedy-strategy tests."""

from __future__ import annotations

import numpy as np
import pytest

from hpcdist.cluster.spec import ClusterSpec
from hpcdist.compat.v1.device_setter import (
    STANDARD_PS_OPS,
    GreedyLoadBalancingStrategy,
    _RoundRobinStrategy,
    byte_size_load_fn,
    replica_device_setter,
)
from hpcdist.compat.v1.devices import canonical_name
from hpcdist.compat.v1.graph import Graph, OpRecord, device, get_default_graph
from hpcdist.compat.v1.variables import Variable, get_or_create_global_step

CLUSTER = ClusterSpec(
    {
        "ps": ["ps0:2222", "ps1:2222"],
        "worker": ["worker0:2222", "worker1:2222", "worker2:2222"],
    }
)
SUN_MOON = ClusterSpec(
    {
        "sun": ["sun0:2222", "sun1:2222", "sun2:2222"],
        "moon": ["moon0:2222", "moon1:2222"],
    }
)


def assert_device_equal(expected: str, actual: str) -> None:
    assert canonical_name(actual) == canonical_name(expected), (expected, actual)


def add_op(graph: Graph) -> str:
    """The device of an ``a = v + w`` op created at this point of ``graph``."""
    return graph.place(OpRecord("Add", "add"))


def zeros(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.float32)


# -- tensorflow/python/training/device_setter_test.py ----------------------------------------


def test_cpu_override() -> None:
    g = Graph()
    with g.as_default(), device(replica_device_setter(cluster=CLUSTER)):
        with device("/cpu:0"):
            v = Variable([1, 2])
        w = Variable([2, 1])
        with device("/cpu:0"):
            a = add_op(g)
    assert_device_equal("/job:ps/task:0/cpu:0", v.device)
    assert v.device == "/job:ps/task:0/device:CPU:0"
    assert_device_equal("/job:ps/task:1", w.device)
    assert_device_equal("/job:worker/cpu:0", a)


def test_resource_variable_goes_to_ps() -> None:
    g = Graph()
    with g.as_default(), device(replica_device_setter(cluster=CLUSTER)):
        v = Variable([1, 2])
    assert v.op.type == "VarHandleOp"
    assert_device_equal("/job:ps/task:0", v.device)


def test_ps2_tasks_with_cluster_spec_class() -> None:
    g = Graph()
    with g.as_default(), device(replica_device_setter(cluster=CLUSTER)):
        v = Variable([1, 2])
        w = Variable([2, 1])
        a = add_op(g)
    assert_device_equal("/job:ps/task:0", v.device)
    assert_device_equal("/job:ps/task:1", w.device)
    assert_device_equal("/job:worker", a)


def test_ps2_tasks_pin_variable_to_job() -> None:
    g = Graph()
    with g.as_default(), device(replica_device_setter(cluster=CLUSTER)):
        v = Variable([1, 2])
        with device("/job:moon"):
            w = Variable([2, 1])
            with device("/job:ps"):  # an explicit ps job still gets its task
                x = Variable([0, 1])
        a = add_op(g)
    assert_device_equal("/job:ps/task:0", v.device)
    assert_device_equal("/job:moon", w.device)
    assert_device_equal("/job:ps/task:1", x.device)
    assert_device_equal("/job:worker", a)


def test_ps2_tasks_use_cpu_for_ps() -> None:
    g = Graph()
    with g.as_default(), device(replica_device_setter(ps_tasks=1, ps_device="/cpu:0")):
        v = Variable([1, 2])
        with device("/job:moon"):
            w = Variable([2, 1])
        a = add_op(g)
    assert_device_equal("/cpu:0", v.device)
    assert_device_equal("/job:moon/cpu:0", w.device)
    assert_device_equal("/job:worker", a)


def test_ps2_tasks_no_merging() -> None:
    g = Graph()
    with g.as_default(), device(replica_device_setter(cluster=CLUSTER, merge_devices=False)):
        with device("/job:ps"):  # no task assigned when merge_devices=False
            a = Variable([1, 2])
        b = Variable([3, 4])  # no device yet: placed as usual
    assert_device_equal("/job:ps", a.device)
    assert_device_equal("/job:ps/task:0", b.device)


def test_ps2_tasks_with_cluster_spec_dict() -> None:
    g = Graph()
    with g.as_default(), device(replica_device_setter(cluster=CLUSTER.as_dict())):
        v = Variable([1, 2])
        w = Variable([2, 1])
        a = add_op(g)
    assert_device_equal("/job:ps/task:0", v.device)
    assert_device_equal("/job:ps/task:1", w.device)
    assert_device_equal("/job:worker", a)


def test_ps2_tasks_with_device() -> None:
    g = Graph()
    setter = replica_device_setter(
        ps_device="/job:moon", worker_device="/job:sun", cluster=SUN_MOON
    )
    with g.as_default(), device(setter):
        v = Variable([1, 2])
        w = Variable([2, 1])
        a = add_op(g)
    assert_device_equal("/job:moon/task:0", v.device)
    assert_device_equal("/job:moon/task:1", w.device)
    assert_device_equal("/job:sun", a)


def test_ps2_tasks_with_cpu_constraint() -> None:
    g = Graph()
    setter = replica_device_setter(
        ps_device="/job:moon/cpu:0", worker_device="/job:sun", cluster=SUN_MOON.as_dict()
    )
    with g.as_default(), device(setter):
        v = Variable([1, 2])
        w = Variable([2, 1])
        a = add_op(g)
    assert_device_equal("/job:moon/task:0/cpu:0", v.device)
    assert_device_equal("/job:moon/task:1/cpu:0", w.device)
    assert_device_equal("/job:sun", a)


# -- more of TF's rules ------------------------------------------------------------------------


def test_round_robin_over_three_ps_tasks() -> None:
    g = Graph()
    with g.as_default(), device(replica_device_setter(ps_tasks=3)):
        tasks = [Variable([float(i)]).device for i in range(4)]
    assert tasks == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:2", "/job:ps/task:0"]


def test_round_robin_strategy_cycles() -> None:
    strategy = _RoundRobinStrategy(2)
    assert [strategy(None) for _ in range(5)] == [0, 1, 0, 1, 0]


def test_merge_fills_unset_fields_only() -> None:
    fn = replica_device_setter(cluster=CLUSTER)
    assert fn is not None
    assert fn(OpRecord("VariableV2", "v", device="/device:CPU:0")) == "/job:ps/task:0/device:CPU:0"
    assert fn(OpRecord("VariableV2", "w", device="/job:ps")) == "/job:ps/task:1"
    # another job is kept and no task is drawn from the strategy
    assert fn(OpRecord("VariableV2", "x", device="/job:moon")) == "/job:moon"
    assert fn(OpRecord("VariableV2", "y")) == "/job:ps/task:0"
    # an op's own task wins over the drawn one (which is still drawn: 1)
    assert fn(OpRecord("VariableV2", "z", device="/job:ps/task:7")) == "/job:ps/task:7"
    assert fn(OpRecord("VariableV2", "u")) == "/job:ps/task:0"
    assert fn(OpRecord("MatMul", "m", device="/job:worker/task:2")) == "/job:worker/task:2"
    assert fn(OpRecord("MatMul", "n", device="/gpu:1")) == "/job:worker/device:GPU:1"


def test_no_merging_returns_set_device_unchanged() -> None:
    fn = replica_device_setter(ps_tasks=2, merge_devices=False)
    assert fn is not None
    assert fn(OpRecord("VariableV2", "v", device="/cpu:0")) == "/cpu:0"
    assert fn(OpRecord("Add", "a", device="/job:ps")) == "/job:ps"
    assert fn(OpRecord("VariableV2", "w")) == "/job:ps/task:0"
    assert fn(OpRecord("Add", "b")) == "/job:worker"


def test_only_ps_op_types_go_to_ps() -> None:
    assert len(STANDARD_PS_OPS) == 14
    assert {"Variable", "VariableV2", "VarHandleOp", "MutableHashTableV2"} <= set(STANDARD_PS_OPS)
    assert "ResourceConditionalAccumulator" in STANDARD_PS_OPS
    fn = replica_device_setter(ps_tasks=2)
    assert fn is not None
    assert fn(OpRecord("MutableHashTableV2", "table")) == "/job:ps/task:0"
    assert fn(OpRecord("Placeholder", "x")) == "/job:worker"
    assert fn(OpRecord("VarHandleOp", "v")) == "/job:ps/task:1"


def test_custom_ps_ops_and_strategy() -> None:
    seen: list[str] = []

    def last_task(op: OpRecord) -> int:
        seen.append(op.name)
        return 1

    fn = replica_device_setter(ps_tasks=2, ps_ops=["Queue"], ps_strategy=last_task)
    assert fn is not None
    assert fn(OpRecord("Queue", "q")) == "/job:ps/task:1"
    assert fn(OpRecord("VarHandleOp", "v")) == "/job:worker"
    assert seen == ["q"]


def test_empty_ps_device_sends_everything_to_workers() -> None:
    fn = replica_device_setter(ps_tasks=2, ps_device="")
    assert fn is not None
    assert fn(OpRecord("VarHandleOp", "v")) == "/job:worker"


def test_non_callable_ps_strategy() -> None:
    with pytest.raises(TypeError, match="ps_strategy must be callable"):
        replica_device_setter(cluster=CLUSTER, ps_strategy=1)


def test_no_ps_job_or_no_ps_tasks_returns_none() -> None:
    assert replica_device_setter() is None
    assert replica_device_setter(ps_tasks=0) is None
    assert replica_device_setter(cluster={"worker": ["w0:2222", "w1:2222"]}) is None
    assert replica_device_setter(cluster=ClusterSpec({"worker": ["w0:2222"]})) is None
    # ps tasks come from the cluster, not the argument
    assert replica_device_setter(ps_tasks=4, cluster={"chief": ["c:1"]}) is None
    assert replica_device_setter(ps_device="/job:moon", cluster=CLUSTER) is None


def test_ps_tasks_taken_from_cluster() -> None:
    fn = replica_device_setter(ps_tasks=5, cluster={"ps": ["a:1", "b:1", "c:1"]})
    assert fn is not None
    tasks = [fn(OpRecord("VarHandleOp", f"v{i}")) for i in range(4)]
    assert tasks == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:2", "/job:ps/task:0"]


def test_setter_none_in_device_scope_places_nothing() -> None:
    g = Graph()
    with g.as_default(), device(replica_device_setter(cluster={"worker": ["w:1"]})):
        v = Variable([1.0])
    assert v.device == ""


# -- graph integration: variables, slots, tf.device(None) ----------------------------------------


def test_variable_device_and_colocated_slots() -> None:
    g = Graph()
    with g.as_default(), device(replica_device_setter(cluster=CLUSTER)):
        w = Variable(zeros(4, 1), name="w")
        b = Variable(zeros(1), name="b")
        step = get_or_create_global_step()
        slots = {}
        for var in (w, b):
            with get_default_graph().colocate_with(var):
                slots[var.name] = Variable(zeros(*var.shape), name=f"{var.name}/Adagrad")
        Variable(zeros(1), name="after")
    placement = {v.name: v.device for v in g.variables}
    assert placement == {
        "w": "/job:ps/task:0",
        "b": "/job:ps/task:1",
        "global_step": "/job:ps/task:0",
        "w/Adagrad": "/job:ps/task:0",
        "b/Adagrad": "/job:ps/task:1",
        "after": "/job:ps/task:1",  # slots did not consume round-robin turns
    }
    assert step.device == "/job:ps/task:0"
    assert slots["b"].device == b.device


def test_device_none_resets_inside_setter() -> None:
    g = Graph()
    with g.as_default(), device(replica_device_setter(cluster=CLUSTER)):
        v = Variable([1.0])
        with device(None):
            local = Variable([2.0])
            with device("/job:worker/task:1"):
                pinned = Variable([3.0])
        w = Variable([4.0])
    assert v.device == "/job:ps/task:0"
    assert local.device == ""
    assert pinned.device == "/job:worker/task:1"
    assert w.device == "/job:ps/task:1"  # the reset scope drew no task


# -- tensorflow/contrib/training/python/training/device_setter_test.py -------------------------


def test_uniform_load_equals_round_robin() -> None:
    g = Graph()
    strategy = GreedyLoadBalancingStrategy(2, lambda op: 1)
    with g.as_default(), device(replica_device_setter(cluster=CLUSTER, ps_strategy=strategy)):
        u = Variable(zeros(2, 2))
        v = Variable(zeros(2, 1))
        w = Variable(zeros(2, 2))
        x = Variable(zeros(1, 3))
        a = add_op(g)
    assert [t.device for t in (u, v, w, x)] == [
        "/job:ps/task:0",
        "/job:ps/task:1",
        "/job:ps/task:0",
        "/job:ps/task:1",
    ]
    assert_device_equal("/job:worker", a)


def test_byte_size_load_fn() -> None:
    g = Graph()
    strategy = GreedyLoadBalancingStrategy(2, byte_size_load_fn)
    with g.as_default(), device(replica_device_setter(cluster=CLUSTER, ps_strategy=strategy)):
        u = Variable(zeros(2, 2))
        v = Variable(zeros(2, 1))
        w = Variable(zeros(2, 2))
        x = Variable(zeros(1, 3))
        a = add_op(g)
    assert [byte_size_load_fn(t.op) for t in (u, v, w, x)] == [16, 8, 16, 12]
    assert [t.device for t in (u, v, w, x)] == [
        "/job:ps/task:0",
        "/job:ps/task:1",
        "/job:ps/task:1",
        "/job:ps/task:0",
    ]
    assert_device_equal("/job:worker", a)


def test_byte_size_load_fn_with_scalar() -> None:
    g = Graph()
    strategy = GreedyLoadBalancingStrategy(2, byte_size_load_fn)
    with g.as_default(), device(replica_device_setter(cluster=CLUSTER, ps_strategy=strategy)):
        r = Variable(np.float32(0.0))
        s = Variable(zeros(1))
        t = Variable(np.int64(7), dtype=np.int64)
    assert r.device == "/job:ps/task:0"
    assert byte_size_load_fn(r.op) == 4
    assert s.device == "/job:ps/task:1"  # ps 0 carries the scalar's 4 bytes
    assert t.device == "/job:ps/task:0"  # 4 bytes on each: the tie goes to task 0
    assert byte_size_load_fn(t.op) == 8


def test_byte_size_load_fn_dtypes_and_shape_attr() -> None:
    assert byte_size_load_fn(OpRecord("VariableV2", "a", (3, 5), np.int64)) == 120
    assert byte_size_load_fn(OpRecord("VariableV2", "b", (0, 4))) == 0
    legacy = OpRecord("VariableV2", "legacy", (2, 3), np.float16)
    legacy.outputs[0].shape = None  # TF's legacy scalar-Variable case: unknown output shape
    assert byte_size_load_fn(legacy) == 12  # taken from the "shape" attribute


def test_byte_size_load_fn_undefined_shape() -> None:
    with pytest.raises(ValueError, match="partly_known"):
        byte_size_load_fn(OpRecord("VariableV2", "partly_known", (None, 3)))


def test_greedy_strategy_uses_least_loaded_task() -> None:
    loads = {"big": 100, "small1": 1, "small2": 1, "small3": 1}
    strategy = GreedyLoadBalancingStrategy(3, lambda op: loads[op.name])
    tasks = [strategy(OpRecord("VarHandleOp", name)) for name in loads]
    assert tasks == [0, 1, 2, 1]
    assert all(isinstance(t, int) for t in tasks)
