"""A plain TF1 session: uninitialized variables, fresh local sessions, what fetches give."""

from __future__ import annotations

import os

import numpy as np
import pytest

import hpcdist.compat.v1 as tf
from hpcdist.errors import FailedPreconditionError, NotFoundError


def test_reading_before_the_initializer_raises_failed_precondition() -> None:
    with tf.Graph().as_default():
        w = tf.Variable([1.0, 2.0], name="w")
        v = tf.Variable(np.float32(3.0), name="v")
        add = tf.assign_add(w, [1.0, 1.0])
        with tf.Session() as sess:
            with pytest.raises(FailedPreconditionError, match="uninitialized value w"):
                sess.run(w)
            with pytest.raises(NotFoundError, match="before it was initialized"):
                sess.run(add)
            sess.run(tf.variables_initializer([w]))
            np.testing.assert_array_equal(sess.run(w), [1.0, 2.0])
            with pytest.raises(FailedPreconditionError, match="uninitialized value v"):
                sess.run(v)
            sess.run(v.initializer)
            assert float(sess.run(v)) == 3.0


def test_each_local_session_has_its_own_uninitialized_variables() -> None:
    with tf.Graph().as_default() as graph:
        w = tf.Variable([1.0], name="w")
        add = tf.assign_add(w, [5.0])
        with tf.Session() as first:
            first.run(tf.global_variables_initializer())
            first.run(add)
        with tf.Session(graph=graph) as second:
            with pytest.raises(FailedPreconditionError):
                second.run(w)
            second.run(tf.global_variables_initializer())
            np.testing.assert_array_equal(second.run(w), [1.0])


def test_initializer_and_read_in_one_run() -> None:
    """A variable fetched in the run that initializes it is read after the initializer."""
    with tf.Graph().as_default():
        w = tf.Variable([4.0], name="w")
        with tf.Session() as sess:
            _, value = sess.run([tf.global_variables_initializer(), w])
    np.testing.assert_array_equal(value, [4.0])


def test_monitored_sessions_still_initialize(tmp_path) -> None:
    """MonitoredTrainingSession initializes (then restores, in a second session)."""
    with tf.Graph().as_default():
        w = tf.Variable([1.0], name="w")
        step = tf.train.get_or_create_global_step()
        train = tf.train.GradientDescentOptimizer(0.5).minimize(
            lambda: tf.reduce_sum(w), global_step=step
        )
        with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path)) as sess:
            np.testing.assert_array_equal(sess.run(w), [1.0])
            sess.run(train)
    with tf.Graph().as_default():
        w = tf.Variable([1.0], name="w")
        step = tf.train.get_or_create_global_step()
        with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path)) as sess:
            assert (sess.run(w).tolist(), int(sess.run(step))) == ([0.5], 1)
        with tf.train.SingularMonitoredSession() as sess:
            assert int(sess.run(step)) == 0


def test_a_variable_fetched_beside_a_train_op_is_read_before_the_update() -> None:
    with tf.Graph().as_default():
        w = tf.Variable([2.0], name="w")
        step = tf.train.get_or_create_global_step()
        train = tf.train.GradientDescentOptimizer(0.25).minimize(
            lambda: tf.reduce_sum(tf.square(w)), global_step=step
        )
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            _, before, gs = sess.run([train, w, step])
            assert (before.tolist(), int(gs)) == ([2.0], 0)
            assert (sess.run(w).tolist(), int(sess.run(step))) == ([1.0], 1)


def test_assign_ops_fetch_the_new_value() -> None:
    with tf.Graph().as_default():
        v = tf.Variable(np.float32(1.0), name="v")
        add, put = tf.assign_add(v, 2.0), tf.assign(v, 7.0)
        with tf.Session() as sess:
            sess.run(v.initializer)
            assert float(sess.run(add)) == 3.0
            assert float(sess.run(put)) == 7.0
            assert sess.run(v.initializer) is None


def test_placeholders_take_python_operators() -> None:
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [2])

        def y():
            return x * 2.0 + 1.0

        with tf.Session() as sess:
            np.testing.assert_array_equal(sess.run(y, {x: [1.0, 3.0]}), [3.0, 7.0])


def test_unnumbered_save_is_the_latest_checkpoint(tmp_path) -> None:
    d = str(tmp_path)
    with tf.Graph().as_default():
        v = tf.Variable(np.float32(1.5), name="v")
        saver = tf.train.Saver()
        with tf.Session() as sess:
            sess.run(v.initializer)
            path = saver.save(sess, os.path.join(d, "model.ckpt"))
            assert path == os.path.join(d, "model.ckpt")
            assert tf.train.latest_checkpoint(d) == path
            state = tf.train.get_checkpoint_state(d)
            assert state.all_model_checkpoint_paths == [path]
            numbered = saver.save(sess, os.path.join(d, "model.ckpt"), global_step=3)
            assert tf.train.latest_checkpoint(d) == numbered


def test_hooks_see_the_state_their_run_left() -> None:
    """In one monitored run the caller's variable is read before the update, a hook's after."""
    seen: list[int] = []

    class Watch(tf.train.SessionRunHook):
        def __init__(self, step) -> None:
            self.step = step

        def before_run(self, run_context):
            return tf.train.SessionRunArgs(self.step)

        def after_run(self, run_context, run_values):
            seen.append(int(run_values.results))

    with tf.Graph().as_default():
        w = tf.Variable([2.0], name="w")
        step = tf.train.get_or_create_global_step()
        train = tf.train.GradientDescentOptimizer(0.25).minimize(
            lambda: tf.reduce_sum(w), global_step=step
        )
        with tf.train.MonitoredSession(hooks=[Watch(step)]) as sess:
            caller = [int(sess.run([train, step])[1]) for _ in range(3)]
    assert (caller, seen) == ([0, 1, 2], [1, 2, 3])
