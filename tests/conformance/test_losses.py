"""Keras losses: values and gradients, reductions, sample weights, inside strategy.run."""

import numpy as np
import pytest

from tests.conformance.helpers import TF, attempt, conform

F32 = np.float32
Y2 = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], F32)  # one-hot, 2 x 3
P2 = np.array([[0.2, 0.7, 0.1], [0.5, 0.3, 0.2]], F32)  # probabilities
LOGITS = np.array([[1.0, 2.0, -1.0], [0.5, -0.5, 3.0]], F32)
YB = np.array([[0.0, 1.0], [1.0, 1.0]], F32)  # binary targets, 2 x 2
PB = np.array([[0.1, 0.8], [0.6, 0.3]], F32)


def value_and_gradient(lib, loss, y_true, y_pred, **kw):
    """The loss and its gradient with respect to the predictions."""
    p = lib.tf.Variable(np.asarray(y_pred, F32))
    with lib.tf.GradientTape() as tape:
        value = loss(y_true, p, **kw)
    return value, tape.gradient(value, p)


LOSSES = {
    "mse": (lambda k: k.losses.MeanSquaredError(), YB, PB),
    "mse-1d": (
        lambda k: k.losses.MeanSquaredError(),
        np.array([1.0, 2.0, 4.0], F32),
        np.array([1.5, 2.0, 3.0], F32),
    ),
    "mse-3d": (lambda k: k.losses.MeanSquaredError(), Y2.reshape(2, 3, 1), P2.reshape(2, 3, 1)),
    "mse-sum": (lambda k: k.losses.MeanSquaredError(reduction="sum"), YB, PB),
    "mse-none": (lambda k: k.losses.MeanSquaredError(reduction=None), YB, PB),
    "bce": (lambda k: k.losses.BinaryCrossentropy(), YB, PB),
    "bce-1d": (
        lambda k: k.losses.BinaryCrossentropy(),
        np.array([0.0, 1.0, 1.0], F32),
        np.array([0.2, 0.9, 0.4], F32),
    ),
    "bce-logits": (lambda k: k.losses.BinaryCrossentropy(from_logits=True), YB, LOGITS[:, :2]),
    "bce-smoothing": (lambda k: k.losses.BinaryCrossentropy(label_smoothing=0.2), YB, PB),
    "bce-logits-smoothing": (
        lambda k: k.losses.BinaryCrossentropy(from_logits=True, label_smoothing=0.1),
        YB,
        LOGITS[:, :2],
    ),
    "bce-p0-p1": (lambda k: k.losses.BinaryCrossentropy(), YB, np.array([[0.0, 1.0], [0.0, 1.0]])),
    "bce-none": (lambda k: k.losses.BinaryCrossentropy(reduction="none"), YB, PB),
    "cce": (lambda k: k.losses.CategoricalCrossentropy(), Y2, P2),
    "cce-logits": (lambda k: k.losses.CategoricalCrossentropy(from_logits=True), Y2, LOGITS),
    "cce-smoothing": (lambda k: k.losses.CategoricalCrossentropy(label_smoothing=0.1), Y2, P2),
    "cce-logits-smoothing": (
        lambda k: k.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.3),
        Y2,
        LOGITS,
    ),
    "cce-p0-p1": (
        lambda k: k.losses.CategoricalCrossentropy(),
        Y2,
        np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], F32),
    ),
    "cce-unnormalized": (lambda k: k.losses.CategoricalCrossentropy(), Y2, P2 * 3.0),
    "cce-sum": (lambda k: k.losses.CategoricalCrossentropy(reduction="sum"), Y2, P2),
    "scce": (lambda k: k.losses.SparseCategoricalCrossentropy(), np.array([1, 0]), P2),
    "scce-2d-labels": (
        lambda k: k.losses.SparseCategoricalCrossentropy(),
        np.array([[1], [0]]),
        P2,
    ),
    "scce-logits": (
        lambda k: k.losses.SparseCategoricalCrossentropy(from_logits=True),
        np.array([2, 0]),
        LOGITS,
    ),
    "scce-p0": (
        lambda k: k.losses.SparseCategoricalCrossentropy(),
        np.array([1, 0]),
        np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], F32),
    ),
}


@pytest.mark.parametrize("name", list(LOSSES))
def test_loss_value_and_gradient(name):
    make, y_true, y_pred = LOSSES[name]
    conform(lambda lib: value_and_gradient(lib, make(lib.keras), y_true, y_pred))


@pytest.mark.parametrize(
    ("name", "weight"),
    [
        ("mse", np.array([1.0, 3.0], F32)),
        ("mse", np.array([[1.0, 0.0], [0.5, 2.0]], F32)),
        ("bce", np.array([0.0, 2.0], F32)),
        ("cce", np.array([2.0, 1.0], F32)),
        ("scce", np.array([0.5, 0.0], F32)),
        ("mse-1d", np.array([1.0, 0.0, 2.0], F32)),
    ],
)
def test_loss_with_sample_weight(name, weight):
    make, y_true, y_pred = LOSSES[name]
    conform(
        lambda lib: value_and_gradient(lib, make(lib.keras), y_true, y_pred, sample_weight=weight)
    )


def test_probability_losses_clip_at_p_0_and_1():
    """Keras clips probabilities to [epsilon, 1 - epsilon]: finite values and gradients."""
    for name in ("bce-p0-p1", "cce-p0-p1", "scce-p0"):
        make, y_true, y_pred = LOSSES[name]
        value, grad = conform(
            lambda lib, m=make, t=y_true, p=y_pred: value_and_gradient(lib, m(lib.keras), t, p)
        )
        assert np.isfinite(value).all() and np.isfinite(grad).all(), name


