"""Distributed input: global batches split across replicas, all workers stopping together."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from hpcdist import errors as hpcdist_errors
from hpcdist import timeline
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.data.autoshard import auto_shard
from hpcdist.data.dataset import Dataset
from hpcdist.data.dataset_options import auto_shard_policy_of
from hpcdist.data.iterator import DatasetIterator
from hpcdist.data.nest import flatten, map_structure
from hpcdist.data.options import AutoShardPolicy, InputContext, InputOptions
from hpcdist.strategies.values import PerReplica
from hpcdist.utils.split import balanced_bounds

if TYPE_CHECKING:
    from hpcdist.strategies.strategy import Strategy

__all__ = [
    "DatasetsFromFunction",
    "DistributedDataset",
    "DistributedIterator",
    "Optional",
    "PerReplicaIterator",
    "empty_batch",
    "raise_input_error",
]


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
        inner: The `hpcdist.data.iterator.DatasetIterator` the source reads, if any: its
            shuffles' epochs are saved with the position, so that a restored iterator draws
            the same orders.
    """

    def __init__(
        self,
        strategy: Strategy,
        source: Iterator[Any],
        split: Callable[[Any], list[Any]],
        inner: Any = None,
    ) -> None:
        self._strategy = strategy
        self._source = source
        self._split = split
        self._inner = inner if isinstance(inner, DatasetIterator) else None
        self._exhausted = False
        self.steps = 0

    def __iter__(self) -> DistributedIterator:
        return self

    def _pull(self, *default: Any) -> Any:
        """``next(source, *default)``; the wait is a timeline ``input`` event when recording."""
        if not timeline.active():
            return next(self._source, *default)
        begin = timeline.now()
        try:
            return next(self._source, *default)
        finally:  # the time this rank waited for its pipeline (the input share of a step)
            timeline.record("input", "next element", begin, timeline.now())

    def _fetch(self) -> tuple[bool, Any]:
        if self._exhausted:
            return False, None
        error: Exception | None = None
        try:
            element = self._pull()
            has = True
        except StopIteration:
            element, has = None, False
        except Exception as exc:  # agreed on below: every rank raises, none waits
            element, has, error = None, False, exc
        comm = self._strategy.extended.communicator
        if comm is not None and comm.size > 1:
            missing, failed = comm.allreduce(
                np.array([int(not has), int(error is not None)], np.int64), ReduceOp.SUM
            )
            if failed:
                raise_input_error(comm, error)
            has = not missing
        elif error is not None:
            raise error
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
        """The position (steps taken), for `hpcdist.Checkpoint`.

        With shuffles in the pipeline, also their epochs when the iteration began (``epochs``).
        """
        state = {"steps": np.int64(self.steps)}
        if self._inner is not None:
            epochs = self._inner.checkpoint_state()["epochs"]
            if epochs.size:
                state["epochs"] = epochs
        return state

    def _restore_epochs(self, state: dict[str, Any]) -> None:
        """Give the pipeline's shuffles their saved epochs (before moving forward)."""
        if "epochs" in state and self._inner is not None:
            position = np.int64(self._inner.position)
            self._inner.restore_state({"position": position, "epochs": state["epochs"]})

    def restore_state(self, state: dict[str, Any]) -> None:
        """Move to a saved position: skip ahead on the source (no communication).

        Raises:
            ValueError: The iterator is already past that position.
        """
        target = _forward_target(state, self.steps)
        self._restore_epochs(state)
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
    ``InputOptions(auto_shard_policy=AutoShardPolicy.OFF)`` (or a dataset carrying
    ``hd.data.Options`` with that policy, ``dataset.with_options(options)``, as in TF) every worker
    keeps whole batches and splits them over its local replicas only.

    A `hpcdist.data.Dataset` that reads files is sharded as TF's auto-shard rewrite does it
    (`hpcdist.data.autoshard`): under AUTO or FILE each worker reads its own files (``from_hdf5``
    of one file: its own row range, also under DATA), and each of its batches is split in
    ``num_replicas_in_sync`` balanced pieces that its local replicas take in turn (TF's
    rebatch), so each step still has one global batch's worth of rows. Workers that run out
    first give their replicas empty batches until every worker's files are read (as
    `PerReplicaIterator`). Fewer files than workers raises `hpcdist.errors.InvalidArgumentError`
    here, on every worker. `shard_policy` says what was decided: ``"NONE"`` (one worker),
    ``"OFF"``, ``"DATA"``, ``"FILE"`` or ``"ROWS"``.
    """

    def __init__(self, strategy: Strategy, dataset: Any, options: Any = None) -> None:
        if options is not None and not isinstance(options, InputOptions):
            raise TypeError(f"options must be hd.data.InputOptions, got {type(options).__name__}")
        self._strategy = strategy
        self._dataset = dataset
        self._options = options or InputOptions(auto_shard_policy=auto_shard_policy_of(dataset))
        self._shard_across_workers = self._options.auto_shard_policy is not AutoShardPolicy.OFF
        self._worker_dataset: Any = None  # this worker's files (FILE / ROWS sharding)
        self.shard_policy = "OFF" if not self._shard_across_workers else "DATA"
        ext = strategy.extended
        if isinstance(dataset, Dataset) and self._shard_across_workers and ext.num_workers > 1:
            plan = auto_shard(
                dataset, ext.num_workers, ext.worker_index, self._options.auto_shard_policy
            )
            self.shard_policy = plan.policy
            if plan.policy in ("FILE", "ROWS"):
                self._worker_dataset = plan.dataset

    def _pieces(self, batches: Iterator[Any]) -> Iterator[Any]:
        """This worker's batches cut in ``num_replicas_in_sync`` pieces (TF's rebatch)."""
        replicas = self._strategy.num_replicas_in_sync
        for element in batches:
            leaves = [leaf for leaf in flatten(element) if leaf is not None]
            rows = {np.shape(leaf)[0] if np.ndim(leaf) else None for leaf in leaves}
            if None in rows or len(rows) != 1:
                raise ValueError(
                    "experimental_distribute_dataset expects batched elements whose arrays "
                    f"share their first dimension, got shapes {[np.shape(x) for x in leaves]}"
                )
            for lo, hi in balanced_split(rows.pop(), replicas):
                yield map_structure(
                    lambda a, lo=lo, hi=hi: None if a is None else np.asarray(a)[lo:hi], element
                )

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
            ids = list(self._strategy.extended.local_replica_ids)
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

    @property
    def dataset(self) -> Any:
        """The dataset this distributes."""
        return self._dataset

    def __iter__(self) -> DistributedIterator:
        if self._worker_dataset is not None:
            inner = iter(self._worker_dataset)
            return PerReplicaIterator(self._strategy, self._pieces(inner), inner)
        source = iter(self._dataset)
        return DistributedIterator(self._strategy, source, self._split, source)


class DatasetsFromFunction:
    """Per-worker datasets built by ``dataset_fn(InputContext)``; elements are per replica.

    Each step gives the worker's local replicas its next elements, one each, in replica order.
    When the datasets run out unevenly (3 batches over 2 replicas), the step goes on while any
    replica on any worker still has an element, and the replicas without one get an empty
    batch: zero rows, the trailing shape and dtype of the worker's last element (TF's partial
    batch). The iteration stops, on every worker at the same step, once no replica has an
    element left. See `PerReplicaIterator` for the details that follow TF.
    """

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

    @property
    def dataset(self) -> Any:
        """This worker's dataset, made by ``dataset_fn``."""
        return self._dataset

    def __iter__(self) -> PerReplicaIterator:
        source = iter(self._dataset)
        return PerReplicaIterator(self._strategy, source, source)


