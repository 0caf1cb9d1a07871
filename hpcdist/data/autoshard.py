"""Auto-sharding: which part of a pipeline each of ``N`` workers reads (TF's rewrite).

TF's ``auto_shard`` pass (grappler's ``auto_shard.cc``) decides per pipeline, and so does
`auto_shard` here, on the lineage that every `Dataset` records (`hpcdist.data.lineage`):

- **FILE**: the pipeline reads files (a ``TFRecordDataset`` of several files, one over a
  dataset of names such as ``list_files``, an ``interleave``/``flat_map`` whose function makes
  such a reader, ``from_hdf5`` over several files). Worker ``i`` reads files ``i, i + N, ...``
  (of the sorted list for ``list_files``, whose shuffle then shuffles the worker's own files),
  and the transformations after the source are replayed on that share. TF raises
  ``NotFoundError`` ("Found an unshardable source dataset") when nothing reads files, and so
  does this.
- **DATA**: worker ``i`` keeps elements ``i, i + N, ...`` of the whole pipeline
  (``dataset.shard(N, i)``). ``from_hdf5`` is sharded by rows instead (**ROWS**): worker ``i``
  reads one contiguous balanced range of the rows.
- **AUTO**: FILE when the pipeline reads files (ROWS for one HDF5 file), DATA otherwise.
- **OFF**: every worker reads everything. With one worker nothing changes, whatever the policy.

Fewer files than workers: TF 2.21 raises ``InvalidArgumentError`` at the first read on some
workers and reads nothing on the others; here `auto_shard` raises `InvalidArgumentError` at
once, naming the counts and the fix, on every worker (the file list is the same everywhere).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hpcdist.data.dataset_options import auto_shard_policy_of
from hpcdist.data.lineage import Step, chain, replay, source_of
from hpcdist.data.options import AutoShardPolicy
from hpcdist.errors import InvalidArgumentError, NotFoundError

__all__ = ["FileShard", "ShardPlan", "auto_shard", "find_files"]

_OPENS_INPUTS = ("interleave", "flat_map")


@dataclass(frozen=True)
class FileShard:
    """How a pipeline reads files: how many, and how to rebuild it over a worker's share.

    Attributes:
        count: Number of files (None when the names come from a dataset of unknown size).
        rebuild: ``rebuild(num_workers, index)`` is the pipeline over that worker's files.
        rows: For one HDF5 file: ``rows(num_workers, index)`` is the pipeline over a row range.
        what: Describes the source for messages.
    """

    count: int | None
    rebuild: Callable[[int, int], Any] | None
    rows: Callable[[int, int], Any] | None
    what: str


@dataclass(frozen=True)
class ShardPlan:
    """What `auto_shard` decided for one worker.

    Attributes:
        policy: ``"NONE"`` (one worker), ``"OFF"``, ``"DATA"``, ``"FILE"`` or ``"ROWS"``.
        dataset: This worker's dataset (for DATA: ``dataset.shard(N, i)``, TF's elements).
        files: Number of files the decision saw (None when not reading files).
    """

    policy: str
    dataset: Any
    files: int | None = None


def _is_reader(dataset: Any) -> bool:
    root, _ = chain(dataset)
    source = source_of(root)
    return source is not None and source.kind in ("reader", "rows")


def _fresh(root: Any) -> Any:
    """A copy of a source with its own state (a shuffled ``list_files`` draws anew)."""
    source = source_of(root)
    if source is not None and source.with_files is not None and source.files is not None:
        return source.with_files(source.files)
    return root


def _opens_readers(step: Step, parent: Any) -> bool:
    """Whether ``step`` (an interleave or flat_map) makes file readers from its input."""
    try:
        first = next(iter(parent))
        fn = step.kwargs.get("map_func", step.args[0] if step.args else None)
        made = fn(*first) if type(first) is tuple else fn(first)
    except Exception:  # an input that cannot be probed reads no files as far as we can tell
        return False
    return _is_reader(made)


def _names_shard(names: Any) -> tuple[int | None, Callable[[int, int], Any]]:
    """A dataset of file names: its count and its share for worker ``i`` of ``n``."""
    root, steps = chain(names)
    source = source_of(root)
    if source is not None and source.kind == "names" and source.with_files is not None:
        files = source.files or ()
        make = source.with_files
        return len(files), lambda n, i: replay(steps, make(files[i::n]))
    card = names.cardinality()
    return (card if card >= 0 else None), lambda n, i: names.shard(n, i)


def find_files(dataset: Any) -> FileShard | None:
    """How ``dataset`` reads files, or None when it reads none (TF's reader search)."""
    root, steps = chain(dataset)
    source = source_of(root)
    if source is not None and source.kind == "rows":
        rows = source.rows
        return FileShard(1, None, lambda n, i: replay(steps, rows(n, i)), "1 HDF5 file")
    if source is not None and source.kind == "reader":
        if source.files is not None and source.with_files is not None:
            files, make = source.files, source.with_files
            rows = source.rows
            return FileShard(
                len(files),
                lambda n, i: replay(steps, make(files[i::n])),
                None if rows is None else (lambda n, i: replay(steps, rows(n, i))),
                f"{len(files)} files",
            )
        if source.names is not None and source.with_names is not None:
            count, share = _names_shard(source.names)
            with_names = source.with_names
            return FileShard(
                count,
                lambda n, i: replay(steps, with_names(share(n, i))),
                None,
                "a dataset of file names",
            )
    fresh = _fresh(root)
    for k, step in enumerate(steps):
        if step.name not in _OPENS_INPUTS:
            continue
        parent = replay(steps[:k], fresh)
        if not _opens_readers(step, parent):
            return None
        count, share = _names_shard(parent)
        rest = steps[k:]
        return FileShard(
            count,
            lambda n, i, rest=rest, share=share: replay(rest, share(n, i)),
            None,
            f"the input of {step.name}",
        )
    return None


def _too_few(count: int, num_workers: int, index: int, policy: AutoShardPolicy) -> Exception:
    return InvalidArgumentError(
        f"cannot shard by FILE (policy {policy.name}): the dataset reads {count} file(s), "
        f"fewer than the {num_workers} workers (worker {index} of {num_workers} would read "
        "nothing). Set options.experimental_distribute.auto_shard_policy = "
        "hd.data.AutoShardPolicy.DATA (every worker reads every file and keeps its share of "
        "the elements), or split the data into at least as many files as workers."
    )


def auto_shard(
    dataset: Any, num_workers: int, index: int, policy: AutoShardPolicy | None = None
) -> ShardPlan:
    """Worker ``index``'s part of ``dataset`` under ``policy`` (default: the dataset's own).

    Raises:
        InvalidArgumentError: FILE sharding with fewer files than workers.
        NotFoundError: FILE policy on a pipeline that reads no files (TF's error).
        ValueError: ``index`` is not in ``[0, num_workers)``.
    """
    if not 0 <= index < num_workers:
        raise ValueError(f"worker index must be in [0, {num_workers}), got {index}")
    policy = auto_shard_policy_of(dataset) if policy is None else policy
    if num_workers == 1:
        return ShardPlan("NONE", dataset)
    if policy is AutoShardPolicy.OFF:
        return ShardPlan("OFF", dataset)
    files = find_files(dataset)
    if policy is AutoShardPolicy.DATA or (files is None and policy is not AutoShardPolicy.FILE):
        if files is not None and files.rows is not None:
            return ShardPlan("ROWS", files.rows(num_workers, index), files.count)
        return ShardPlan("DATA", dataset.shard(num_workers, index))
    if files is None:
        raise NotFoundError(
            f"cannot shard by FILE (policy {policy.name}): found an unshardable source dataset "
            "(the pipeline reads no files: TFRecordDataset, list_files with a reader, "
            "from_hdf5). Use AutoShardPolicy.DATA or OFF."
        )
    if files.rebuild is None:  # one HDF5 file
        if policy is AutoShardPolicy.FILE:
            raise _too_few(1, num_workers, index, policy)
        return ShardPlan("ROWS", files.rows(num_workers, index), 1)
    if files.count is not None and files.count < num_workers:
        raise _too_few(files.count, num_workers, index, policy)
    return ShardPlan("FILE", files.rebuild(num_workers, index), files.count)
