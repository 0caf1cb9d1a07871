"""TF1 optimizers against TensorFlow 2.21's own values (tests/unit/data), and the TF1 basics.

The reference file holds, for each optimizer, the two variables after each of 3 steps of
``apply_gradients`` with constant gradients, the slots of the first variable, and the names of
every variable TF created (slots included), as ``tf.compat.v1`` computed them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import hpcdist.compat.v1 as tf
from hpcdist.errors import FailedPreconditionError, InvalidArgumentError

REFERENCE = json.loads((Path(__file__).parent / "data" / "tf1_optimizers_tf2.21.json").read_text())

OPTIMIZERS = {
    "gd": lambda: tf.train.GradientDescentOptimizer(3.0),
    "adagrad": lambda: tf.train.AdagradOptimizer(3.0, initial_accumulator_value=0.1),
    "momentum": lambda: tf.train.MomentumOptimizer(2.0, 0.9),
    "nesterov": lambda: tf.train.MomentumOptimizer(2.0, 0.9, use_nesterov=True),
    "adam": lambda: tf.train.AdamOptimizer(0.1),
    "rmsprop": lambda: tf.train.RMSPropOptimizer(0.1, decay=0.9, momentum=0.5, epsilon=1e-6),
    "rmsprop_centered": lambda: tf.train.RMSPropOptimizer(
        0.1, decay=0.9, momentum=0.5, epsilon=1e-6, centered=True
    ),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_matches_tensorflow(name: str) -> None:
    ref = REFERENCE[name]
    with tf.Graph().as_default():
        v0, v1 = tf.Variable([1.0, 2.0]), tf.Variable([3.0, 4.0])
        g0, g1 = tf.constant([0.1, 0.1]), tf.constant([0.01, 0.01])
        opt = OPTIMIZERS[name]()
        op = opt.apply_gradients([(g0, v0), (g1, v1)])
        assert sorted(v.name for v in tf.global_variables()) == ref["names"]
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for want in ref["history"]:
                sess.run(op)
                # float32 arithmetic in a different order: agreement to float32 precision
                np.testing.assert_allclose(sess.run([v0, v1]), want, rtol=1e-5, atol=1e-7)
            for slot, want in ref["slots"].items():
                np.testing.assert_allclose(sess.run(opt.get_slot(v0, slot)), want, rtol=1e-5)
        assert sorted(opt.get_slot_names()) == sorted(ref["slots"])


def test_sparse_gradient_moves_only_its_rows() -> None:
    with tf.Graph().as_default():
        table = tf.Variable(np.ones((4, 2), np.float32))
        grad = tf.IndexedSlices(
            np.array([[1.0, 1.0], [2.0, 2.0]], np.float32), np.array([3, 1]), (4, 2)
        )
        op = tf.train.AdagradOptimizer(1.0).apply_gradients([(grad, table)])
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(op)
            got = sess.run(table)
    np.testing.assert_allclose(got[[0, 2]], 1.0)
    np.testing.assert_allclose(got[1], 1 - 2 / np.sqrt(0.1 + 4), rtol=1e-5)
    np.testing.assert_allclose(got[3], 1 - 1 / np.sqrt(0.1 + 1), rtol=1e-5)


def test_minimize_with_global_step_and_fetching_the_loss_computes_it_once() -> None:
    calls = []
    with tf.Graph().as_default():
        w = tf.Variable(np.float32(2.0), name="w")
        step = tf.train.get_or_create_global_step()

        def loss():
            calls.append(1)
            return tf.square(w)

        train = tf.train.GradientDescentOptimizer(0.25).minimize(loss, global_step=step)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            _, value, gs = sess.run([train, loss, step])
            # the pre-update loss and global step (a fetched variable is read before the update)
            assert (float(value), int(gs), len(calls)) == (4.0, 0, 1)
            assert int(sess.run(step)) == 1
            assert float(sess.run(w)) == 1.0  # 2 - 0.25 * 2 * 2
    assert step.dtype == np.int64 and step.name == "global_step" and not step.trainable


def test_hello_distributed_tensorflow() -> None:
    server = tf.train.Server.create_local_server()
    with tf.Graph().as_default():
        got = tf.Session(server.target).run(tf.constant("Hello, distributed TensorFlow!"))
    assert got == b"Hello, distributed TensorFlow!"


def test_server_argument_errors_are_tfs() -> None:
    two_jobs = tf.train.ClusterSpec({"ps": ["a:1"], "worker": ["b:1"]})
    with pytest.raises(ValueError, match=r"Must specify an explicit `job_name`\."):
        tf.train.Server(two_jobs)
    two_tasks = tf.train.ClusterSpec({"worker": ["a:1", "b:1"]})
    with pytest.raises(ValueError, match=r"Must specify an explicit `task_index`\."):
        tf.train.Server(two_tasks, job_name="worker")
    with pytest.raises(InvalidArgumentError, match="Could not parse port"):
        tf.train.Server({"local": ["localhost"]})


def test_reading_a_variable_outside_a_session_and_a_finalized_graph() -> None:
    with tf.Graph().as_default() as graph:
        w = tf.Variable(1.0, name="w")
        with pytest.raises(FailedPreconditionError, match="uninitialized value w"):
            w.numpy()
        graph.finalize()
        with pytest.raises(RuntimeError, match=r"Graph is finalized and cannot be modified\."):
            tf.Variable(2.0)


def test_placeholders_feeds_and_fetch_structures() -> None:
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, (None, 2), name="x")
        w = tf.Variable([[1.0], [2.0]], name="w")

        def y():
            return tf.matmul(x, w)

        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            got = sess.run({"y": y, "pair": (w, 3)}, feed_dict={x: [[1.0, 1.0]]})
            np.testing.assert_allclose(got["y"], [[3.0]])
            assert got["pair"][1] == 3
            with pytest.raises(ValueError, match="Cannot feed value of shape"):
                sess.run(y, feed_dict={x: [1.0, 1.0]})
            with pytest.raises(InvalidArgumentError, match="You must feed a value for placeholder"):
                sess.run(y)


def test_names_are_made_unique_as_tf_does() -> None:
    with tf.Graph().as_default():
        names = [tf.Variable(0.0).name for _ in range(3)]
        with tf.name_scope("layer"):
            scoped = tf.Variable(0.0, name="w").name
        tf.get_variable("v", shape=[2])
        with pytest.raises(ValueError, match="Variable v already exists"):
            tf.get_variable("v", shape=[2])
    assert names == ["Variable", "Variable_1", "Variable_2"]
    assert scoped == "layer/w"


def test_sync_replicas_argument_errors_are_tfs() -> None:
    with tf.Graph().as_default():
        w = tf.Variable([0.0], name="w")
        step = tf.train.get_or_create_global_step()
        opt = tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(1.0), 2, 3)
        hook = opt.make_session_run_hook(True)
        with pytest.raises(ValueError, match="apply_gradient should be called before using"):
            hook.begin()
        with pytest.raises(ValueError, match="Global step is required to check staleness"):
            opt.apply_gradients([(np.ones(1, np.float32), w)])
        with pytest.raises(ValueError, match="Must supply at least one variable"):
            opt.apply_gradients([], global_step=step)
        opt.minimize(lambda: tf.reduce_sum(tf.square(w)), global_step=step)
        hook.begin()
        assert opt.get_chief_queue_runner() is None  # no chief thread
        with pytest.raises(ValueError, match="Too few tokens to finish the first step"):
            tf.train.SyncReplicasOptimizer(
                tf.train.GradientDescentOptimizer(1.0), 4, 2
            ).get_init_tokens_op(num_tokens=1)


def test_sync_replicas_in_one_process_applies_each_gradient() -> None:
    """R=1 of N=1 with a plain session: every run is one update, local step follows."""
    with tf.Graph().as_default():
        w = tf.Variable([1.0], name="w")
        step = tf.train.get_or_create_global_step()
        opt = tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(0.5), 1, 1)
        train = opt.minimize(lambda: tf.reduce_sum(tf.square(w)), global_step=step)
        hook = opt.make_session_run_hook(True)
        with tf.train.MonitoredTrainingSession(hooks=[hook]) as sess:
            for _ in range(3):
                sess.run(train)
            # The second run is stale: the first took the initial token, which carries step 0.
            assert int(sess.run(step)) == 2
            np.testing.assert_allclose(sess.run(w), [0.0])  # 1 - 0.5 * 2 * 1, then 0


def test_sync_replicas_sparse_gradient_updates_only_its_rows() -> None:
    """R=1 of N=1, Momentum on tf.gather rows: an applied step leaves the rows it did not read.

    Runs 1 and 3 apply (run 2 is stale): run 1 reads row 0, run 3 row 1, so row 0's accumulator
    keeps 2 (not 0.9 * 2) and row 0 moves once (TF's sparse accumulator and apply).
    """
    with tf.Graph().as_default():
        table = tf.Variable(np.ones((3, 1), np.float32), name="table")
        ids = tf.placeholder(tf.int32, [None])
        step = tf.train.get_or_create_global_step()
        momentum = tf.train.MomentumOptimizer(0.1, 0.9)
        opt = tf.train.SyncReplicasOptimizer(momentum, 1, 1)
        train = opt.minimize(lambda: tf.reduce_sum(tf.square(tf.gather(table, ids))), step)
        with tf.train.MonitoredTrainingSession(hooks=[opt.make_session_run_hook(True)]) as sess:
            for batch in ([0], [2], [1]):
                sess.run(train, {ids: batch})
            np.testing.assert_allclose(sess.run(table).ravel(), [0.8, 0.8, 1.0])
            accumulator = sess.run(momentum.get_slot(table, "momentum")).ravel()
            np.testing.assert_allclose(accumulator, [2.0, 2.0, 0.0])


def _momentum_on_rows(read: str) -> tuple[np.ndarray, np.ndarray, object]:
    """Momentum 0.1/0.9 on ``sum(read(table, ids))`` for ids [0, 2], then [0] twice."""
    with tf.Graph().as_default():
        table = tf.Variable(np.zeros((4, 2), np.float32), name="table")
        ids = tf.placeholder(tf.int32, [None])
        lookup = tf.gather if read == "gather" else tf.nn.embedding_lookup
        opt = tf.train.MomentumOptimizer(0.1, 0.9)
        grads = opt.compute_gradients(lambda: tf.reduce_sum(lookup(table, ids)))
        train = opt.apply_gradients(grads)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            fetched = sess.run(grads[0][0], {ids: [2, 0, 2]})
            for batch in ([0, 2], [0], [0]):
                sess.run(train, {ids: batch})
            return sess.run(table), sess.run(opt.get_slot(table, "momentum")), fetched


@pytest.mark.parametrize("read", ["gather", "embedding_lookup"])
def test_gather_gradient_is_sparse_and_momentum_leaves_other_rows(read: str) -> None:
    """Row 2, read once, keeps accumulator 1 and moves once; rows 1 and 3 never move."""
    table, accumulator, fetched = _momentum_on_rows(read)
    assert isinstance(fetched, tf.IndexedSlices)
    np.testing.assert_array_equal(fetched.indices, [0, 2])  # sorted, each row once
    np.testing.assert_allclose(fetched.values, [[1.0, 1.0], [2.0, 2.0]])
    np.testing.assert_allclose(accumulator[:, 0], [1 + 0.9 * (1 + 0.9), 0.0, 1.0, 0.0])
    np.testing.assert_allclose(table[:, 0], [-0.1 * (1 + 1.9 + 2.71), 0.0, -0.1, 0.0], rtol=1e-6)


def test_adam_sparse_update_decays_every_row() -> None:
    """TF's Adam._apply_sparse: m and v decay on all rows, every row of the variable moves."""
    with tf.Graph().as_default():
        table = tf.Variable(np.ones((3, 1), np.float32), name="table")
        ids = tf.placeholder(tf.int32, [None])
        opt = tf.train.AdamOptimizer(0.1)
        train = opt.minimize(lambda: tf.reduce_sum(tf.gather(table, ids)))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train, {ids: [0]})
            sess.run(train, {ids: [1]})
            m = sess.run(opt.get_slot(table, "m")).ravel()
            v = sess.run(opt.get_slot(table, "v")).ravel()
            values = sess.run(table).ravel()
    np.testing.assert_allclose(m, [0.09, 0.1, 0.0], rtol=1e-6)
    np.testing.assert_allclose(v, [0.999e-3, 1e-3, 0.0], rtol=1e-4)  # 1 - 0.999 in float32
    alpha = 0.1 * np.sqrt(1 - 0.999**2) / (1 - 0.9**2)
    row0 = 1 - 0.1 - alpha * 0.09 / (np.sqrt(0.999e-3) + 1e-8)  # moved again in step 2
    row1 = 1 - alpha * 0.1 / (np.sqrt(1e-3) + 1e-8)
    np.testing.assert_allclose(values, [row0, row1, 1.0], rtol=1e-5)


