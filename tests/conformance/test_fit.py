"""Model.fit / evaluate / predict from the same initial weights on the same data.

TF's model is built first (seeded); its initial weights are copied into both models, so the
two runs start from identical weights and see identical batches (shuffle=False).
"""

import numpy as np
import pytest

from tests.conformance.helpers import HD, TF, assert_documented, conform

F32 = np.float32
RNG = np.random.default_rng(7)
X = RNG.normal(size=(16, 3)).astype(F32)
Y_REG = (X @ np.array([[1.0], [-2.0], [0.5]], F32) + 0.3).astype(F32)
Y_CLS = (X[:, 0] > 0).astype(np.int32) + (X[:, 1] > 0.5).astype(np.int32)
SAMPLE_WEIGHT = np.linspace(0.5, 2.0, 16).astype(F32)
TIME_S = "docs/differences-from-tensorflow.md: History and the epoch logs carry `time_s`"


def build(lib, outputs, activation=None):
    return lib.keras.Sequential(
        [
            lib.keras.Input((3,)),
            lib.keras.layers.Dense(4, activation="relu"),
            lib.keras.layers.Dense(outputs, activation=activation),
        ]
    )


def compiled_model(lib, weights, strategy, outputs=1, activation=None, **compile_args):
    """A model holding ``weights``, compiled; made in the mirrored strategy's scope if asked."""

    def make():
        model = build(lib, outputs, activation)
        model.set_weights(weights)
        model.compile(**compile_args)
        return model

    if not strategy:
        return make()
    with lib.mirrored().scope():
        return make()


def initial_weights(outputs, activation=None):
    TF.keras.utils.set_random_seed(1)
    return [np.asarray(w) for w in build(TF, outputs, activation).get_weights()]


SETUPS = {
    "regression-sgd": dict(
        outputs=1,
        activation=None,
        y=Y_REG,
        loss="mse",
        metrics=["mse"],
        optimizer=lambda k: k.optimizers.SGD(0.05),
    ),
    "regression-adam-clipnorm": dict(
        outputs=1,
        activation=None,
        y=Y_REG,
        loss="mean_squared_error",
        metrics=[],
        optimizer=lambda k: k.optimizers.Adam(0.02, clipnorm=1.0),
    ),
    "classification-scce": dict(
        outputs=3,
        activation="softmax",
        y=Y_CLS,
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        optimizer=lambda k: k.optimizers.Adam(0.05),
    ),
    "classification-logits": dict(
        outputs=3,
        activation=None,
        y=Y_CLS,
        loss=lambda k: k.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        optimizer=lambda k: k.optimizers.SGD(0.1, momentum=0.9),
    ),
}


HISTORY_KEYS = {
    ("regression-sgd", False): ["loss", "mse"],
    ("regression-sgd", True): ["loss", "mse", "val_loss", "val_mse"],
    ("regression-sgd", "sample_weight"): ["loss", "mse"],
    ("regression-adam-clipnorm", False): ["loss"],
    ("classification-scce", False): ["accuracy", "loss"],
    ("classification-logits", False): ["accuracy", "loss"],
}


def train(lib, setup, weights, strategy=False, sample_weight=None, validation=False):
    s = lib.mirrored() if strategy else None
    cfg = SETUPS[setup]

    def make():
        model = build(lib, cfg["outputs"], cfg["activation"])
        model.set_weights(weights)
        loss = cfg["loss"](lib.keras) if callable(cfg["loss"]) else cfg["loss"]
        model.compile(optimizer=cfg["optimizer"](lib.keras), loss=loss, metrics=cfg["metrics"])
        return model

    if s is None:
        model = make()
    else:
        with s.scope():
            model = make()
    kw = {"sample_weight": sample_weight} if sample_weight is not None else {}
    if validation:
        kw["validation_data"] = (X[:6], cfg["y"][:6])
    history = model.fit(X, cfg["y"], batch_size=4, epochs=3, shuffle=False, verbose=0, **kw)
    return {
        # TF's keys (hpcdist's History adds more: test_history_keys)
        "history": {
            k: [float(v) for v in history.history[k]]
            for k in HISTORY_KEYS[setup, validation or ("sample_weight" if kw else False)]
        },
        "weights": model.get_weights(),
        "evaluate": model.evaluate(X, cfg["y"], batch_size=8, verbose=0),
        "predict": model.predict(X[:5], batch_size=2, verbose=0),
    }


@pytest.mark.parametrize("setup", list(SETUPS))
def test_fit_evaluate_predict(setup):
    cfg = SETUPS[setup]
    weights = initial_weights(cfg["outputs"], cfg["activation"])
    conform(lambda lib: train(lib, setup, weights))


