"""``SyncReplicasOptimizer`` with one replica: ``tf.compat.v1`` beside ``hpcdist.compat.v1``.

One process is the only replica (``replicas_to_aggregate=1, total_num_replicas=1``) and the
chief, in a ``MonitoredTrainingSession`` without a cluster, with the optimizer's session hook.
TF's chief queue runner aggregates in a thread and the worker takes a token per step; hpcdist
does the same with its accumulators and token ring. The values after each run, the number of
runs until ``StopAtStepHook(last_step=3)`` stops, and the variables created are compared.
TF's queue runner is told to stop at close (``stop_grace_period_secs=1``; its thread then
reports the cancelled ``TakeGrad``, which is expected and not shown as a warning).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.conformance.helpers import assert_same, outcome
from tests.conformance.tf1_sides import HD1, TF1, V1

F32 = np.float32


INNER = {
    "gd": lambda t: t.train.GradientDescentOptimizer(0.1),
    "momentum": lambda t: t.train.MomentumOptimizer(0.1, 0.9),
    "adam": lambda t: t.train.AdamOptimizer(0.1),
}


def one_replica(lib: V1, inner: str, sparse: bool) -> dict[str, Any]:
    """Train with ``SyncReplicasOptimizer(inner, 1, 1)`` to global step 3; state per run."""
    t = lib.tf
    graph = t.Graph()
    with graph.as_default():
        v0 = t.Variable(np.array([1.0, 2.0], F32), name="v0")
        table = t.Variable(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], F32), name="table")
        global_step = t.train.get_or_create_global_step()
        x = t.placeholder(t.float32, [2])
        ids = t.placeholder(t.int32, [None])

        def build() -> Any:
            rows = t.gather(table, ids) if sparse else table * 1.0
            return t.reduce_sum(v0 * x) + t.reduce_sum(t.square(rows))

        loss = lib.tensor(build)
        opt = t.train.SyncReplicasOptimizer(
            INNER[inner](t), replicas_to_aggregate=1, total_num_replicas=1
        )
        train_op = opt.minimize(loss, global_step=global_step)
        hooks = [opt.make_session_run_hook(is_chief=True), t.train.StopAtStepHook(last_step=3)]
        out: dict[str, Any] = {
            "global": sorted(v.name.split(":")[0] for v in t.global_variables()),
            "local": sorted(v.name.split(":")[0] for v in t.local_variables()),
            "after_run": [],
        }
        # The runs whose gradients apply touch other rows than those before them.
        feeds = [
            {x: np.array([1.0, -1.0], F32), ids: [0]},
            {x: np.array([0.5, 2.0], F32), ids: [2, 2]},
            {x: np.array([-1.0, 1.0], F32), ids: [1]},
            {x: np.array([2.0, 0.0], F32), ids: [2]},
            {x: np.array([1.0, 1.0], F32), ids: [0]},
        ]
        with t.train.MonitoredTrainingSession(
            hooks=hooks, log_step_count_steps=0, save_summaries_steps=0, stop_grace_period_secs=1
        ) as sess:
            while not sess.should_stop():
                sess.run(train_op, feeds[len(out["after_run"])])
                if not sess.should_stop():
                    out["after_run"].append(sess.run([v0, table, global_step]))
                else:
                    out["after_run"].append("stopped")
    return out


# TF's chief queue runner thread reports its cancelled TakeGrad when the session closes.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(
    ("inner", "sparse"), [("gd", False), ("momentum", False), ("momentum", True), ("adam", True)]
)
def test_sync_replicas_one_replica(inner: str, sparse: bool) -> None:
    """Each run's update, the stale first runs, the stop at step 3, the variables created."""
    expected, got = (
        outcome(one_replica, TF1, inner, sparse),
        outcome(one_replica, HD1, inner, sparse),
    )
    assert_same(expected, got)
    assert expected["after_run"][-1] == "stopped"
