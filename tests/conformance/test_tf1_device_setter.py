"""``replica_device_setter`` placements: ``tf.compat.v1`` beside ``hpcdist.compat.v1``.

The graphs of TF's ``device_setter_test.py`` (variables only: hpcdist records no device for
computations) and of the "Distributed TensorFlow" guide's trainer (with the optimizers' slots
and Adam's beta powers, colocated with their variables), built in ``tf.Graph().as_default()``;
the devices are compared as strings (``/job:ps/task:0/device:CPU:0``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import hpcdist.compat.v1 as hd_v1
from tests.conformance.helpers import assert_same, outcome, tf

SIDES = {"tf": tf.compat.v1, "hpcdist": hd_v1}
CLUSTER = {
    "ps": ["ps0:2222", "ps1:2222"],
    "worker": ["worker0:2222", "worker1:2222", "worker2:2222"],
}
SUN_MOON = {"sun": ["sun0:2222", "sun1:2222", "sun2:2222"], "moon": ["moon0:2222", "moon1:2222"]}


def conform_devices(case: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """Build ``case``'s graph with each library; assert the variables' devices match."""
    results = []
    for t in SIDES.values():

        def build(t: Any = t) -> dict[str, str]:
            graph = t.Graph()
            with graph.as_default():
                return {name: v.device for name, v in case(t).items()}

        results.append(outcome(lambda _side: build(), None))
    assert_same(*results)
    return results[0]


def cpu_override(t: Any) -> dict[str, Any]:
    """testCPUOverride."""
    with t.device(t.train.replica_device_setter(cluster=t.train.ClusterSpec(CLUSTER))):
        with t.device("/cpu:0"):
            v = t.Variable([1, 2])
        w = t.Variable([2, 1])
    return {"v": v, "w": w}


def cluster_spec_class(t: Any) -> dict[str, Any]:
    """testPS2TasksWithClusterSpecClass (and testResource's first variable)."""
    with t.device(t.train.replica_device_setter(cluster=t.train.ClusterSpec(CLUSTER))):
        return {"v": t.Variable([1, 2]), "w": t.Variable([2, 1])}


def pin_variable_to_job(t: Any) -> dict[str, Any]:
    """testPS2TasksPinVariableToJob."""
    with t.device(t.train.replica_device_setter(cluster=t.train.ClusterSpec(CLUSTER))):
        v = t.Variable([1, 2])
        with t.device("/job:moon"):
            w = t.Variable([2, 1])
            with t.device("/job:ps"):  # an explicit ps job gets its task set
                x = t.Variable([0, 1])
    return {"v": v, "w": w, "x": x}


def use_cpu_for_ps(t: Any) -> dict[str, Any]:
    """testPS2TasksUseCpuForPS."""
    with t.device(t.train.replica_device_setter(ps_tasks=1, ps_device="/cpu:0")):
        v = t.Variable([1, 2])
        with t.device("/job:moon"):
            w = t.Variable([2, 1])
    return {"v": v, "w": w}


def no_merging(t: Any) -> dict[str, Any]:
    """testPS2TasksNoMerging."""
    setter = t.train.replica_device_setter(
        cluster=t.train.ClusterSpec(CLUSTER), merge_devices=False
    )
    with t.device(setter):
        v = t.Variable([1, 2])
        with t.device("/job:ps"):  # no task with merge_devices=False
            w = t.Variable([2, 1])
    return {"v": v, "w": w}


def cluster_spec_dict(t: Any) -> dict[str, Any]:
    """testPS2TasksWithClusterSpecDict."""
    with t.device(t.train.replica_device_setter(cluster=CLUSTER)):
        return {"v": t.Variable([1, 2]), "w": t.Variable([2, 1])}


def other_job_names(t: Any) -> dict[str, Any]:
    """testPS2TasksWithDevice (the cluster as a ClusterSpec rather than a ClusterDef)."""
    setter = t.train.replica_device_setter(
        ps_device="/job:moon", worker_device="/job:sun", cluster=t.train.ClusterSpec(SUN_MOON)
    )
    with t.device(setter):
        return {"v": t.Variable([1, 2]), "w": t.Variable([2, 1])}


def cpu_constraint(t: Any) -> dict[str, Any]:
    """testPS2TasksWithCPUConstraint."""
    setter = t.train.replica_device_setter(
        ps_device="/job:moon/cpu:0", worker_device="/job:sun", cluster=t.train.ClusterSpec(SUN_MOON)
    )
    with t.device(setter):
        return {"v": t.Variable([1, 2]), "w": t.Variable([2, 1])}


def guide_trainer(t: Any, optimizer: str) -> dict[str, Any]:
    """The guide's trainer: worker 1's device setter over 2 ps tasks, a model, its optimizer."""
    cluster = t.train.ClusterSpec(
        {"ps": ["ps0:2222", "ps1:2222"], "worker": ["w0:2222", "w1:2222"]}
    )
    setter = t.train.replica_device_setter(worker_device="/job:worker/task:1", cluster=cluster)
    with t.device(setter):
        w = t.Variable(np.zeros((3, 1), np.float32), name="w")
        b = t.Variable(np.zeros(1, np.float32), name="b")
        emb = t.get_variable("embedding", shape=(4, 2), initializer=t.zeros_initializer())
        global_step = t.train.get_or_create_global_step()

        def loss() -> Any:
            return t.reduce_sum(w) + t.reduce_sum(b) + t.reduce_sum(emb)

        opt = {
            "adagrad": lambda: t.train.AdagradOptimizer(0.5),
            "adam": lambda: t.train.AdamOptimizer(0.1),
            "momentum": lambda: t.train.MomentumOptimizer(0.1, 0.9),
            "rmsprop-centered": lambda: t.train.RMSPropOptimizer(0.1, momentum=0.5, centered=True),
        }[optimizer]()
        opt.minimize(loss() if t is SIDES["tf"] else loss, global_step=global_step)
    return {v.name.split(":")[0]: v for v in t.global_variables()}


CASES = {
    "cpu_override": cpu_override,
    "cluster_spec_class": cluster_spec_class,
    "pin_variable_to_job": pin_variable_to_job,
    "use_cpu_for_ps": use_cpu_for_ps,
    "no_merging": no_merging,
    "cluster_spec_dict": cluster_spec_dict,
    "other_job_names": other_job_names,
    "cpu_constraint": cpu_constraint,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_device_setter_test_placements(name: str) -> None:
    """Each graph of TF's device_setter_test places its variables alike."""
    conform_devices(CASES[name])


@pytest.mark.parametrize("optimizer", ["adagrad", "adam", "momentum", "rmsprop-centered"])
def test_guide_trainer_placement(optimizer: str) -> None:
    """Round robin over the ps tasks; slots and beta powers on their variable's task."""
    devices = conform_devices(lambda t: guide_trainer(t, optimizer))
    assert (devices["w"], devices["b"]) == ("/job:ps/task:0", "/job:ps/task:1")
