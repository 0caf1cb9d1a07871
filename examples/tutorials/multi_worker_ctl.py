"""TF tutorial "Custom training loop with Keras and MultiWorkerMirroredStrategy".

(tutorials/distribute/multi_worker_with_ctl) A custom loop on every worker: a dataset from
``distribute_datasets_from_function`` sharded by ``InputContext``, RMSprop, per-example losses,
``epoch``/``step_in_epoch`` variables checkpointed with CheckpointManager (non-chief workers
write to a temporary directory and delete it), and a restart from ``latest_checkpoint``. Run on
two workers: ``mpiexec -n 2 python examples/tutorials/multi_worker_ctl.py``. Edits: the import
block, the dataset (download -> synthetic arrays), the cluster from the MPI launch instead of
``TF_CONFIG``, ``tf.io.gfile`` -> ``os``/``shutil`` and fewer steps (marked).
"""

# The body keeps TensorFlow's code as the tutorial writes it, so its style is not this repository's.
# ruff: noqa: B905, E501, I001, UP031, UP032
# fmt: off

import json  # noqa: F401 (TF_CONFIG)
import os
import shutil
from multiprocessing import util

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


# mnist.py
def mnist_dataset():
    # Synthetic stand-in for keras.datasets.mnist.load_data() (no downloads).
    (x_train, y_train), _ = synthetic_mnist.load_data()
    # The `x` arrays are in uint8 and have values in the range [0, 255].
    # You need to convert them to float32 with values in the range [0, 1]
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(60000)
    return train_dataset


def dataset_fn(global_batch_size, input_context):
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    dataset = mnist_dataset()
    dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    dataset = dataset.batch(batch_size)
    return dataset


def build_cnn_model():
    regularizer = keras.regularizers.L2(1e-5)
    return keras.Sequential(
        [
            keras.Input(shape=(28, 28)),
            keras.layers.Reshape(target_shape=(28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu", kernel_regularizer=regularizer),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu", kernel_regularizer=regularizer),
            keras.layers.Dense(10, kernel_regularizer=regularizer),
        ]
    )


# main.py
# No TF_CONFIG under mpiexec: the cluster is the MPI launch.
tf_config = {"cluster": cluster_resolver.MPIClusterResolver().cluster_spec().as_dict()}  # hpcdist
# TF-only begin
# tf_config = json.loads(os.environ['TF_CONFIG'])
# TF-only end
per_worker_batch_size = 64
num_workers = len(tf_config["cluster"]["worker"])
global_batch_size = per_worker_batch_size * num_workers

strategy = distribute.MultiWorkerMirroredStrategy()

with strategy.scope():
    # Define the model and optimizer inside the strategy scope.
    multi_worker_dataset = strategy.distribute_datasets_from_function(
        lambda input_context: dataset_fn(global_batch_size, input_context)
    )
    multi_worker_model = build_cnn_model()

    multi_worker_optimizer = keras.optimizers.RMSprop(learning_rate=0.001)
    train_accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")


@tf.function
def train_step(iterator):
    """Training step function."""

    def step_fn(inputs):
        """Per-Replica step function."""
        x, y = inputs
        with tf.GradientTape() as tape:
            predictions = multi_worker_model(x, training=True)
            per_example_loss = keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction=keras.losses.Reduction.NONE
            )(y, predictions)
            loss = tf.nn.compute_average_loss(per_example_loss)
            model_losses = multi_worker_model.losses
            if model_losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))

        grads = tape.gradient(loss, multi_worker_model.trainable_variables)
        multi_worker_optimizer.apply_gradients(zip(grads, multi_worker_model.trainable_variables))
        train_accuracy.update_state(y, predictions)
        return loss

    per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(distribute.ReduceOp.SUM, per_replica_losses, axis=None)


checkpoint_dir = os.path.join(util.get_temp_dir(), "ckpt")


def _is_chief(task_type, task_id, cluster_spec):
    return (
        task_type is None
        or task_type == "chief"
        or (task_type == "worker" and task_id == 0 and "chief" not in cluster_spec.as_dict())
    )


def _get_temp_dir(dirpath, task_id):
    base_dirpath = "workertemp_" + str(task_id)
    temp_dir = os.path.join(dirpath, base_dirpath)
    os.makedirs(temp_dir, exist_ok=True)  # TF: tf.io.gfile.makedirs(temp_dir)
    return temp_dir


def write_filepath(filepath, task_type, task_id, cluster_spec):
    dirpath = os.path.dirname(filepath)
    base = os.path.basename(filepath)
    if not _is_chief(task_type, task_id, cluster_spec):
        dirpath = _get_temp_dir(dirpath, task_id)
    return os.path.join(dirpath, base)


epoch = tf.Variable(initial_value=tf.constant(0, dtype=tf.dtypes.int64), name="epoch")
step_in_epoch = tf.Variable(
    initial_value=tf.constant(0, dtype=tf.dtypes.int64), name="step_in_epoch"
)
task_type, task_id = (strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id)
# Normally, you don't need to manually instantiate a `ClusterSpec`, but in this
# illustrative example you did not set `'task_type'` in `TF_CONFIG`.
cluster_spec = cluster_resolver.ClusterSpec(tf_config["cluster"])  # TF: cluster_spec = train.ClusterSpec(tf_config['cluster'])

checkpoint = train.Checkpoint(
    model=multi_worker_model, epoch=epoch, step_in_epoch=step_in_epoch
)

write_checkpoint_dir = write_filepath(checkpoint_dir, task_type, task_id, cluster_spec)
checkpoint_manager = train.CheckpointManager(
    checkpoint, directory=write_checkpoint_dir, max_to_keep=1
)

# Restoring the checkpoint
latest_checkpoint = train.latest_checkpoint(checkpoint_dir)
if latest_checkpoint:
    checkpoint.restore(latest_checkpoint)

# Resume our CTL training
num_epochs = 3
num_steps_per_epoch = 4  # the tutorial's 70 steps of 64 per worker need 60,000 images
losses = []

while epoch.numpy() < num_epochs:
    iterator = iter(multi_worker_dataset)
    total_loss = 0.0
    num_batches = 0

    while step_in_epoch.numpy() < num_steps_per_epoch:
        total_loss += train_step(iterator)
        num_batches += 1
        step_in_epoch.assign_add(1)

    train_loss = total_loss / num_batches
    losses.append(float(train_loss))
    print(
        "Epoch: %d, accuracy: %f, train_loss: %f."
        % (epoch.numpy(), train_accuracy.result(), train_loss)
    )

    train_accuracy.reset_state()

    # Once the `CheckpointManager` is set up, you're now ready to save, and remove
    # the checkpoints non-chief workers saved.
    checkpoint_manager.save()
    if not _is_chief(task_type, task_id, cluster_spec):
        shutil.rmtree(write_checkpoint_dir)  # TF: tf.io.gfile.rmtree(write_checkpoint_dir)

    epoch.assign_add(1)
    step_in_epoch.assign(0)

print("first loss {:.4f}".format(losses[0]))
print("final loss {:.4f}".format(losses[-1]))