def test_loss_functions_by_name():
    def case(lib):
        return [
            lib.keras.losses.get(name)(YB, PB)
            for name in ("mse", "binary_crossentropy", "mean_squared_error")
        ]

    conform(case)


def test_l1_gradient_at_zero():
    """d|x|/dx at 0 is 0 (TF's sign(0)); the L1 regularizer's gradient at a zero weight too."""

    def case(lib):
        x = lib.tf.Variable(np.array([-1.0, 0.0, 2.0], F32))
        with lib.tf.GradientTape(persistent=True) as tape:
            a = lib.tf.reduce_sum(lib.tf.abs(x))
            r = lib.keras.regularizers.L1(0.5)(x)
        return a, tape.gradient(a, x), r, tape.gradient(r, x)

    out = conform(case)
    assert out[1].tolist() == [-1.0, 0.0, 1.0]


def test_regularizers():
    def case(lib):
        x = lib.tf.Variable(np.array([[-1.0, 0.5], [0.0, 2.0]], F32))
        with lib.tf.GradientTape(persistent=True) as tape:
            l2 = lib.keras.regularizers.L2(0.1)(x)
            l1l2 = lib.keras.regularizers.L1L2(l1=0.2, l2=0.3)(x)
        return l2, tape.gradient(l2, x), l1l2, tape.gradient(l1l2, x)

    conform(case)


def per_replica_batches(lib):
    """Replica r gets rows 2r, 2r+1 of YB-like data of 4 rows."""
    y = np.array([[0.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.0, 0.0]], F32)
    p = np.array([[0.1, 0.8], [0.6, 0.3], [0.9, 0.2], [0.4, 0.4]], F32)
    index = lib.distribute.get_replica_context().replica_id_in_sync_group
    return lib.tf.constant(y[2 * index : 2 * index + 2]), lib.tf.constant(
        p[2 * index : 2 * index + 2]
    )


@pytest.mark.parametrize("reduction", ["mean", "mean_with_sample_weight"])
@pytest.mark.parametrize(
    "weight",
    [None, np.array([1.0, 0.0, 4.0], F32), np.zeros(3, F32), np.array([[2.0], [1.0], [0.5]], F32)],
)
def test_keras_3_mean_reductions(reduction, weight):
    """Keras 3's "mean" (as sum_over_batch_size) and "mean_with_sample_weight" (sum / sum(w))."""
    y_true, y_pred = np.array([[1.0], [2.0], [3.0]], F32), np.zeros((3, 1), F32)
    kw = {} if weight is None else {"sample_weight": weight}

    def case(lib):
        loss = lib.keras.losses.MeanSquaredError(reduction=reduction)
        return value_and_gradient(lib, loss, y_true, y_pred, **kw)

    conform(case)


@pytest.mark.parametrize(
    "reduction", ["default", "sum", "sum_over_batch_size", "mean_with_sample_weight", "none"]
)
def test_keras_loss_inside_strategy_run(reduction):
    """Keras 3 scales a loss computed in a replica by 1 / num_replicas_in_sync (default too)."""

    def case(lib):
        s = lib.mirrored()
        kw = {} if reduction == "default" else {"reduction": reduction}
        loss = lib.keras.losses.MeanSquaredError(**kw)
        out = s.run(lambda: loss(*per_replica_batches(lib)))
        return list(s.experimental_local_results(out))

    out = conform(case)
    if reduction == "default":  # TF: replica 0's mean over its 2 rows, divided by the 2 replicas
        assert np.isclose(out[0], np.mean((PB - YB) ** 2) / 2)


def test_keras_loss_inside_strategy_run_with_sample_weight():
    def case(lib):
        s = lib.mirrored()
        loss = lib.keras.losses.BinaryCrossentropy()
        out = s.run(
            lambda: loss(*per_replica_batches(lib), sample_weight=lib.tf.constant([1.0, 3.0]))
        )
        return list(s.experimental_local_results(out))

    conform(case)


def average_loss(lib):
    """tf.nn.compute_average_loss; hpcdist.nn.compute_average_loss (docs/porting.md: tf.nn.X)."""
    return lib.tf.nn.compute_average_loss if lib is TF else lib.keras.compute_average_loss


def test_compute_average_loss_in_replica_context():
    def case(lib):
        s = lib.mirrored()
        cal = average_loss(lib)

        def fn():
            y, p = per_replica_batches(lib)
            per_example = lib.tf.reduce_sum(lib.tf.square(y - p), axis=1)
            return (
                cal(per_example, global_batch_size=4),
                cal(per_example),
                cal(per_example, sample_weight=lib.tf.constant([2.0, 0.0])),
            )

        return [list(s.experimental_local_results(o)) for o in s.run(fn)]

    conform(case)


@pytest.mark.parametrize("in_scope", [True, False])
def test_compute_average_loss_in_cross_replica_context(in_scope):
    """TF: outside replica context the per-example losses are averaged by global_batch_size."""

    def case(lib):
        s = lib.mirrored()
        cal = average_loss(lib)
        per_example = lib.tf.constant([1.0, 2.0, 3.0, 6.0])
        if in_scope:
            with s.scope():
                return attempt(lambda: cal(per_example, global_batch_size=4)), attempt(
                    lambda: cal(per_example)
                )
        return cal(per_example, global_batch_size=4), cal(per_example)

    out = conform(case)
    assert out[0] == 3.0
    if in_scope:  # TF: no global batch size in cross-replica context is a RuntimeError
        assert out[1].family == "RuntimeError"