def _groups(source: Iterator[Any], size: int) -> Iterator[list[Any]]:
    """Consecutive groups of ``size`` elements of ``source``; the last may be shorter."""
    while True:
        group = []
        for _ in range(size):
            try:
                group.append(next(source))
            except StopIteration:
                if group:
                    yield group
                return
        yield group


def empty_batch(element: Any) -> Any:
    """An element like ``element`` with no rows: each array leaf ``(0, *shape[1:])``.

    A leaf without a batch dimension (a scalar) becomes a zero of its dtype, as TF's dummy
    values do; None leaves stay None.
    """

    def empty(leaf: Any) -> Any:
        if leaf is None:
            return None
        array = np.asarray(leaf)
        shape = (0, *array.shape[1:]) if array.ndim else ()
        return np.zeros(shape, array.dtype)

    return map_structure(empty, element)


def _batched(element: Any) -> bool:
    """Whether some leaf of ``element`` has a dimension that an empty batch can set to 0."""
    return any(leaf is not None and np.ndim(leaf) > 0 for leaf in flatten(element))


class PerReplicaIterator(DistributedIterator):
    """`DistributedIterator` of `DatasetsFromFunction`: pads uneven ends with empty batches.

    TF's rules (its partial batch handling):

    - A step happens while at least one replica, on any worker, has an element; the replicas
      that have none get `empty_batch` of this worker's latest element (so the same trailing
      shape and dtype). A worker that never had an element takes the empty batch from one that
      did (one small object all-gather, only on such a step).
    - Workers agree on every step (one small all-reduce of how many replicas have data), so all
      stop together, after the longest dataset.
    - With one worker, elements that are all scalars (no batch dimension, TF's "statically
      shaped" case) are not padded: a step that cannot give every replica an element ends the
      iteration, as TF's does. Across workers TF pads them with zeros, and so does this.
    """

    def __init__(self, strategy: Strategy, source: Iterator[Any], inner: Any = None) -> None:
        self._local = strategy.extended.local_replicas
        super().__init__(strategy, _groups(source, self._local), list, inner)
        self._latest: Any = None  # this worker's latest element: what empty batches look like
        self._seen = False

    def _fetch(self) -> tuple[bool, Any]:
        if self._exhausted:
            return False, None
        comm = self._strategy.extended.communicator
        several = comm is not None and comm.size > 1
        error: Exception | None = None
        try:
            group = self._pull([])
        except Exception as exc:  # agreed on below: every rank raises, none waits
            if not several:
                raise
            group, error = [], exc
        if group:
            self._latest, self._seen = group[-1], True
        short = len(group) < self._local
        need = int(short and not self._seen)  # padding needed, but nothing to pad like
        total = len(group)
        if several:
            total, need, failed = (
                int(x)
                for x in comm.allreduce(
                    np.array([total, need, int(error is not None)], np.int64), ReduceOp.SUM
                )
            )
            if failed:
                raise_input_error(comm, error)
        if total == 0 or (short and not several and not _batched(self._latest)):
            self._exhausted = True
            return False, None
        if need:  # some worker has had no element yet: take the empty batch from one that has
            mine = empty_batch(self._latest) if self._seen else None
            offered = [x for x in comm.allgather_object((self._seen, mine)) if x[0]]
            if not self._seen:
                self._latest, self._seen = offered[0][1], True
        if short:
            group += [empty_batch(self._latest) for _ in range(self._local - len(group))]
        self.steps += 1
        if self._local == 1:
            return True, group[0]
        return True, map_structure(lambda *parts: PerReplica(parts), *group)

    def restore_state(self, state: dict[str, Any]) -> None:
        """Move to a saved position: skip ahead on the source (no communication).

        A source that ran out before that position stays exhausted (its replicas get empty
        batches while other workers go on).

        Raises:
            ValueError: The iterator is already past that position.
        """
        target = _forward_target(state, self.steps)
        self._restore_epochs(state)
        while self.steps < target:
            group = next(self._source, [])
            if group:
                self._latest, self._seen = group[-1], True
            self.steps += 1


