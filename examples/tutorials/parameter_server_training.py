"""TF tutorial "Parameter server training with ParameterServerStrategy".

(tutorials/distribute/parameter_server_training) Model.fit with ``steps_per_execution`` and
callbacks, then the custom loop: a sharded embedding (MinSizePartitioner), a functional model
with a dict input, ``step_fn`` scheduled with ClusterCoordinator on a per-worker dataset,
accuracy per epoch, a fetched loss and an evaluation. Run as one coordinator, two ps and one
worker: ``HPCDIST_NUM_PS=2 mpiexec -n 4 python examples/tutorials/parameter_server_training.py``.
Edits: the import block; the in-process gRPC cluster (TF-only) replaced by the MPI launch;
the
``.keras`` suffix Keras 3 requires on ModelCheckpoint's path; Keras 3 optimizers (no
``optimizers.legacy``).
"""

# The body keeps TensorFlow's code as the tutorial writes it, so its style is not this repository's.
# ruff: noqa: B905, D102, E501, I001, UP031, UP032
# fmt: off

import os
import random
import tempfile

# TensorFlow: import tensorflow as tf
# TensorFlow: from tensorflow import keras
# TensorFlow: distribute, coordinator = tf.distribute, tf.distribute.coordinator
# TensorFlow: experimental = tf.distribute.experimental
import hpcdist as tf  # hpcdist
import hpcdist as coordinator  # hpcdist
import hpcdist as distribute  # hpcdist
import hpcdist as experimental  # hpcdist
from hpcdist import nn as keras  # hpcdist

random.seed(0)  # the same examples in both copies

# TF-only begin
# import multiprocessing
# import socket
#
#
# def pick_unused_port():
#     with socket.socket() as s:
#         s.bind(("localhost", 0))
#         return s.getsockname()[1]
#
#
# def create_in_process_cluster(num_workers, num_ps):
#     """Creates and starts local servers and returns the cluster_resolver."""
#     worker_ports = [pick_unused_port() for _ in range(num_workers)]
#     ps_ports = [pick_unused_port() for _ in range(num_ps)]
#
#     cluster_dict = {}
#     cluster_dict["worker"] = ["localhost:%s" % port for port in worker_ports]
#     if num_ps > 0:
#         cluster_dict["ps"] = ["localhost:%s" % port for port in ps_ports]
#
#     cluster_spec = tf.train.ClusterSpec(cluster_dict)
#
#     # Workers need some inter_ops threads to work properly.
#     worker_config = tf.compat.v1.ConfigProto()
#     if multiprocessing.cpu_count() < num_workers + 1:
#         worker_config.inter_op_parallelism_threads = num_workers + 1
#
#     for i in range(num_workers):
#         tf.distribute.Server(
#             cluster_spec, job_name="worker", task_index=i, config=worker_config, protocol="grpc")
#
#     for i in range(num_ps):
#         tf.distribute.Server(cluster_spec, job_name="ps", task_index=i, protocol="grpc")
#
#     cluster_resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
#         cluster_spec, rpc_layer="grpc")
#     return cluster_resolver
#
#
# NUM_WORKERS = 1
# NUM_PS = 2
# cluster_resolver = create_in_process_cluster(NUM_WORKERS, NUM_PS)
# TF-only end
# No in-process gRPC servers: the ps and worker tasks are the other MPI ranks.
NUM_PS = int(os.environ["HPCDIST_NUM_PS"])  # hpcdist
cluster_resolver = None  # hpcdist

variable_partitioner = experimental.partitioners.MinSizePartitioner(
    min_shard_bytes=(256 << 10), max_shards=NUM_PS
)

strategy = distribute.ParameterServerStrategy(
    cluster_resolver, variable_partitioner=variable_partitioner
)

# Training with Model.fit
global_batch_size = 64

x = tf.random.uniform((10, 10))
# The tutorial's (10,) targets fail against Dense(10) under Keras 3 (TF 2.21 too): (10, 1).
y = tf.random.uniform((10, 1))

dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(10).repeat()
dataset = dataset.batch(global_batch_size)
dataset = dataset.prefetch(2)

with strategy.scope():
    model = keras.models.Sequential([keras.layers.Dense(10)])

    model.compile(keras.optimizers.SGD(), loss="mse", steps_per_execution=10)

working_dir = tempfile.mkdtemp()  # TF: working_dir = "/tmp/my_working_dir"
log_dir = os.path.join(working_dir, "log")
ckpt_filepath = os.path.join(working_dir, "ckpt.keras")
backup_dir = os.path.join(working_dir, "backup")

callbacks = [
    keras.callbacks.ModelCheckpoint(filepath=ckpt_filepath),
    keras.callbacks.BackupAndRestore(backup_dir=backup_dir),
]

history = model.fit(dataset, epochs=5, steps_per_epoch=20, callbacks=callbacks)

# Training with a custom training loop
feature_vocab = ["avenger", "ironman", "batman", "hulk", "spiderman", "kingkong", "wonder_woman"]
label_vocab = ["yes", "no"]

with strategy.scope():
    feature_lookup_layer = keras.layers.StringLookup(vocabulary=feature_vocab, mask_token=None)
    label_lookup_layer = keras.layers.StringLookup(
        vocabulary=label_vocab, num_oov_indices=0, mask_token=None
    )

    raw_feature_input = keras.layers.Input(shape=(3,), dtype=tf.string, name="features")
    feature_id_input = feature_lookup_layer(raw_feature_input)
    feature_preprocess_stage = keras.Model({"features": raw_feature_input}, feature_id_input)

    raw_label_input = keras.layers.Input(shape=(1,), dtype=tf.string, name="label")
    label_id_input = label_lookup_layer(raw_label_input)

    label_preprocess_stage = keras.Model({"label": raw_label_input}, label_id_input)


