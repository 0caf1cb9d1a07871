"""TF tutorial "Distributed training with Keras" (tutorials/distribute/keras), ported.

MirroredStrategy + Model.fit on MNIST-shaped synthetic data: Conv2D/MaxPooling2D model,
TensorBoard, ModelCheckpoint, LearningRateScheduler and a custom callback, restore the weights,
evaluate, save the model and load it back with and without the strategy. One process:
``python examples/tutorials/distributed_keras.py``. Edits: the import block, the dataset
(TFDS download -> synthetic arrays), sizes for a few hundred examples (marked).
"""

# The body keeps TensorFlow's code as the tutorial writes it, so its style is not this repository's.
# ruff: noqa: D101, D102, I001, UP032
# fmt: off

import os

import numpy as np

import synthetic_mnist

# TensorFlow: import tensorflow as tf
# TensorFlow: from tensorflow import keras
# TensorFlow: distribute = tf.distribute
import hpcdist as tf  # hpcdist
import hpcdist as distribute  # hpcdist
from hpcdist import nn as keras  # hpcdist

# Synthetic stand-in for tfds.load(name='mnist', with_info=True, as_supervised=True).
(x_train, y_train), (x_test, y_test) = synthetic_mnist.load_data()
mnist_train = tf.data.Dataset.from_tensor_slices((x_train[..., None], y_train.astype(np.int64)))
mnist_test = tf.data.Dataset.from_tensor_slices((x_test[..., None], y_test.astype(np.int64)))

strategy = distribute.MirroredStrategy()
print("Number of devices: {}".format(strategy.num_replicas_in_sync))

num_train_examples = len(x_train)  # TFDS: info.splits['train'].num_examples
num_test_examples = len(x_test)

BUFFER_SIZE = 10000
BATCH_SIZE_PER_REPLICA = 64
BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync


def scale(image, label):
    image = tf.cast(image, tf.float32)
    image /= 255
    return image, label


train_dataset = mnist_train.map(scale).cache().shuffle(BUFFER_SIZE).batch(BATCH_SIZE)
eval_dataset = mnist_test.map(scale).batch(BATCH_SIZE)

with strategy.scope():
    model = keras.Sequential(
        [
            keras.layers.Conv2D(32, 3, activation="relu", input_shape=(28, 28, 1)),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=keras.optimizers.Adam(),
        metrics=["accuracy"],
    )

checkpoint_dir = "./training_checkpoints"
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt_{epoch}.weights.h5")


def decay(epoch):
    if epoch < 3:
        return 1e-3
    elif epoch >= 3 and epoch < 7:
        return 1e-4
    else:
        return 1e-5


class PrintLR(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(
            "\nLearning rate for epoch {} is {}".format(
                epoch + 1, model.optimizer.learning_rate.numpy()
            )
        )


callbacks = [
    keras.callbacks.TensorBoard(log_dir="./logs"),
    keras.callbacks.ModelCheckpoint(filepath=checkpoint_prefix, save_weights_only=True),
    keras.callbacks.LearningRateScheduler(decay),
    PrintLR(),
]

EPOCHS = 12

model.fit(train_dataset, epochs=EPOCHS, callbacks=callbacks)

# Keras 3 writes "ckpt_{epoch}.weights.h5" files, which tf.train.latest_checkpoint does not list.
model.load_weights(os.path.join(checkpoint_dir, "ckpt_{}.weights.h5".format(EPOCHS)))

eval_loss, eval_acc = model.evaluate(eval_dataset)
print("Eval loss: {}, Eval accuracy: {}".format(eval_loss, eval_acc))

path = "my_model.keras"
model.save(path)

unreplicated_model = keras.models.load_model(path)
unreplicated_model.compile(
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=keras.optimizers.Adam(),
    metrics=["accuracy"],
)
eval_loss, eval_acc = unreplicated_model.evaluate(eval_dataset)
print("Eval loss: {}, Eval Accuracy: {}".format(eval_loss, eval_acc))

with strategy.scope():
    replicated_model = keras.models.load_model(path)
    replicated_model.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=keras.optimizers.Adam(),
        metrics=["accuracy"],
    )
    eval_loss, eval_acc = replicated_model.evaluate(eval_dataset)
    print("Eval loss: {}, Eval Accuracy: {}".format(eval_loss, eval_acc))

print("final accuracy {:.4f}".format(eval_acc))
