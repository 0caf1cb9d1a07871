"""How a dataset was made: its parent and the call that made it, and what its source reads.

A distribution strategy rewrites a pipeline the way TF's auto-shard pass rewrites its graph: it
finds the source that reads files, replaces it with one that reads this worker's files, and
replays the transformations after it. Python closures cannot be inspected, so every
transformation records the call that made it (`Step`: the parent, the method's name and its
arguments) and every file source records what it reads (`FileSource`). Both live in weak
tables keyed by the dataset, so a dataset's lineage costs nothing once it is dropped.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "FileSource",
    "Step",
    "chain",
    "epoch_counters",
    "mark_source",
    "register_epochs",
    "replay",
    "source_of",
    "step_of",
    "transformation",
]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Step:
    """One transformation: ``parent.<name>(*args, **kwargs)`` made the dataset."""

    parent: Any
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class FileSource:
    """What a source dataset reads, and how to make the same source over other inputs.

    Attributes:
        kind: ``"names"`` (a dataset of file names, e.g. ``list_files``), ``"reader"`` (reads
            the files named in ``files``) or ``"rows"`` (one file read by row ranges).
        files: The files, in the order a worker's share is taken from (every N-th).
        with_files: Returns the same source over a subset of ``files`` (None where the names
            come from a dataset: then ``names`` is set).
        names: The dataset of file names a reader reads (``TFRecordDataset(list_files(...))``)
            and ``with_names`` the same reader over another such dataset.
        rows: ``rows(num_shards, index)`` is the source over that shard's rows (HDF5).
        batches: ``batches(size, drop_remainder)`` iterates the source in batches read whole
            (``batch`` right after the source uses it).
    """

    kind: str
    files: tuple[str, ...] | None = None
    with_files: Callable[[tuple[str, ...]], Any] | None = None
    names: Any = None
    with_names: Callable[[Any], Any] | None = None
    rows: Callable[[int, int], Any] | None = None
    batches: Callable[[int, bool], Any] | None = None


_STEPS: weakref.WeakKeyDictionary[Any, Step] = weakref.WeakKeyDictionary()
_SOURCES: weakref.WeakKeyDictionary[Any, FileSource] = weakref.WeakKeyDictionary()
_EPOCHS: weakref.WeakKeyDictionary[Any, list[int]] = weakref.WeakKeyDictionary()


def transformation(method: F) -> F:
    """Decorate a dataset method so that the dataset it returns remembers the call."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        if out is not self and out not in _STEPS:
            _STEPS[out] = Step(self, method.__name__, args, kwargs)
        return out

    return wrapper  # type: ignore[return-value]


def step_of(dataset: Any) -> Step | None:
    """The transformation that made ``dataset`` (None for a source)."""
    return _STEPS.get(dataset)


def mark_source(dataset: Any, source: FileSource) -> None:
    """Record that ``dataset`` is a source reading files."""
    _SOURCES[dataset] = source


def source_of(dataset: Any) -> FileSource | None:
    """What the source ``dataset`` reads (None when it reads no files)."""
    return _SOURCES.get(dataset)


def register_epochs(dataset: Any, counter: list[int]) -> None:
    """Record ``dataset``'s epoch counter (a shuffle's ``[iterations started]``)."""
    _EPOCHS[dataset] = counter


def epoch_counters(dataset: Any) -> list[list[int]]:
    """The epoch counters of ``dataset`` and the datasets it was made from, nearest first.

    The walk follows each transformation's parent and a reader's dataset of file names.

    An iterator saves their values with its position, so that a restored iterator draws the
    same shuffle orders as the saved one did.
    """
    out = []
    node = dataset
    while node is not None:
        counter = _EPOCHS.get(node)
        if counter is not None:
            out.append(counter)
        step = _STEPS.get(node)
        source = _SOURCES.get(node)
        if step is None and source is not None and source.names is not None:
            node = source.names  # a reader of a dataset of names: its shuffles count too
        else:
            node = None if step is None else step.parent
    return out


def replay(steps: list[Step], start: Any) -> Any:
    """Apply ``steps`` (oldest first) to ``start`` in place of their original parent."""
    out = start
    for step in steps:
        out = getattr(out, step.name)(*step.args, **step.kwargs)
    return out


def chain(dataset: Any) -> tuple[Any, list[Step]]:
    """``dataset``'s source and the steps from it to ``dataset``, oldest first.

    The walk stops at the first dataset marked as a file source (`mark_source`), which may
    itself be made of steps (``list_files`` with a shuffle).
    """
    steps: list[Step] = []
    node = dataset
    while node not in _SOURCES and (step := _STEPS.get(node)) is not None:
        steps.append(step)
        node = step.parent
    steps.reverse()
    return node, steps