def test_compute_gradients_fetch_as_arrays() -> None:
    """``sess.run`` of ``compute_gradients``' gradients gives numpy arrays, as TF's."""
    with tf.Graph().as_default():
        w = tf.Variable([1.0, -2.0], name="w")
        b = tf.Variable(np.float32(0.5), name="b")
        grads = tf.train.GradientDescentOptimizer(0.1).compute_gradients(
            lambda: tf.reduce_sum(tf.square(w)) + 3.0 * b
        )
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            dw, db = sess.run([g for g, _ in grads])
    assert isinstance(dw, np.ndarray) and isinstance(db, np.floating | np.ndarray)
    np.testing.assert_allclose(dw, [2.0, -4.0])
    assert float(db) == 3.0


def test_gather_axis_other_than_zero_is_refused() -> None:
    with tf.Graph().as_default():
        w = tf.Variable(np.zeros((2, 2), np.float32))
        with pytest.raises(NotImplementedError, match="axis=0"):
            tf.gather(w, [0], axis=1)


def test_initializers_fill_get_variable() -> None:
    with tf.Graph().as_default():
        z = tf.get_variable("z", shape=(2, 2), initializer=tf.zeros_initializer())
        o = tf.get_variable("o", shape=(3,), initializer=tf.ones_initializer())
        c = tf.get_variable("c", shape=(2,), initializer=tf.constant_initializer(2.5))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            got = sess.run([z, o, c])
    np.testing.assert_array_equal(got[0], np.zeros((2, 2)))
    np.testing.assert_array_equal(got[1], np.ones(3))
    np.testing.assert_array_equal(got[2], [2.5, 2.5])
    assert got[0].dtype == np.float32


