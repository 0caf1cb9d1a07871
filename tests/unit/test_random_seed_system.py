"""One seed system (`hpcdist.utils.seeds`): ``hd.random.set_seed`` and ``hd.nn.set_random_seed``
seed everything that draws random numbers, as TF's and Keras' seeds do."""

import random

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.utils import seeds


@pytest.fixture(autouse=True)
def _unset():
    yield
    hd.random.set_seed(None)


def _weights():
    layer = hd.nn.layers.Dense(4)
    layer(np.zeros((1, 3), np.float32))
    return layer.kernel.numpy()


def test_tf_global_seed_also_seeds_the_initializers():
    hd.random.set_seed(5)
    first = _weights(), hd.random.uniform((3,)).numpy()
    hd.random.set_seed(5)
    second = _weights(), hd.random.uniform((3,)).numpy()
    assert np.array_equal(first[0], second[0]) and np.array_equal(first[1], second[1])
    hd.random.set_seed(6)
    assert not np.array_equal(_weights(), first[0])


def test_keras_set_random_seed_seeds_everything():
    hd.nn.set_random_seed(3)
    draws = (
        _weights(),
        hd.random.uniform((3,)).numpy(),
        random.random(),
        np.random.random(),
        list(hd.data.Dataset.range(20).shuffle(20).as_numpy_iterator()),
        hd.random.get_seed(None),
    )
    hd.nn.set_random_seed(3)
    again = (
        _weights(),
        hd.random.uniform((3,)).numpy(),
        random.random(),
        np.random.random(),
        list(hd.data.Dataset.range(20).shuffle(20).as_numpy_iterator()),
        hd.random.get_seed(None),
    )
    for a, b in zip(draws, again, strict=True):
        assert np.array_equal(a, b)
    assert seeds.global_seed() == 3


def test_initial_weights_keep_their_values_for_a_seed():
    # hd.nn.set_random_seed(s) draws initial weights from default_rng(s), as it always did
    hd.nn.set_random_seed(11)
    limit = np.sqrt(6.0 / (3 + 4))
    expected = np.random.default_rng(11).uniform(-limit, limit, (3, 4)).astype(np.float32)
    assert np.array_equal(_weights(), expected)


def test_unsetting_returns_every_generator_to_its_start():
    hd.random.set_seed(9)
    hd.random.set_seed(None)
    assert hd.random.get_seed(None) == (None, None)
    assert seeds.global_seed() is None
    limit = np.sqrt(6.0 / (3 + 4))
    expected = np.random.default_rng(0).uniform(-limit, limit, (3, 4)).astype(np.float32)
    assert np.array_equal(_weights(), expected)


def test_tf_operation_seed_numbers_are_unchanged():
    hd.random.set_seed(11)
    assert hd.random.get_seed(None) == (11, 1942955373)  # TF's number (conformance suite)
    hd.random.set_seed(None)
    assert hd.random.get_seed(5) == (87654321, 5)


@pytest.mark.parametrize("seed", [None, 1.5, "3", True])
def test_keras_set_random_seed_needs_an_integer(seed):
    with pytest.raises(ValueError, match="integer seed"):
        hd.nn.set_random_seed(seed)
