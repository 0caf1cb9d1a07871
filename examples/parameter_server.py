"""Parameter-server training: a coordinator, ps ranks and asynchronous workers.

Run: ``mpiexec -n 5 python examples/parameter_server.py`` (rank 0 coordinates, ranks 1-2 are
parameter servers, ranks 3-4 workers; ``HPCDIST_NUM_PS`` sets the number of ps ranks).

The flow of TF's parameter-server tutorial: a ``dataset_fn`` built on every worker, a model whose
embedding table is sharded across the ps ranks (only the rows a batch touches move), ``step_fn``
scheduled on the workers with `ClusterCoordinator`, accuracy accumulated on the ps, a final loss
fetched; then the same model trained with ``Model.fit`` and a checkpoint written and restored.
"""

import os
import sys
import tempfile

import numpy as np

import hpcdist as hd

FEATURES = ["avenger", "ironman", "batman", "hulk", "spiderman", "kingkong", "wonder_woman"]
EMBEDDING_DIM = 64


def make_examples(num_examples: int = 200, seed: int = 0):
    """Three distinct heroes per example; the label says whether "avenger" is among them."""
    rng = np.random.default_rng(seed)
    ids = np.stack([rng.choice(len(FEATURES), 3, replace=False) for _ in range(num_examples)])
    labels = (ids == FEATURES.index("avenger")).any(axis=1).astype(np.float32)[:, None]
    return ids.astype(np.int64), labels


def dataset_fn(input_context):
    ids, labels = make_examples()
    batch = input_context.get_per_replica_batch_size(32)
    return (
        hd.data.Dataset.from_tensor_slices((ids, labels))
        .shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        .shuffle(200, seed=input_context.input_pipeline_id)
        .batch(batch)
        .repeat()
    )


class HeroModel(hd.nn.Model):
    """The mean embedding of the three heroes, then a logistic unit."""

    def __init__(self):
        super().__init__()
        self.embedding = hd.nn.layers.Embedding(len(FEATURES), EMBEDDING_DIM)
        self.dense = hd.nn.layers.Dense(
            1, activation="sigmoid", kernel_regularizer=hd.nn.regularizers.L2(1e-4)
        )

    def call(self, inputs, training=None):
        """Forward pass."""
        return self.dense(hd.nn.ops.reduce_mean(self.embedding(inputs), axis=1))


def cluster_resolver():
    """``HPCDIST_NUM_PS`` ps ranks if set, else about half of the ranks after the coordinator."""
    from mpi4py import MPI

    size = MPI.COMM_WORLD.Get_size()
    num_ps = hd.settings.get_settings().num_ps or max(1, (size - 1) // 2)
    jobs = {"chief": 1, "ps": num_ps, "worker": size - 1 - num_ps}
    return hd.cluster.resolve(jobs=jobs), num_ps


def main() -> None:
    resolver, num_ps = cluster_resolver()
    strategy = hd.ParameterServerStrategy(
        resolver, variable_partitioner=hd.partitioners.FixedShardsPartitioner(num_shards=num_ps)
    )
    # Only the coordinator gets here; ps and worker ranks serve until it finishes.
    hd.nn.set_random_seed(0)
    with strategy.scope():
        model = HeroModel()
        model.build((None, 3))
        optimizer = hd.nn.optimizers.RMSprop(learning_rate=0.02)
        optimizer.build(model.trainable_variables)
        accuracy = hd.nn.metrics.Accuracy()
    table = model.embedding.embeddings
    shards = len(table.variables) if isinstance(table, hd.ShardedVariable) else 1
    print(f"embedding table {table.shape} in {shards} shards on the ps ranks")

    loss_object = hd.nn.losses.BinaryCrossentropy(reduction="none")

    def step_fn(iterator):
        def replica_fn(batch_data, labels):
            with hd.nn.GradientTape() as tape:
                pred = model(batch_data, training=True)
                loss = hd.nn.compute_average_loss(loss_object(labels, pred))
                if model.losses:
                    loss = loss + hd.nn.scale_regularization_loss(sum(model.losses))
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
            accuracy.update_state(labels, (pred.numpy() > 0.5).astype(np.float32))
            return loss

        batch_data, labels = next(iterator)
        losses = strategy.run(replica_fn, args=(batch_data, labels))
        return strategy.reduce(hd.ReduceOp.SUM, losses, axis=None)

    coordinator = hd.ClusterCoordinator(strategy)

    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
    per_worker_iterator = iter(per_worker_dataset)

    for epoch in range(4):
        accuracy.reset_state()
        for _ in range(5):
            coordinator.schedule(step_fn, args=(per_worker_iterator,))
        coordinator.join()
        print(f"Finished epoch {epoch}, accuracy is {accuracy.result():.3f}.")
    loss = coordinator.schedule(step_fn, args=(per_worker_iterator,))
    final_loss = float(loss.fetch())
    print(f"Final loss is {final_loss:.4f}")

    # The same model with Model.fit: steps scheduled on the workers.
    ids, labels = make_examples(400, seed=1)
    with strategy.scope():
        fit_model = HeroModel()
        fit_model.compile(
            optimizer=hd.nn.optimizers.RMSprop(learning_rate=0.05),
            loss="binary_crossentropy",
            metrics=[hd.nn.metrics.BinaryAccuracy()],
        )
    history = fit_model.fit(ids, labels, batch_size=32, epochs=3, steps_per_epoch=10, verbose=0)
    fit_acc = history.history["binary_accuracy"][-1]
    print(f"fit: 3 epochs of 10 steps, last epoch accuracy {fit_acc:.3f}")

    # Checkpoint the ps-hosted (and sharded) variables, change them, restore them.
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = hd.Checkpoint(model=model, optimizer=optimizer)
        path = ckpt.save(os.path.join(tmp, "ckpt"))
        before = table.numpy()
        table.assign(np.zeros(table.shape, table.dtype))
        ckpt.restore(path)
        restored = np.array_equal(table.numpy(), before)
    print(f"checkpoint restore of the sharded table: {'ok' if restored else 'MISMATCH'}")
    if not restored or not np.isfinite(final_loss):
        sys.exit(1)


if __name__ == "__main__":
    main()