def feature_and_label_gen(num_examples=200):
    examples = {"features": [], "label": []}
    for _ in range(num_examples):
        features = random.sample(feature_vocab, 3)
        label = ["yes"] if "avenger" in features else ["no"]
        examples["features"].append(features)
        examples["label"].append(label)
    return examples


examples = feature_and_label_gen()


# Keras 3 (TF 2.21 too) rejects an unbatched (3,) example for the stage's (None, 3) input: the
# stages map batches, after `batch` (the tutorial maps examples before `shuffle`).
def dataset_fn(_):
    raw_dataset = tf.data.Dataset.from_tensor_slices(examples)

    train_dataset = (
        raw_dataset.shuffle(200)
        .batch(32)
        .map(
            lambda x: (
                {"features": feature_preprocess_stage(x["features"])},
                label_preprocess_stage(x["label"]),
            )
        )
        .repeat()
    )
    return train_dataset


class ReduceMean(keras.layers.Layer):
    """``tf.reduce_mean(x, axis=1)`` as a layer."""

    def call(self, inputs):
        return tf.reduce_mean(inputs, axis=1)


# These variables created under the `Strategy.scope` will be placed on parameter
# servers in a round-robin fashion.
with strategy.scope():
    # Create the model. The input needs to be compatible with Keras processing layers.
    model_input = keras.layers.Input(shape=(3,), dtype=tf.int64, name="model_input")

    emb_layer = keras.layers.Embedding(input_dim=len(feature_vocab) + 1, output_dim=16384)
    # Keras 3 (TF 2.21 too) rejects tf.reduce_mean on a symbolic input: the mean is a layer.
    emb_output = ReduceMean()(emb_layer(model_input))
    dense_output = keras.layers.Dense(
        units=1, activation="sigmoid", kernel_regularizer=keras.regularizers.L2(1e-4)
    )(emb_output)
    model = keras.Model({"features": model_input}, dense_output)

    optimizer = keras.optimizers.RMSprop(learning_rate=0.1)
    accuracy = keras.metrics.Accuracy()

# The asserts are Keras 2's: Keras 3 (TF 2.21) and hpcdist list the table as one variable; the shards
# are its `variables` in hpcdist.
shards = emb_layer.weights[0].variables  # hpcdist
assert len(shards) == 2  # TF: assert len(emb_layer.weights) == 2
assert shards[0].shape == (4, 16384)  # TF: assert emb_layer.weights[0].shape == (4, 16384)
assert shards[1].shape == (4, 16384)  # TF: assert emb_layer.weights[1].shape == (4, 16384)

# Scheduled functions run on workers, where hpcdist creates no variables: build the slots here.
optimizer.build(model.trainable_variables)  # hpcdist


@tf.function
def step_fn(iterator):
    def replica_fn(batch_data, labels):
        with tf.GradientTape() as tape:
            pred = model(batch_data, training=True)
            per_example_loss = keras.losses.BinaryCrossentropy(
                reduction=keras.losses.Reduction.NONE
            )(labels, pred)
            loss = tf.nn.compute_average_loss(per_example_loss)
            model_losses = model.losses
            if model_losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        gradients = tape.gradient(loss, model.trainable_variables)

        optimizer.apply_gradients(zip(gradients, model.trainable_variables))

        actual_pred = tf.cast(tf.greater(pred, 0.5), tf.int64)
        accuracy.update_state(labels, actual_pred)
        return loss

    batch_data, labels = next(iterator)
    losses = strategy.run(replica_fn, args=(batch_data, labels))
    return strategy.reduce(distribute.ReduceOp.SUM, losses, axis=None)


coordinator = coordinator.ClusterCoordinator(strategy)


@tf.function
def per_worker_dataset_fn():
    return strategy.distribute_datasets_from_function(dataset_fn)


per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
per_worker_iterator = iter(per_worker_dataset)

num_epochs = 4
steps_per_epoch = 5
for i in range(num_epochs):
    accuracy.reset_state()
    for _ in range(steps_per_epoch):
        coordinator.schedule(step_fn, args=(per_worker_iterator,))
    # Wait at epoch boundaries.
    coordinator.join()
    print("Finished epoch %d, accuracy is %f." % (i, accuracy.result().numpy()))

loss = coordinator.schedule(step_fn, args=(per_worker_iterator,))
print("Final loss is %f" % loss.fetch())

eval_dataset = (
    tf.data.Dataset.from_tensor_slices(feature_and_label_gen(num_examples=16))
    .batch(8)
    .map(
        lambda x: (
            {"features": feature_preprocess_stage(x["features"])},
            label_preprocess_stage(x["label"]),
        )
    )
)

eval_accuracy = keras.metrics.Accuracy()

for batch_data, labels in eval_dataset:
    pred = model(batch_data, training=False)
    actual_pred = tf.cast(tf.greater(pred, 0.5), tf.int64)
    eval_accuracy.update_state(labels, actual_pred)

print("Evaluation accuracy: %f" % eval_accuracy.result())
print("fit loss {:.4f} -> {:.4f}".format(history.history["loss"][0], history.history["loss"][-1]))
print("final accuracy {:.4f}".format(float(accuracy.result())))