def raise_input_error(comm: Any, error: Exception | None) -> None:
    """Raise on every rank after some rank's input raised ``error`` (collective).

    The ranks whose input failed raise their own error; the others raise an error of the same
    class (when it is one of hpcdist's, else `RuntimeError`) naming the ranks and their
    messages, so that no rank waits in a collective the failed ones never enter.
    """
    reports = comm.allgather_object(None if error is None else (type(error).__name__, str(error)))
    if error is not None:
        raise error
    failed = [(rank, report) for rank, report in enumerate(reports) if report is not None]
    names = {name for _, (name, _) in failed}
    kind = getattr(hpcdist_errors, names.pop(), RuntimeError) if len(names) == 1 else RuntimeError
    if not (isinstance(kind, type) and issubclass(kind, Exception)):
        kind = RuntimeError
    detail = "; ".join(f"rank {rank}: {name}: {message}" for rank, (name, message) in failed)
    raise kind(
        f"the input pipeline failed on {len(failed)} of {comm.size} ranks (this is rank "
        f"{comm.rank}, whose input was fine): {detail}"
    )


def _forward_target(state: dict[str, Any], steps: int) -> int:
    """The saved position of an iterator now at ``steps``.

    Raises:
        ValueError: The iterator is already past that position (iterators cannot rewind).
    """
    target = int(np.asarray(state["steps"]))
    if target < steps:
        raise ValueError(f"cannot rewind a distributed iterator from step {steps} to {target}")
    return target
