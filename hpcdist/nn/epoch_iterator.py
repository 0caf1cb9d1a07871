"""`EpochIterator`: the training batches of each epoch of `Model.fit`.

Keras 3 splits ``fit`` by topic (``keras/src/trainers/epoch_iterator.py``): data adapters turn
arrays and datasets into batches, the epoch iterator walks them epoch by epoch, the trainer
only loops. Here `hpcdist.nn.batches` is the adapter (global batches that carry their row
counts), this module is the walk for strategies that run every step on every replica, and
`Model.fit` is the loop. Under a `ParameterServerStrategy` the walk is different (each worker
reads its own endless stream): `hpcdist.nn.ps_training.ParameterServerFit`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from hpcdist.data.dataset import Dataset
from hpcdist.nn.batches import array_batches

__all__ = ["EpochIterator", "steps_per_epoch_of"]


def steps_per_epoch_of(x: Any, batch_size: int | None, steps_per_epoch: int | None) -> int | None:
    """The steps of one epoch, as callbacks see them in ``params["steps"]``.

    ``steps_per_epoch`` when given; for arrays, the batches of ``batch_size`` (default 32)
    that cover them; for a Dataset, its cardinality when known; otherwise None.
    """
    if steps_per_epoch is not None:
        return steps_per_epoch
    if not isinstance(x, Dataset):
        return -(-len(np.asarray(x)) // (batch_size or 32))
    return x.cardinality() if x.cardinality() >= 0 else None


class EpochIterator:
    """The distributed batches of each training epoch (one per ``fit`` call).

    Without ``steps_per_epoch`` each epoch reads the input once: arrays are reshuffled with
    the seed ``seed + epoch`` (the same permutation on every rank), a Dataset is iterated
    again. With ``steps_per_epoch`` the input is read continuously across epochs (repeated,
    shuffled once with ``seed``), each epoch taking the next ``steps_per_epoch`` batches.

    Args:
        strategy: The model's strategy (distributes the global batches).
        x: Inputs (numpy) or a `hpcdist.data.Dataset` of global batches.
        y: Targets when ``x`` is an array.
        batch_size: Global batch size for arrays (default 32).
        shuffle: Shuffle arrays.
        seed: Base seed of the shuffles.
        steps_per_epoch: Steps per epoch, or None for one pass over the input.
        sample_weight: One weight per example of array inputs, or None.
    """

    def __init__(
        self,
        strategy: Any,
        x: Any,
        y: Any,
        batch_size: int | None,
        shuffle: bool,
        seed: int,
        steps_per_epoch: int | None,
        sample_weight: Any = None,
    ) -> None:
        self.strategy = strategy
        self.steps_per_epoch = steps_per_epoch
        self._data = (x, y, batch_size, shuffle, sample_weight)
        self._seed = seed
        self._continuous: Iterator[Any] | None = None
        if steps_per_epoch is not None:
            self._continuous = iter(self._distributed(seed, repeat=True))

    def _distributed(self, seed: int, repeat: bool = False) -> Any:
        x, y, batch_size, shuffle, sample_weight = self._data
        batches = array_batches(x, y, batch_size, shuffle, seed, sample_weight)
        return self.strategy.experimental_distribute_dataset(
            batches.repeat() if repeat else batches
        )

    def enumerate_epoch(self, epoch: int) -> Iterator[tuple[int, Any]]:
        """``(step, batch)`` of epoch ``epoch``, until ``steps_per_epoch`` or the input ends.

        A batch is ``(x, y, global_rows)`` or ``(x, y, global_rows, w)`` as `Model.train_step`
        takes it (per replica values under a multi-replica strategy).
        """
        if self._continuous is not None:
            iterator = self._continuous
        else:
            iterator = iter(self._distributed(self._seed + epoch))
        step = 0
        while self.steps_per_epoch is None or step < self.steps_per_epoch:
            try:
                batch = next(iterator)
            except StopIteration:
                return
            yield step, batch
            step += 1
