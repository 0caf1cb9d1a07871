"""`DatasetIterator`: what ``iter(dataset)`` returns, with its position for checkpoints.

TF saves an iterator in a checkpoint (``tf.train.Checkpoint(iterator=it)``) and a restored
iterator yields the element that followed the save. Here the state is the number of elements
taken and the epoch of every shuffle of the pipeline when the iterator was made (which
iteration's order it draws): `restore_state` sets the shuffles back to those epochs, makes the
iteration again and moves forward to the position by reading and dropping the elements before
it. Any pipeline, files included, resumes at the same element as long as it yields the same
elements for the same epochs (seeded shuffles, files in a fixed or seeded order). An iterator
that has taken elements cannot go back: restoring a position behind the current one raises
(`hpcdist.strategies`' distributed iterators follow the same rule).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

__all__ = ["DatasetIterator"]


class DatasetIterator:
    """Iterator over a dataset's elements that counts them.

    Args:
        make: Makes a fresh iteration of the dataset.
        epochs: The epoch counters of the pipeline's shuffles (`hpcdist.data.lineage`).
    """

    def __init__(
        self, make: Callable[[], Iterator[Any]], epochs: list[list[int]] | None = None
    ) -> None:
        self._make = make
        self._epochs = epochs or []
        self._started_at = [counter[0] for counter in self._epochs]
        self._source = make()
        self._position = 0

    def __iter__(self) -> DatasetIterator:
        return self

    def __next__(self) -> Any:
        element = next(self._source)
        self._position += 1
        return element

    def get_next(self) -> Any:
        """The next element (TF's ``iterator.get_next()``).

        Raises:
            StopIteration: The dataset is exhausted.
        """
        return next(self)

    @property
    def position(self) -> int:
        """Elements taken so far."""
        return self._position

    def checkpoint_state(self) -> dict[str, np.ndarray]:
        """The position and the shuffles' epochs, for `hpcdist.Checkpoint`."""
        return {
            "position": np.int64(self._position),
            "epochs": np.asarray(self._started_at, dtype=np.int64),
        }

    def restore_state(self, state: dict[str, Any]) -> None:
        """Move forward to a saved position.

        Raises:
            ValueError: The iterator is past that position (it cannot rewind), or the dataset
                ends before it.
        """
        target = int(np.asarray(state["position"]))
        epochs = [int(e) for e in np.asarray(state.get("epochs", self._started_at)).ravel()]
        if len(epochs) != len(self._epochs):
            raise ValueError(
                f"the saved iterator had {len(epochs)} shuffles, this pipeline has "
                f"{len(self._epochs)}: it is not the pipeline that was saved"
            )
        if epochs != self._started_at:
            if self._position:
                raise ValueError(
                    f"cannot move a dataset iterator that has taken {self._position} elements "
                    "to another shuffle epoch: restore into a fresh iterator (iter(dataset))"
                )
            for counter, epoch in zip(self._epochs, epochs, strict=True):
                counter[0] = epoch
            self._started_at = epochs
            self._source = self._make()
        if target < self._position:
            raise ValueError(
                f"cannot rewind a dataset iterator from element {self._position} to {target}: "
                "restore into a fresh iterator (iter(dataset))"
            )
        while self._position < target:
            try:
                next(self._source)
            except StopIteration:
                raise ValueError(
                    f"the dataset ends after {self._position} elements, before the saved "
                    f"position {target}: it is not the pipeline that was saved"
                ) from None
            self._position += 1

    def __repr__(self) -> str:
        return f"DatasetIterator(position={self._position})"
