"""TF tutorial "Custom training with tf.distribute.Strategy" (tutorials/distribute/custom_training).

MirroredStrategy with a custom loop on MNIST-shaped synthetic data (the tutorial's Fashion
MNIST shapes): distributed datasets, ``strategy.run``/``reduce``, per-example losses with
``Reduction.NONE``, ``compute_average_loss``, regularization losses, metrics, checkpoints every
other epoch, then a fresh model restored from ``tf.train.latest_checkpoint`` and evaluated
without the strategy, and the iterator form of the loop. One process:
``python examples/tutorials/custom_training.py``. Edits: the import block and the dataset
(download -> synthetic arrays).
"""

# The body keeps TensorFlow's code as the tutorial writes it, so its style is not this repository's.
# ruff: noqa: B905, I001, UP032
# fmt: off

import os

import numpy as np

import synthetic_mnist

# TensorFlow: import tensorflow as tf
# TensorFlow: from tensorflow import keras
# TensorFlow: distribute, train = tf.distribute, tf.train
import hpcdist as tf  # hpcdist
import hpcdist as distribute  # hpcdist
import hpcdist as train  # hpcdist
from hpcdist import nn as keras  # hpcdist

# Synthetic stand-in for tf.keras.datasets.fashion_mnist.load_data() (no downloads).
(train_images, train_labels), (test_images, test_labels) = synthetic_mnist.load_data()

# Add a dimension to the array -> new shape == (28, 28, 1)
train_images = train_images[..., None]
test_images = test_images[..., None]

# Get the images in the [0, 1] range.
train_images = train_images / np.float32(255)
test_images = test_images / np.float32(255)

# If the list of devices is not specified in
# `tf.distribute.MirroredStrategy` constructor, they will be auto-detected.
strategy = distribute.MirroredStrategy()
print("Number of devices: {}".format(strategy.num_replicas_in_sync))

BUFFER_SIZE = len(train_images)

BATCH_SIZE_PER_REPLICA = 64
GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync

EPOCHS = 10

train_dataset = (
    tf.data.Dataset.from_tensor_slices((train_images, train_labels))
    .shuffle(BUFFER_SIZE)
    .batch(GLOBAL_BATCH_SIZE)
)
test_dataset = tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(
    GLOBAL_BATCH_SIZE
)

train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
test_dist_dataset = strategy.experimental_distribute_dataset(test_dataset)


def create_model():
    regularizer = keras.regularizers.L2(1e-5)
    model = keras.Sequential(
        [
            keras.layers.Conv2D(32, 3, activation="relu", kernel_regularizer=regularizer),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, activation="relu", kernel_regularizer=regularizer),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu", kernel_regularizer=regularizer),
            keras.layers.Dense(10, kernel_regularizer=regularizer),
        ]
    )

    return model


# Create a checkpoint directory to store the checkpoints.
checkpoint_dir = "./training_checkpoints"
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")

with strategy.scope():
    # Set reduction to `NONE` so you can do the reduction yourself.
    loss_object = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=keras.losses.Reduction.NONE
    )

    def compute_loss(labels, predictions, model_losses):
        per_example_loss = loss_object(labels, predictions)
        loss = tf.nn.compute_average_loss(per_example_loss)
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        return loss


with strategy.scope():
    test_loss = keras.metrics.Mean(name="test_loss")

    train_accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
    test_accuracy = keras.metrics.SparseCategoricalAccuracy(name="test_accuracy")

# A model, an optimizer, and a checkpoint must be created under `strategy.scope`.
with strategy.scope():
    model = create_model()

    optimizer = keras.optimizers.Adam(learning_rate=0.001)

    checkpoint = train.Checkpoint(optimizer=optimizer, model=model)


def train_step(inputs):
    images, labels = inputs

    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = compute_loss(labels, predictions, model.losses)

    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))

    train_accuracy.update_state(labels, predictions)
    return loss


def test_step(inputs):
    images, labels = inputs

    predictions = model(images, training=False)
    t_loss = loss_object(labels, predictions)

    test_loss.update_state(t_loss)
    test_accuracy.update_state(labels, predictions)


# `run` replicates the provided computation and runs it
# with the distributed input.
@tf.function
def distributed_train_step(dataset_inputs):
    per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
    return strategy.reduce(distribute.ReduceOp.SUM, per_replica_losses, axis=None)


@tf.function
def distributed_test_step(dataset_inputs):
    return strategy.run(test_step, args=(dataset_inputs,))


for epoch in range(EPOCHS):
    # TRAIN LOOP
    total_loss = 0.0
    num_batches = 0
    for x in train_dist_dataset:
        total_loss += distributed_train_step(x)
        num_batches += 1
    train_loss = total_loss / num_batches

    # TEST LOOP
    for x in test_dist_dataset:
        distributed_test_step(x)

    if epoch % 2 == 0:
        checkpoint.save(checkpoint_prefix)

    template = "Epoch {}, Loss: {}, Accuracy: {}, Test Loss: {}, Test Accuracy: {}"
    print(
        template.format(
            epoch + 1,
            train_loss,
            train_accuracy.result() * 100,
            test_loss.result(),
            test_accuracy.result() * 100,
        )
    )

    test_loss.reset_state()
    train_accuracy.reset_state()
    test_accuracy.reset_state()

eval_accuracy = keras.metrics.SparseCategoricalAccuracy(name="eval_accuracy")

new_model = create_model()
new_optimizer = keras.optimizers.Adam()

test_dataset = tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(
    GLOBAL_BATCH_SIZE
)


@tf.function
def eval_step(images, labels):
    predictions = new_model(images, training=False)
    eval_accuracy(labels, predictions)


checkpoint = train.Checkpoint(optimizer=new_optimizer, model=new_model)
checkpoint.restore(train.latest_checkpoint(checkpoint_dir))

for images, labels in test_dataset:
    eval_step(images, labels)

print(
    "Accuracy after restoring the saved model without strategy: {}".format(
        eval_accuracy.result() * 100
    )
)

# Alternate ways of iterating over a dataset: an iterator, a fixed number of steps.
for _ in range(EPOCHS):
    total_loss = 0.0
    num_batches = 0
    train_iter = iter(train_dist_dataset)

    for _ in range(5):
        total_loss += distributed_train_step(next(train_iter))
        num_batches += 1
    average_train_loss = total_loss / num_batches

    template = "Epoch {}, Loss: {:.2f}, Accuracy: {:.2f}"
    print(template.format(epoch + 1, average_train_loss, train_accuracy.result() * 100))
    train_accuracy.reset_state()

print("final accuracy {:.4f}".format(float(eval_accuracy.result())))
print("final loss {:.4f}".format(float(train_loss)))