def test_create_global_step_twice_is_tfs_error() -> None:
    with tf.Graph().as_default():
        tf.train.create_global_step()
        with pytest.raises(ValueError, match=r'^"global_step" already exists\.$'):
            tf.train.create_global_step()


def test_a_variable_the_loss_does_not_reach_is_left_alone() -> None:
    """Its gradient fetches as None and applying skips it (it used to become NaN)."""
    with tf.Graph().as_default():
        w = tf.Variable([1.0], name="w")
        other = tf.Variable(np.float32(1.0), name="other")
        opt = tf.train.GradientDescentOptimizer(0.5)
        grads = opt.compute_gradients(lambda: tf.reduce_sum(w), var_list=[w, other])
        train = opt.apply_gradients(grads)
        none_only = opt.minimize(lambda: tf.reduce_sum(w), var_list=[other])
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            assert sess.run(grads[1][0]) is None
            sess.run(train)
            assert (sess.run(w).tolist(), float(sess.run(other))) == ([0.5], 1.0)
            with pytest.raises(ValueError, match="No gradients provided for any variable"):
                sess.run(none_only)


def test_learning_rate_placeholder_is_fed_per_run() -> None:
    with tf.Graph().as_default():
        w = tf.Variable([1.0], name="w")
        lr = tf.placeholder(tf.float32, [])
        train = tf.train.GradientDescentOptimizer(lr).minimize(lambda: tf.reduce_sum(w))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train, {lr: 0.25})
            sess.run(train, {lr: 0.5})
            np.testing.assert_allclose(sess.run(w), [0.25])


def test_gather_of_a_missing_row_is_tfs_invalid_argument() -> None:
    with tf.Graph().as_default():
        w = tf.Variable(np.zeros((3, 2), np.float32), name="w")
        ids = tf.placeholder(tf.int32, [None])
        with tf.Session() as sess:
            sess.run(w.initializer)
            with pytest.raises(InvalidArgumentError, match=r"indices\[1\] = 5 is not in \[0, 3\)"):
                sess.run(lambda: tf.gather(w, ids), {ids: [0, 5]})


def test_adam_creates_its_beta_powers_before_the_slots() -> None:
    """TF's creation order (and so the collection's): beta1/2_power, then m and v per variable."""
    with tf.Graph().as_default():
        b, a = tf.Variable([1.0], name="b"), tf.Variable([2.0], name="a")
        tf.train.AdamOptimizer(0.1).minimize(lambda: tf.reduce_sum(a) + tf.reduce_sum(b))
        names = [v.name for v in tf.global_variables()]
    assert names == [
        "b",
        "a",
        "beta1_power",
        "beta2_power",
        "b/Adam",
        "b/Adam_1",
        "a/Adam",
        "a/Adam_1",
    ]
