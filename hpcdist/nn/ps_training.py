"""`Model.fit` under `ParameterServerStrategy`: steps scheduled on asynchronous workers.

Each worker reads its own endless stream of batches (its shard of the data, reshuffled every
pass with its own seed); the coordinator schedules ``steps_per_epoch`` training steps per epoch
with `ClusterCoordinator` and joins at the end of each epoch. A step runs on one worker: the
forward and backward pass there, the optimizer's update pushed to the parameter servers as
deltas with ``Accumulate`` (asynchronous SGD), the metrics accumulated on the ps the same way.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

from hpcdist.data.dataset import INFINITE, Dataset
from hpcdist.nn.batches import with_batch_rows
from hpcdist.strategies.ps.coordinator import ClusterCoordinator

__all__ = ["ParameterServerFit"]


def _worker_batches(
    x: Any, y: Any, w: Any, batch_size: int, shuffle: bool, seed: int, ctx: Any
) -> Dataset:
    """This worker's endless batches ``(x, y, rows)``, or ``(x, y, rows, w)`` with weights."""
    n, i = ctx.num_input_pipelines, ctx.input_pipeline_id
    if isinstance(x, Dataset):
        return with_batch_rows(x.shard(n, i).repeat(), y)
    xs = np.asarray(x)[i::n]
    ys = None if y is None else np.asarray(y)[i::n]
    ws = None if w is None else np.asarray(w)[i::n]
    if len(xs) == 0:
        raise ValueError(f"worker {i} of {n} has no data: {len(np.asarray(x))} examples")

    def make() -> Iterator[Any]:
        rng = np.random.default_rng(seed + 7919 * i)
        while True:
            order = rng.permutation(len(xs)) if shuffle else np.arange(len(xs))
            for lo in range(0, len(xs), batch_size):
                idx = order[lo : lo + batch_size]
                batch = (xs[idx], None if ys is None else ys[idx], np.full(len(idx), len(idx)))
                yield batch if ws is None else (*batch, ws[idx])

    return Dataset(make, INFINITE)


def _train_step(model: Any, iterator: Any) -> None:
    x, y, rows, *w = next(iterator)  # (x, y, w) datasets and sample_weight carry weights
    model.distribute_strategy.run(model.train_step, args=(x, y, rows, *w))


class ParameterServerFit:
    """The parameter-server half of `Model.fit` (built once per ``fit`` call).

    Args:
        model: A compiled model created under a `ParameterServerStrategy`.
        x: Inputs (numpy) or a `hpcdist.data.Dataset` of batches ``(x, y)`` or ``(x, y, w)``.
        y: Targets for numpy inputs.
        sample_weight: One weight per example of numpy inputs, or None.
        batch_size: Batch size of one step on one worker (default 32).
        shuffle: Reshuffle each worker's data every pass.
        seed: Base seed of the shuffles.
        steps_per_epoch: Required: the data streams are endless.

    Raises:
        ValueError: ``steps_per_epoch`` is missing.
    """

    def __init__(
        self,
        model: Any,
        x: Any,
        y: Any,
        batch_size: int | None,
        shuffle: bool,
        seed: int,
        steps_per_epoch: int | None,
        sample_weight: Any = None,
    ) -> None:
        if steps_per_epoch is None:
            raise ValueError(
                "fit under ParameterServerStrategy needs steps_per_epoch (as in TF): every "
                "worker reads its own endless stream of batches"
            )
        self.model = model
        self.steps = int(steps_per_epoch)
        self.coordinator = ClusterCoordinator(model.distribute_strategy)
        if not model.built:  # variables are created here, on the coordinator
            first = next(iter(x)) if isinstance(x, Dataset) else np.asarray(x)[:1]
            sample = first[0] if isinstance(first, tuple) else first
            with model.strategy_scope():
                model(sample, training=False)
        with model.strategy_scope():
            model.optimizer.build(model.trainable_variables)
        if sample_weight is not None and isinstance(x, Dataset):
            raise ValueError("sample_weight must be None when x is a Dataset (yield (x, y, w))")
        dataset_fn = functools.partial(
            _worker_batches, x, y, sample_weight, batch_size or 32, shuffle, seed
        )
        self.iterator = iter(self.coordinator.create_per_worker_dataset(dataset_fn))

    def run_epoch(self, on_batch_end: Any) -> None:
        """Schedule one epoch of steps and wait for them (errors raised here)."""
        # A fresh function per epoch: attributes changed between epochs (e.g. a learning rate
        # set by a callback) reach the workers.
        step_fn = functools.partial(_train_step, self.model)
        for step in range(self.steps):
            self.coordinator.schedule(step_fn, args=(self.iterator,))
            on_batch_end(step)
        self.coordinator.join()
