"""The TF1 layer's atomics on variables of this process, through the public `Storage` protocol.

The RMA path (a variable on a ps task) runs in tests/integration/test_tf1_jobs.py; here the
storage is a `LocalStorage`, whose element atomics update `Storage.local_array` under a lock.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import hpcdist.compat.v1 as tf
from hpcdist.compat.v1.atomics import atomic_read, compare_and_swap, fetch_add
from hpcdist.core.variables import LocalStorage, Storage
from hpcdist.errors import FailedPreconditionError


def test_fetch_add_compare_and_swap_and_read_on_a_placed_variable() -> None:
    with tf.Graph().as_default():
        counter = tf.Variable(np.array([5, 7], np.int64))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            assert fetch_add(counter, 3, index=1) == 7
            assert atomic_read(counter, 1) == 10
            assert compare_and_swap(counter, 4, 9) == 5  # not equal: unchanged
            assert compare_and_swap(counter, 5, 9) == 5  # equal: swapped
            np.testing.assert_array_equal(sess.run(counter), [9, 10])


def test_concurrent_fetch_add_loses_no_update() -> None:
    with tf.Graph().as_default():
        counter = tf.Variable(np.int64(0))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            olds: list[int] = []

            def add() -> None:
                olds.extend(fetch_add(counter, 1) for _ in range(500))

            threads = [threading.Thread(target=add) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert atomic_read(counter) == 2000
            assert sorted(olds) == list(range(2000))  # every old value seen exactly once


def test_non_integer_counter_is_refused() -> None:
    with tf.Graph().as_default():
        weights = tf.Variable([1.0, 2.0])
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            with pytest.raises(TypeError, match="integer dtype, not float32"):
                fetch_add(weights, 1)


def test_unplaced_variable_fails_as_an_uninitialized_value() -> None:
    with tf.Graph().as_default():
        counter = tf.Variable(np.int64(0))
        with pytest.raises(FailedPreconditionError, match="uninitialized value"):
            atomic_read(counter)


class _Elsewhere(Storage):
    """A storage whose memory this process may not write alone (no local array, no atomics)."""

    def read(self) -> np.ndarray:
        return np.zeros(1, np.int64)


def test_local_array_is_the_in_place_path_and_its_absence_is_an_error() -> None:
    local = LocalStorage(np.arange(3, dtype=np.int64))
    local.local_array()[1] = 40
    np.testing.assert_array_equal(local.read(), [0, 40, 2])
    assert local.fetch_add(2, 5) == 2 and local.atomic_read(2) == 7
    with pytest.raises(TypeError, match="expected a storage in this process's memory"):
        _Elsewhere().fetch_add(0, 1)
