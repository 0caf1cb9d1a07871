"""Keras metrics step by step: update_state, result, reset_state, sample weights."""

import numpy as np
import pytest

from tests.conformance.helpers import conform

F32 = np.float32
Y2 = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], F32)
P2 = np.array([[0.2, 0.7, 0.1], [0.5, 0.3, 0.2]], F32)
P2_WRONG = np.array([[0.2, 0.1, 0.7], [0.5, 0.3, 0.2]], F32)


def steps(metric, updates):
    """result() after each update_state(*args, **kw), then after reset_state()."""
    out = []
    for args, kw in updates:
        metric.update_state(*args, **kw)
        out.append(metric.result())
    metric.reset_state()
    out.append(metric.result())
    return out


CASES = {
    "accuracy-2x3-weight-1-3": (
        lambda k: k.metrics.Accuracy(),
        [(([[1, 2, 3], [4, 5, 6]], [[1, 2, 0], [4, 5, 6]]), {"sample_weight": [1.0, 3.0]})],
    ),
    "accuracy-2x3-weight-2d": (
        lambda k: k.metrics.Accuracy(),
        [
            (
                ([[1, 2, 3], [4, 5, 6]], [[1, 2, 0], [4, 0, 6]]),
                {"sample_weight": [[1.0, 0.0, 2.0], [1.0, 1.0, 0.5]]},
            )
        ],
    ),
    "accuracy-1d": (
        lambda k: k.metrics.Accuracy(),
        [(([1, 2, 3, 4], [0, 2, 3, 4]), {}), (([1, 1], [1, 1]), {"sample_weight": [0.5, 0.0]})],
    ),
    "binary-accuracy": (
        lambda k: k.metrics.BinaryAccuracy(),
        [(([[1.0], [0.0], [1.0]], [[0.7], [0.6], [0.4]]), {})],
    ),
    "binary-accuracy-threshold": (
        lambda k: k.metrics.BinaryAccuracy(threshold=0.65),
        [(([[1.0, 0.0], [0.0, 1.0]], [[0.7, 0.6], [0.5, 0.66]]), {"sample_weight": [2.0, 1.0]})],
    ),
    "binary-accuracy-2d-weights": (
        lambda k: k.metrics.BinaryAccuracy(),
        [
            (
                ([[1.0, 0.0], [0.0, 1.0]], [[0.7, 0.6], [0.5, 0.9]]),
                {"sample_weight": [[1.0, 2.0], [0.0, 3.0]]},
            )
        ],
    ),
    "categorical-accuracy": (
        lambda k: k.metrics.CategoricalAccuracy(),
        [((Y2, P2), {}), ((Y2, P2_WRONG), {"sample_weight": [3.0, 1.0]})],
    ),
    "sparse-categorical-accuracy": (
        lambda k: k.metrics.SparseCategoricalAccuracy(),
        [(([1, 2], P2), {}), (([[2], [0]], P2_WRONG), {"sample_weight": [1.0, 0.5]})],
    ),
    "mean": (
        lambda k: k.metrics.Mean(),
        [
            (([1.0, 2.0, 6.0],), {}),
            (([[4.0, 0.0]],), {"sample_weight": [[2.0, 1.0]]}),
            ((3.0,), {}),
        ],
    ),
    "mean-weights-broadcast": (
        lambda k: k.metrics.Mean(),
        [(([[1.0, 2.0], [3.0, 4.0]],), {"sample_weight": [1.0, 3.0]})],
    ),
    "sum": (
        lambda k: k.metrics.Sum(),
        [(([1.0, 2.0],), {}), (([[1.0, 2.0], [3.0, 4.0]],), {"sample_weight": [1.0, 0.0]})],
    ),
    "mse": (
        lambda k: k.metrics.MeanSquaredError(),
        [((Y2, P2), {}), ((Y2, P2_WRONG), {"sample_weight": [1.0, 2.0]})],
    ),
    "mse-1d": (
        lambda k: k.metrics.MeanSquaredError(),
        [(([1.0, 2.0, 4.0], [1.5, 2.0, 3.0]), {})],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_metric_steps(name):
    make, updates = CASES[name]
    conform(lambda lib: steps(make(lib.keras), updates))


def test_accuracy_with_sample_weight_1_3_on_2x3_inputs():
    make, updates = CASES["accuracy-2x3-weight-1-3"]
    out = conform(lambda lib: steps(make(lib.keras), updates))
    assert np.isclose(out[0], 0.9166667)  # (1 * 2/3 + 3 * 1) / 4 as Keras 3 weighs each element


def test_metric_names_and_variables():
    def case(lib):
        out = {}
        for name, make in (
            ("acc", lambda: lib.keras.metrics.Accuracy()),
            ("mean", lambda: lib.keras.metrics.Mean(name="loss")),
            ("cat", lambda: lib.keras.metrics.SparseCategoricalAccuracy()),
        ):
            m = make()
            out[name] = (m.name, len(m.variables), [np.asarray(v).shape for v in m.variables])
        return out

    conform(case)


def test_metric_update_inside_strategy_run():
    """A metric created in the strategy's scope accumulates every replica's update."""

    def case(lib):
        s = lib.mirrored()
        with s.scope():
            m = lib.keras.metrics.Mean()

        def fn():
            rid = lib.tf.cast(
                lib.distribute.get_replica_context().replica_id_in_sync_group, "float32"
            )
            m.update_state(lib.tf.constant([1.0, 2.0]) + 10.0 * rid)

        s.run(fn)
        first = m.result()
        s.run(fn)
        return first, m.result()

    conform(case)
