"""A tour of MultiWorkerMirroredStrategy: a variable, a distributed dataset, run and reduce.

Run: ``mpiexec -n 2 python examples/strategy_tour.py`` (any number of ranks, or plain python).
"""

import numpy as np

import hpcdist as hd


def main() -> None:
    strategy = hd.MultiWorkerMirroredStrategy()  # one replica per rank
    x = np.random.default_rng(0).standard_normal((1000, 4))
    with strategy.scope():
        w = strategy.Variable(np.zeros(4), aggregation=hd.VariableAggregation.MEAN)
    dataset = hd.data.Dataset.from_tensor_slices(x).shuffle(1000, seed=0).batch(64)

    def step(batch):
        w.assign_add(batch.mean(axis=0))  # averaged over all replicas
        return hd.nn.compute_average_loss(batch.sum(axis=1))

    steps = 0
    for batch in strategy.experimental_distribute_dataset(dataset):
        loss = strategy.reduce("sum", strategy.run(step, args=(batch,)), axis=None)
        steps += 1
    if strategy.extended.should_checkpoint:
        replicas = strategy.num_replicas_in_sync
        print(
            f"{steps} steps on {replicas} replica(s); last loss {float(loss):.4f}; "
            f"w = {np.round(w.numpy(), 4).tolist()}"
        )


if __name__ == "__main__":
    main()
