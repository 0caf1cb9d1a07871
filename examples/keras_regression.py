"""The classic tf.distribute Keras example, ported: Dense(1) with an L2 penalty, mse, sgd.

Run: ``mpiexec -n 2 python examples/keras_regression.py``. Trains on
``Dataset.from_tensors(([1.], [1.])).repeat(100).batch(10)`` and on the same data as numpy
arrays; both fits must give the same weights.
"""

import numpy as np

import hpcdist as hd


def make_model(strategy):
    hd.nn.set_random_seed(0)
    with strategy.scope():
        model = hd.nn.Sequential(
            [
                hd.nn.layers.Dense(
                    1, input_shape=(1,), kernel_regularizer=hd.nn.regularizers.L2(1e-4)
                )
            ]
        )
        model.compile(loss="mse", optimizer="sgd")
    return model


def main() -> None:
    strategy = hd.MultiWorkerMirroredStrategy()
    dataset = hd.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(10)
    from_dataset = make_model(strategy)
    history = from_dataset.fit(dataset, epochs=2, verbose=0)
    from_arrays = make_model(strategy)
    inputs, targets = np.ones((100, 1)), np.ones((100, 1))
    from_arrays.fit(inputs, targets, epochs=2, batch_size=10, verbose=0, shuffle=False)
    for a, b in zip(from_dataset.get_weights(), from_arrays.get_weights(), strict=True):
        assert np.allclose(a, b, atol=1e-6), (a, b)
    prediction = from_dataset.predict(np.array([[1.0]]))
    if strategy.extended.should_checkpoint:
        losses = np.round(history.history["loss"], 4).tolist()
        print(f"loss per epoch {losses}; f(1) = {prediction[0, 0]:.4f}")


if __name__ == "__main__":
    main()
