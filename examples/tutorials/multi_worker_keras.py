"""TF tutorial "Multi-worker training with Keras" (tutorials/distribute/multi_worker_with_keras).

MultiWorkerMirroredStrategy + Model.fit on every rank: the tutorial's mnist_setup model
(InputLayer, Reshape, Conv2D), auto-shard policy through ``tf.data.Options``, saving the model
from every worker (the chief to the real path, the others to temporary directories they
delete), loading it back, a checkpoint through CheckpointManager and latest_checkpoint, and
BackupAndRestore (per epoch and with ``save_freq``). Run on two workers:
``mpiexec -n 2 python examples/tutorials/multi_worker_keras.py``. Edits: the import block, the
dataset (download -> synthetic arrays), the cluster from the MPI launch instead of
``TF_CONFIG``, ``tf.io.gfile`` -> ``os``/``shutil``, paths under the working directory and
fewer steps (marked).
"""

# The body keeps TensorFlow's code as the tutorial writes it, so its style is not this repository's.
# ruff: noqa: E501, I001
# fmt: off

import json  # noqa: F401 (TF_CONFIG)
import os
import shutil

import numpy as np

import synthetic_mnist

# TensorFlow: import tensorflow as tf
# TensorFlow: from tensorflow import keras
# TensorFlow: distribute, train = tf.distribute, tf.train
import hpcdist as tf  # hpcdist
import hpcdist as distribute  # hpcdist
import hpcdist as train  # hpcdist
from hpcdist import cluster as cluster_resolver  # hpcdist
from hpcdist import nn as keras  # hpcdist

STEPS = 10  # the tutorial trains 70 steps per epoch on 60,000 images


# mnist_setup.py
def mnist_dataset(batch_size):
    # Synthetic stand-in for keras.datasets.mnist.load_data() (no downloads).
    (x_train, y_train), _ = synthetic_mnist.load_data()
    # The `x` arrays are in uint8 and have values in the [0, 255] range.
    # You need to convert them to float32 with values in the [0, 1] range.
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    train_dataset = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train))
        .shuffle(60000)
        .repeat()
        .batch(batch_size)
    )
    return train_dataset


def build_and_compile_cnn_model():
    model = keras.Sequential(
        [
            keras.layers.InputLayer(input_shape=(28, 28)),
            keras.layers.Reshape(target_shape=(28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=keras.optimizers.SGD(learning_rate=0.001),
        metrics=["accuracy"],
    )
    return model


# main.py
per_worker_batch_size = 64
# No TF_CONFIG under mpiexec: the cluster is the MPI launch.
tf_config = {"cluster": cluster_resolver.MPIClusterResolver().cluster_spec().as_dict()}  # hpcdist
# TF-only begin
# tf_config = json.loads(os.environ['TF_CONFIG'])
# TF-only end
num_workers = len(tf_config["cluster"]["worker"])

strategy = distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_dataset(global_batch_size)

with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = build_and_compile_cnn_model()

history = multi_worker_model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=STEPS)

# Dataset sharding: turn auto-sharding off and feed the global batch.
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.AutoShardPolicy.OFF  # TF: options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF

global_batch_size = 64
multi_worker_dataset = mnist_dataset(batch_size=64)
dataset_no_auto_shard = multi_worker_dataset.with_options(options)

# Model saving and loading.
model_path = "keras-model.keras"  # TF: model_path = '/tmp/keras-model.keras'


def _is_chief(task_type, task_id):
    # Note: there are two possible `TF_CONFIG` configurations.
    #   1) In addition to `worker` tasks, a `chief` task type is use;
    #      in this case, this function should be modified to
    #      `return task_type == 'chief'`.
    #   2) Only `worker` task type is used; in this case, worker 0 is
    #      regarded as the chief. The implementation demonstrated here
    #      is for this case.
    # For the purpose of this Colab section, the `task_type` is `None` case
    # is added because it is effectively run with only a single worker.
    return (task_type == "worker" and task_id == 0) or task_type is None


def _get_temp_dir(dirpath, task_id):
    base_dirpath = "workertemp_" + str(task_id)
    temp_dir = os.path.join(dirpath, base_dirpath)
    os.makedirs(temp_dir, exist_ok=True)  # TF: tf.io.gfile.makedirs(temp_dir)
    return temp_dir


def write_filepath(filepath, task_type, task_id):
    dirpath = os.path.dirname(filepath)
    base = os.path.basename(filepath)
    if not _is_chief(task_type, task_id):
        dirpath = _get_temp_dir(dirpath, task_id)
    return os.path.join(dirpath, base)


task_type, task_id = (strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id)
write_model_path = write_filepath(model_path, task_type, task_id)

multi_worker_model.save(write_model_path)

if not _is_chief(task_type, task_id):
    shutil.rmtree(os.path.dirname(write_model_path))  # TF: tf.io.gfile.rmtree(os.path.dirname(write_model_path))

loaded_model = keras.models.load_model(model_path)

# Now that the model is restored, and can continue with the training.
loaded_model.fit(dataset_no_auto_shard, epochs=2, steps_per_epoch=STEPS)

# Checkpoint saving and restoring.
checkpoint_dir = "ckpt"  # TF: checkpoint_dir = '/tmp/ckpt'

checkpoint = train.Checkpoint(model=multi_worker_model)
write_checkpoint_dir = write_filepath(checkpoint_dir, task_type, task_id)
checkpoint_manager = train.CheckpointManager(
    checkpoint, directory=write_checkpoint_dir, max_to_keep=1
)

checkpoint_manager.save()
if not _is_chief(task_type, task_id):
    shutil.rmtree(write_checkpoint_dir)  # TF: tf.io.gfile.rmtree(write_checkpoint_dir)

latest_checkpoint = train.latest_checkpoint(checkpoint_dir)
checkpoint.restore(latest_checkpoint)
multi_worker_model.fit(multi_worker_dataset, epochs=2, steps_per_epoch=STEPS)

# Multi-worker training with `MultiWorkerMirroredStrategy`
# and `BackupAndRestore`.
callbacks = [keras.callbacks.BackupAndRestore(backup_dir="backup")]  # TF: callbacks = [keras.callbacks.BackupAndRestore(backup_dir='/tmp/backup')]
with strategy.scope():
    multi_worker_model = build_and_compile_cnn_model()
multi_worker_model.fit(
    multi_worker_dataset, epochs=3, steps_per_epoch=STEPS, callbacks=callbacks
)

# The training state is backed up at epoch boundaries and every 30 steps.
callbacks = [keras.callbacks.BackupAndRestore(backup_dir="backup", save_freq=30)]  # TF: callbacks = [keras.callbacks.BackupAndRestore(backup_dir='/tmp/backup', save_freq=30)]
with strategy.scope():
    multi_worker_model = build_and_compile_cnn_model()
history_freq = multi_worker_model.fit(
    multi_worker_dataset, epochs=3, steps_per_epoch=STEPS, callbacks=callbacks
)

print("first loss {:.4f}".format(history.history["loss"][0]))
print("final loss {:.4f}".format(history_freq.history["loss"][-1]))
print("final accuracy {:.4f}".format(history_freq.history["accuracy"][-1]))
