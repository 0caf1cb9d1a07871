"""Distributed input: global batches split across replicas, all workers stopping together."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.data.nest import flatten, map_structure
from hpcdist.data.options import AutoShardPolicy, InputContext, InputOptions
from hpcdist.strategies.values import PerReplica
from hpcdist.utils.split import balanced_bounds

if TYPE_CHECKING:
    from hpcdist.strategies.strategy import Strategy

__all__ = ["DatasetsFromFunction", "DistributedDataset", "DistributedIterator", "Optional"]


def balanced_split(rows: int, parts: int) -> list[tuple[int, int]]:
    """Row ranges of ``parts`` balanced pieces: 7 over 3 -> (0, 3), (3, 5), (5, 7)."""
    return balanced_bounds(rows, parts)


class Optional:
    """The result of `DistributedIterator.get_next_as_optional`."""

    def __init__(self, value: Any = None, has_value: bool = False) -> None:
        self._value, self._has_value = value, has_value

    def has_value(self) -> bool:
        """Whether a value is present."""
        return self._has_value

    def get_value(self) -> Any:
        """The value.

        Raises:
            ValueError: There is none (the iterator was exhausted).
        """
        if not self._has_value:
            raise ValueError("the distributed iterator is exhausted: no value in this Optional")
        return self._value


class DistributedIterator:
    """Iterates per-replica batches; every worker stops on the same step.

    Each step every worker asks its source for the next element and the workers agree (one
    small all-reduce of a has-data flag): if any worker has run out, all stop, so no rank waits
    in a collective that the others never enter.

    Args:
        strategy: The strategy.
        source: Iterator of this worker's elements.
        split: Turns one source element into this worker's per-replica values.
    """

    def __init__(
        self, strategy: Strategy, source: Iterator[Any], split: Callable[[Any], list[Any]]
    ) -> None:
        self._strategy = strategy
        self._source = source
        self._split = split
        self._exhausted = False
        self.steps = 0

    def __iter__(self) -> DistributedIterator:
        return self

    def _fetch(self) -> tuple[bool, Any]:
        if self._exhausted:
            return False, None
        try:
            element = next(self._source)
            has = True
        except StopIteration:
            element, has = None, False
        comm = self._strategy.extended.communicator
        if comm is not None and comm.size > 1:
            has = bool(comm.allreduce(np.array([int(has)], np.int8), ReduceOp.MIN)[0])
        if not has:
            self._exhausted = True
            return False, None
        self.steps += 1
        values = self._split(element)
        if len(values) == 1:
            return True, values[0]
        # TF's regroup: a structure whose leaves are per-replica values.
        return True, map_structure(lambda *parts: PerReplica(parts), *values)

    def __next__(self) -> Any:
        has, value = self._fetch()
        if not has:
            raise StopIteration(f"distributed dataset exhausted after {self.steps} steps")
        return value

    def checkpoint_state(self) -> dict[str, np.ndarray]:
        """The position (steps taken), for `hpcdist.Checkpoint`."""
        return {"steps": np.int64(self.steps)}

    def restore_state(self, state: dict[str, Any]) -> None:
        """Move to a saved position: skip ahead on the source (no communication).

        Raises:
            ValueError: The iterator is already past that position.
        """
        target = int(np.asarray(state["steps"]))
        if target < self.steps:
            raise ValueError(
                f"cannot rewind a distributed iterator from step {self.steps} to {target}"
            )
        while self.steps < target:
            next(self._source)
            self.steps += 1

    def get_next(self) -> Any:
        """The next per-replica value.

        Raises:
            StopIteration: The dataset is exhausted (on every worker at the same step).
        """
        return next(self)

    def get_next_as_optional(self) -> Optional:
        """The next value wrapped in an `Optional` (empty when exhausted)."""
        has, value = self._fetch()
        return Optional(value, has)


class DistributedDataset:
    """A globally batched dataset whose batches are split across all replicas.

    Every worker iterates the same global batches (shuffle with a seed so that they agree) and
    keeps its replicas' rows: global batch rows are split in balanced pieces over
    ``num_replicas_in_sync`` replicas in replica-id order (7 rows over 3 replicas: 3, 2, 2). A
    short last batch leaves some replicas with empty batches. With
    ``InputOptions(auto_shard_policy=AutoShardPolicy.OFF)`` every worker keeps whole batches and
    splits them over its local replicas only.
    """

    def __init__(self, strategy: Strategy, dataset: Any, options: Any = None) -> None:
        if options is not None and not isinstance(options, InputOptions):
            raise TypeError(f"options must be hd.data.InputOptions, got {type(options).__name__}")
        self._strategy = strategy
        self._dataset = dataset
        self._options = options or InputOptions()
        self._shard_across_workers = self._options.auto_shard_policy is not AutoShardPolicy.OFF

    def _split(self, element: Any) -> list[Any]:
        leaves = [leaf for leaf in flatten(element) if leaf is not None]
        rows = {np.shape(leaf)[0] if np.ndim(leaf) else None for leaf in leaves}
        if None in rows or len(rows) != 1:
            raise ValueError(
                "experimental_distribute_dataset expects batched elements whose arrays share "
                f"their first dimension, got shapes {[np.shape(x) for x in leaves]}"
            )
        if self._shard_across_workers:
            pieces = balanced_split(rows.pop(), self._strategy.num_replicas_in_sync)
            ids = list(self._strategy._replica_ids())
        else:  # AutoShardPolicy.OFF: every worker keeps the whole batch for its own replicas
            pieces = balanced_split(rows.pop(), self._strategy.extended.local_replicas)
            ids = list(range(len(pieces)))
        return [
            map_structure(
                lambda a, lo=pieces[i][0], hi=pieces[i][1]: (
                    None if a is None else np.asarray(a)[lo:hi]
                ),
                element,
            )
            for i in ids
        ]

    def __iter__(self) -> DistributedIterator:
        return DistributedIterator(self._strategy, iter(self._dataset), self._split)


class DatasetsFromFunction:
    """Per-worker datasets built by ``dataset_fn(InputContext)``; elements are per replica."""

    def __init__(self, strategy: Strategy, dataset_fn: Callable[..., Any], options: Any = None):
        ext = strategy.extended
        self._strategy = strategy
        self.input_context = InputContext(
            num_input_pipelines=ext.num_workers,
            input_pipeline_id=ext.worker_index,
            num_replicas_in_sync=strategy.num_replicas_in_sync,
        )
        self._dataset = dataset_fn(self.input_context)
        self._options = options

    def __iter__(self) -> DistributedIterator:
        local = self._strategy.extended.local_replicas
        source = iter(self._dataset)

        def grouped() -> Iterator[list[Any]]:
            while True:
                group = []
                for _ in range(local):
                    try:
                        group.append(next(source))
                    except StopIteration:
                        return
                yield group

        return DistributedIterator(self._strategy, grouped(), lambda group: group)
