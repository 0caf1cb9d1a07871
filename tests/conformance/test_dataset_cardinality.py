"""Dataset cardinalities and elements: take, skip, repeat, shard, batch, filter."""

import pytest

from tests.conformance.helpers import TF, assert_documented, both, conform

TAKE_NEGATIVE = (
    "docs/differences-from-tensorflow.md: `Dataset.take(n)` with a negative `n` other than -1"
)

PIPELINES = {
    "range5": lambda d: d.range(5),
    "take3": lambda d: d.range(5).take(3),
    "take10": lambda d: d.range(5).take(10),
    "take0": lambda d: d.range(5).take(0),
    "take-1": lambda d: d.range(5).take(-1),
    "skip2": lambda d: d.range(5).skip(2),
    "skip10": lambda d: d.range(5).skip(10),
    "skip-1": lambda d: d.range(5).skip(-1),
    "skip-3": lambda d: d.range(5).skip(-3),
    "skip0": lambda d: d.range(5).skip(0),
    "repeat2": lambda d: d.range(5).repeat(2),
    "repeat0": lambda d: d.range(5).repeat(0),
    "repeat-1": lambda d: d.range(5).repeat(-1),
    "repeat": lambda d: d.range(5).repeat(),
    "repeat-take7": lambda d: d.range(5).repeat().take(7),
    "repeat-skip2": lambda d: d.range(5).repeat().skip(2),
    "empty-repeat": lambda d: d.range(0).repeat(),
    "shard2-0": lambda d: d.range(5).shard(2, 0),
    "shard2-1": lambda d: d.range(5).shard(2, 1),
    "shard3-2": lambda d: d.range(7).shard(3, 2),
    "shard-repeat": lambda d: d.range(5).repeat().shard(2, 1),
    "batch2": lambda d: d.range(5).batch(2),
    "batch2-drop": lambda d: d.range(5).batch(2, drop_remainder=True),
    "batch10-drop": lambda d: d.range(5).batch(10, drop_remainder=True),
    "repeat-batch": lambda d: d.range(5).repeat().batch(2),
    "filter": lambda d: d.range(5).filter(lambda x: x % 2 == 0),
    "filter-repeat": lambda d: d.range(5).filter(lambda x: x % 2 == 0).repeat(),
    "filter-repeat2": lambda d: d.range(5).filter(lambda x: x % 2 == 0).repeat(2),
    "filter-take2": lambda d: d.range(5).filter(lambda x: x % 2 == 0).take(2),
    "filter-batch": lambda d: d.range(5).filter(lambda x: x % 2 == 0).batch(2),
    "repeat-filter": lambda d: d.range(5).repeat().filter(lambda x: x % 2 == 0),
    "map": lambda d: d.range(5).map(lambda x: x * 2),
    "tensor_slices": lambda d: d.from_tensor_slices([[1, 2], [3, 4], [5, 6]]),
    "from_tensors": lambda d: d.from_tensors([1, 2, 3]),
    "range-args": lambda d: d.range(2, 11, 3),
    "range-negative-step": lambda d: d.range(5, 0, -2),
}


def materialize(ds, cardinality):
    """The elements of a finite dataset; the first 7 of an infinite or unknown one."""
    it = iter(ds.as_numpy_iterator())
    out = []
    for _ in range(cardinality if cardinality >= 0 else 7):
        try:
            out.append(next(it))
        except StopIteration:
            break
    return out


@pytest.mark.parametrize("name", list(PIPELINES))
def test_cardinality_and_elements(name):
    def case(lib):
        ds = PIPELINES[name](lib.data.Dataset)
        card = int(ds.cardinality())
        return card, materialize(ds, card)

    conform(case)


def test_cardinality_constants():
    conform(lambda lib: (lib.data.INFINITE_CARDINALITY, lib.data.UNKNOWN_CARDINALITY))


def test_the_brief_cardinalities_with_tf_values():
    def card(lib, name):
        return int(PIPELINES[name](lib.data.Dataset).cardinality())

    assert card(TF, "skip-1") == 0 and card(TF, "filter-repeat") == -1  # INFINITE
    assert card(TF, "filter") == -2  # UNKNOWN


def test_take_negative_other_than_minus_one_is_a_documented_difference():
    assert_documented(TAKE_NEGATIVE)

    def case(lib):
        ds = lib.data.Dataset.range(5).take(-2)
        return int(ds.cardinality()), list(ds.as_numpy_iterator())

    expected, got = both(case)
    assert expected[0] == -2 and expected[1] == list(range(5))  # TF: -2 reads as "unknown"
    assert got[0] == 5 and got[1] == list(range(5))  # hpcdist: what it yields