def test_fit_with_validation_data():
    weights = initial_weights(1)
    conform(lambda lib: train(lib, "regression-sgd", weights, validation=True))


def test_fit_with_sample_weight():
    weights = initial_weights(1)
    conform(lambda lib: train(lib, "regression-sgd", weights, sample_weight=SAMPLE_WEIGHT))


def test_fit_under_mirrored_strategy():
    """Batches of 4 split 2 + 2 over the replicas; the gradients are summed, as in TF.

    One case only: TF's fit under MirroredStrategy takes ~20 s here (tracing).
    """
    setup = "classification-scce"
    cfg = SETUPS[setup]
    weights = initial_weights(cfg["outputs"], cfg["activation"])
    conform(lambda lib: train(lib, setup, weights, strategy=True))


def test_history_keys():
    """A ported program that tabulates ``history.history`` sees the same columns."""
    weights = initial_weights(1)

    def case(lib):
        model = build(lib, 1)
        model.set_weights(weights)
        model.compile(optimizer=lib.keras.optimizers.SGD(0.05), loss="mse", metrics=["mse"])
        history = model.fit(
            X,
            Y_REG,
            batch_size=8,
            epochs=1,
            verbose=0,
            shuffle=False,
            validation_data=(X[:4], Y_REG[:4]),
        )
        return [k for k in sorted(history.history) if k != "time_s"], history.params

    conform(case)
    hd_history = build(HD, 1)
    hd_history.compile(optimizer=HD.keras.optimizers.SGD(0.05), loss="mse")
    keys = hd_history.fit(X, Y_REG, batch_size=8, epochs=1, verbose=0).history
    assert sorted(keys) == ["loss", "time_s"]  # hpcdist's one extra column, documented
    assert_documented(TIME_S)


def test_model_call_and_weights_layout():
    weights = initial_weights(3, "softmax")

    def case(lib):
        model = build(lib, 3, "softmax")
        model.set_weights(weights)
        return (
            model(X[:3]),
            [np.asarray(w).shape for w in model.get_weights()],
            len(model.trainable_variables),
            model.count_params(),
        )

    conform(case)


@pytest.mark.parametrize("strategy", [False, True])
def test_weighted_metrics_and_evaluate_sample_weight(strategy):
    """``weighted_metrics`` see the sample weights of fit and evaluate; ``metrics`` do not.

    A weighted metric whose name a plain one already has is logged as ``weighted_<name>``.
    """
    weights = initial_weights(1, "sigmoid")
    y = (X[:, :1] > 0).astype(F32)
    w = np.array([1, 2, 0, 1, 3, 1, 0.5, 2] * 2, F32)

    def case(lib):
        model = compiled_model(
            lib,
            weights,
            strategy,
            activation="sigmoid",
            optimizer=lib.keras.optimizers.SGD(0.1),
            loss="binary_crossentropy",
            metrics=["accuracy", "mse"],
            weighted_metrics=["accuracy", lib.keras.metrics.MeanAbsoluteError()],
        )
        weighted = model.evaluate(X, y, sample_weight=w, batch_size=4, return_dict=True, verbose=0)
        plain = model.evaluate(X, y, batch_size=4, return_dict=True, verbose=0)
        history = model.fit(X, y, sample_weight=w, batch_size=4, epochs=2, shuffle=False, verbose=0)
        alone = build(lib, 1, "sigmoid")
        alone.set_weights(weights)
        alone.compile(optimizer="sgd", loss="binary_crossentropy", weighted_metrics=["accuracy"])
        return {
            "weighted": weighted,
            "plain": plain,
            "history": {
                k: list(map(float, v)) for k, v in history.history.items() if k != "time_s"
            },
            "alone": alone.evaluate(
                X, y, sample_weight=w, batch_size=4, return_dict=True, verbose=0
            ),
            "weights": model.get_weights(),
        }

    conform(case)


@pytest.mark.parametrize("strategy", [False, True])
@pytest.mark.parametrize("reduction", ["sum", "mean", "mean_with_sample_weight"])
def test_fit_honours_the_losss_reduction(reduction, strategy):
    """Keras' fit reduces with the compiled loss's own reduction (per replica, then summed)."""
    weights = initial_weights(1)

    def case(lib):
        model = compiled_model(
            lib,
            weights,
            strategy,
            optimizer=lib.keras.optimizers.SGD(0.01),
            loss=lib.keras.losses.MeanSquaredError(reduction=reduction),
        )
        history = model.fit(
            X, Y_REG, sample_weight=SAMPLE_WEIGHT, batch_size=4, epochs=2, shuffle=False, verbose=0
        )
        return {"loss": [float(v) for v in history.history["loss"]], "weights": model.get_weights()}

    conform(case)
