"""Seeds: TF's (global, operation) seed pairs, and shuffles made reproducible by the global seed.

``tf.compat.v1.random.get_seed`` is TF's rule for every seeded operation; hpcdist's
``hd.random.get_seed`` must give the same pairs, numbers included, in the same call order (the
sequence of operation seeds drawn after ``set_seed``). Shuffled orders are not compared (the
generators differ), only their properties: reproducible after the same ``set_seed``, different
for two shuffles created after it.
"""

import pytest

from tests.conformance.helpers import both, conform

OP_SEEDS = [None, None, 7, None, 0, -3, 2**40, None]


def get_seed(lib):
    return lib.tf.compat.v1.random.get_seed if lib.name == "tf" else lib.tf.random.get_seed


@pytest.mark.parametrize("global_seed", [None, 0, 1, 42, 2**31 + 5])
def test_seed_pairs_in_call_order(global_seed):
    def case(lib):
        lib.tf.random.set_seed(global_seed)
        pairs = [get_seed(lib)(op) for op in OP_SEEDS]
        lib.tf.random.set_seed(global_seed)  # restarts the sequence
        again = get_seed(lib)(None)
        lib.tf.random.set_seed(None)
        return [list(p) if p[0] is not None else "none" for p in pairs], list(again or ())

    conform(case)


def test_zero_seeds_are_moved_off_zero_zero():
    def case(lib):
        lib.tf.random.set_seed(0)
        pair = get_seed(lib)(0)
        lib.tf.random.set_seed(None)
        return list(pair)

    assert conform(case) == [0, 2**31 - 1]


def test_unseeded_shuffle_follows_the_global_seed():
    def case(lib):
        def orders():
            lib.tf.random.set_seed(3)
            first = lib.data.Dataset.range(50).shuffle(50)
            second = lib.data.Dataset.range(50).shuffle(50)
            return [list(map(int, d.as_numpy_iterator())) for d in (first, second)]

        a, b = orders(), orders()
        lib.tf.random.set_seed(None)
        return {
            "same_after_set_seed": a == b,
            "two_shuffles_differ": a[0] != a[1],
            "permutation": sorted(a[0]) == list(range(50)),
        }

    tf_side, hd_side = both(case)
    assert (
        tf_side
        == hd_side
        == {
            "same_after_set_seed": True,
            "two_shuffles_differ": True,
            "permutation": True,
        }
    )
