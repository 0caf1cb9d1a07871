"""Training checks shared by the one-process tests and the MPI tests."""

import numpy as np

import hpcdist as hd


def data(n=203, features=6, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, features)).astype(np.float32)
    w = rng.standard_normal((features, classes))
    y = (x @ w).argmax(axis=1)
    return x, y


def build(strategy=None, seed=1):
    hd.nn.set_random_seed(seed)
    scope = strategy.scope() if strategy is not None else _Null()
    with scope:
        model = hd.nn.Sequential(
            [
                hd.nn.layers.Dense(
                    16,
                    activation="tanh",
                    input_shape=(6,),
                    kernel_regularizer=hd.nn.regularizers.L2(1e-3),
                ),
                hd.nn.layers.LayerNormalization(),
                hd.nn.layers.Dense(3),
            ]
        )
        model.compile(
            optimizer=hd.nn.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
            loss=hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    return model


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def check_fit_matches_one_process(strategy, epochs=3, batch_size=20):
    """Distributed fit == one process on the same global batches (max abs diff < 1e-5)."""
    x, y = data()
    reference = build()
    initial = reference.get_weights()
    ref_hist = reference.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0, seed=5)
    assert (
        max(np.abs(a - b).max() for a, b in zip(initial, reference.get_weights(), strict=True))
        > 1e-2
    )
    assert ref_hist.history["loss"][-1] < ref_hist.history["loss"][0]
    model = build(strategy)
    hist = model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0, seed=5)
    for a, b in zip(reference.get_weights(), model.get_weights(), strict=True):
        assert np.abs(a - b).max() < 1e-5, np.abs(a - b).max()
    np.testing.assert_allclose(hist.history["loss"], ref_hist.history["loss"], rtol=1e-5)
    np.testing.assert_allclose(hist.history["accuracy"], ref_hist.history["accuracy"], rtol=1e-6)
    # Evaluation counts every example once: the same numbers as one process.
    np.testing.assert_allclose(model.evaluate(x, y), reference.evaluate(x, y), rtol=1e-5)
    np.testing.assert_allclose(model.predict(x, batch_size=32), reference.predict(x), atol=1e-5)


def check_custom_loop_matches_one_process(strategy, steps=12, global_batch=24):
    """GradientTape + strategy.run + apply_gradients == one process, with Adam."""
    x, y = data()
    loss_obj = hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def train(strat):
        hd.nn.set_random_seed(3)
        with strat.scope() if strat is not None else _Null():
            model = hd.nn.Sequential(
                [hd.nn.layers.Dense(8, activation="relu", input_shape=(6,)), hd.nn.layers.Dense(3)]
            )
            optimizer = hd.nn.optimizers.Adam(0.01)
        ds = (
            hd.data.Dataset.from_tensor_slices((x, y))
            .shuffle(256, seed=1)
            .repeat()
            .batch(global_batch)
        )
        s = strat or hd.get_strategy()

        def step(batch):
            bx, by = batch
            with hd.nn.GradientTape() as tape:
                per_example = loss_obj(by, model(bx, training=True))
                loss = hd.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        initial = model.get_weights()
        it = iter(s.experimental_distribute_dataset(ds))
        losses = [
            float(s.reduce("sum", s.run(step, args=(next(it),)), axis=None)) for _ in range(steps)
        ]
        return initial, model.get_weights(), losses

    initial, reference, ref_losses = train(None)
    _, distributed, losses = train(strategy)
    assert max(np.abs(a - b).max() for a, b in zip(initial, reference, strict=True)) > 1e-2
    assert np.mean(ref_losses[-3:]) < np.mean(ref_losses[:3])  # it really trains
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    for a, b in zip(reference, distributed, strict=True):
        assert np.abs(a - b).max() < 1e-5, np.abs(a - b).max()
