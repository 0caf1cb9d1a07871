"""A custom training loop with GradientTape, strategy.run and optimizer.apply_gradients.

Run: ``mpiexec -n 2 python examples/custom_training_loop.py``. The tf.distribute recipe:
per-example losses, `compute_average_loss` with the global batch size, gradients all-reduced by
the optimizer, the loss summed over replicas with `strategy.reduce`.
"""

import numpy as np

import hpcdist as hd

GLOBAL_BATCH = 64


def main() -> None:
    strategy = hd.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 8)).astype(np.float32)
    y = (x @ rng.standard_normal(8) > 0).astype(np.int64)
    dataset = hd.data.Dataset.from_tensor_slices((x, y)).shuffle(1024, seed=1).batch(GLOBAL_BATCH)

    hd.nn.set_random_seed(0)
    with strategy.scope():
        model = hd.nn.Sequential(
            [hd.nn.layers.Dense(32, activation="relu", input_shape=(8,)), hd.nn.layers.Dense(2)]
        )
        optimizer = hd.nn.optimizers.SGD(0.1, momentum=0.9)
        accuracy = hd.nn.metrics.SparseCategoricalAccuracy()
    loss_object = hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def train_step(inputs):
        features, labels = inputs
        with hd.nn.GradientTape() as tape:
            logits = model(features, training=True)
            loss = hd.nn.compute_average_loss(
                loss_object(labels, logits), global_batch_size=GLOBAL_BATCH
            )
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        accuracy.update_state(labels, logits)
        return loss

    for epoch in range(5):
        total, steps = 0.0, 0
        for batch in strategy.experimental_distribute_dataset(dataset):
            total += float(
                strategy.reduce("sum", strategy.run(train_step, args=(batch,)), axis=None)
            )
            steps += 1
        acc = accuracy.result()
        accuracy.reset_state()
        if strategy.extended.should_checkpoint:
            print(f"epoch {epoch + 1}: loss {total / steps:.4f}, accuracy {acc:.4f}")


if __name__ == "__main__":
    main()
