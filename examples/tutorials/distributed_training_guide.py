"""TF guide "Distributed training with TensorFlow" (guide/distributed_training): its snippets.

Strategy constructors, the default strategy, Model.fit and a custom loop under
MirroredStrategy, on the guide's own toy data (``([1.], [1.])`` repeated). One process:
``python examples/tutorials/distributed_training_guide.py``. Edits: the import block only.
"""

# The body keeps TensorFlow's code as the tutorial writes it, so its style is not this repository's.
# ruff: noqa: B905, I001, UP032
# fmt: off

import numpy as np

# TensorFlow: import tensorflow as tf
# TensorFlow: from tensorflow import keras
# TensorFlow: distribute = tf.distribute
import hpcdist as tf  # hpcdist
import hpcdist as distribute  # hpcdist
from hpcdist import nn as keras  # hpcdist

# Types of strategies.
mirrored_strategy = distribute.MirroredStrategy()
mirrored_strategy = distribute.MirroredStrategy(
    cross_device_ops=distribute.HierarchicalCopyAllReduce()
)
strategy = distribute.MultiWorkerMirroredStrategy()
strategy = distribute.OneDeviceStrategy(device="/cpu:0")

# The default strategy.
default_strategy = distribute.get_strategy()
# In optimizer or other library code
# Get currently active strategy
strategy = distribute.get_strategy()
strategy.reduce("SUM", 1.0, axis=None)  # reduce some values

if tf.config.list_physical_devices("GPU"):
    strategy = distribute.MirroredStrategy()
else:  # Use the Default Strategy
    strategy = distribute.get_strategy()

with strategy.scope():
    # Do something interesting
    print(tf.Variable(1.0))

# Use tf.distribute.Strategy with Keras Model.fit.
mirrored_strategy = distribute.MirroredStrategy()

with mirrored_strategy.scope():
    model = keras.Sequential(
        [
            keras.layers.Dense(
                1, input_shape=(1,), kernel_regularizer=keras.regularizers.L2(1e-4)
            )
        ]
    )
    model.compile(loss="mse", optimizer="sgd")

dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(10)
history = model.fit(dataset, epochs=2)
model.evaluate(dataset)

inputs, targets = np.ones((100, 1)), np.ones((100, 1))
model.fit(inputs, targets, epochs=2, batch_size=10)

# Compute a global batch size using a number of replicas.
BATCH_SIZE_PER_REPLICA = 5
global_batch_size = BATCH_SIZE_PER_REPLICA * mirrored_strategy.num_replicas_in_sync
dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100)
dataset = dataset.batch(global_batch_size)

LEARNING_RATES_BY_BATCH_SIZE = {5: 0.1, 10: 0.15, 20: 0.175}
learning_rate = LEARNING_RATES_BY_BATCH_SIZE[global_batch_size]

# Use tf.distribute.Strategy with custom training loops.
with mirrored_strategy.scope():
    model = keras.Sequential(
        [
            keras.layers.Dense(
                1, input_shape=(1,), kernel_regularizer=keras.regularizers.L2(1e-4)
            )
        ]
    )
    optimizer = keras.optimizers.SGD()

dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(1000).batch(global_batch_size)
dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)

# Sets `reduction=NONE` to leave it to tf.nn.compute_average_loss() below.
loss_object = keras.losses.BinaryCrossentropy(
    from_logits=True, reduction=keras.losses.Reduction.NONE
)


def train_step(inputs):
    features, labels = inputs

    with tf.GradientTape() as tape:
        predictions = model(features, training=True)
        per_example_loss = loss_object(labels, predictions)
        loss = tf.nn.compute_average_loss(per_example_loss)
        model_losses = model.losses
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))

    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss


@tf.function
def distributed_train_step(dist_inputs):
    per_replica_losses = mirrored_strategy.run(train_step, args=(dist_inputs,))
    return mirrored_strategy.reduce(distribute.ReduceOp.SUM, per_replica_losses, axis=None)


losses = []
for dist_inputs in dist_dataset:
    losses.append(float(distributed_train_step(dist_inputs)))

iterator = iter(dist_dataset)
for _ in range(10):
    print(distributed_train_step(next(iterator)))

print("fit loss {:.4f} -> {:.4f}".format(history.history["loss"][0], history.history["loss"][-1]))
print("first loss {:.4f}".format(losses[0]))
print("final loss {:.4f}".format(losses[-1]))
