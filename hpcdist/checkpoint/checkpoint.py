"""`Checkpoint`: save and restore variables, models, optimizers, metrics and counters.

Every rank calls `save`/`restore` (reading some variables is collective: sync-on-read values are
reduced); the chief writes the file, and every rank reads it. Objects take part through the
protocol of `hpcdist.core.trackable`, and their values are found by their place in the
checkpoint: ``model/weights/3``, ``optimizer/slots/m/model/weights/3``,
``optimizer/iterations``, ``save_counter``; so a checkpoint restores into freshly built objects
of the same structure, on any number of ranks (values are whole logical tensors).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from hpcdist import timeline
from hpcdist.checkpoint.collective import agree, checkpoint_communicator, is_checkpoint_chief
from hpcdist.checkpoint.deferred import CheckpointLoadStatus, DeferredValues, defer_until_built
from hpcdist.checkpoint.format import CheckpointMismatchError, read_arrays, write_arrays
from hpcdist.checkpoint.graph import collect, describe_unsupported, match_values
from hpcdist.checkpoint.state import read_state, write_state
from hpcdist.core import context
from hpcdist.core.trackable import SlicedValue, is_checkpointable
from hpcdist.logger import get_logger

__all__ = ["Checkpoint", "CheckpointLoadStatus", "CheckpointOptions", "WriteOutcome"]


@dataclasses.dataclass(frozen=True)
class CheckpointOptions:
    """Options of `Checkpoint.save` / `write`.

    Args:
        experimental_enable_async_checkpoint: Snapshot values to host memory and write the file
            on a background thread; `Checkpoint.sync` (or the next save) waits for it.
    """

    experimental_enable_async_checkpoint: bool = False


@dataclasses.dataclass(frozen=True)
class WriteOutcome:
    """What `Checkpoint.write_with_outcome` did on this rank.

    Attributes:
        path: The checkpoint file (``file_prefix + ".h5"``).
        written_here: Whether this rank wrote a file (the chief, and a rank whose path differs
            from the chief's); the others only took part in the collective steps.
    """

    path: str
    written_here: bool


class Checkpoint:
    """A set of named objects saved and restored together.

    Args:
        **trackables: Objects implementing the protocol of `hpcdist.core.trackable`:
            variables, models and layers, optimizers (iterations and slots), metrics, dataset
            iterators (``checkpoint_state``/``restore_state``), or any object of the user's
            with ``checkpoint_children()``.

    Raises:
        ValueError: A name is reserved or an object cannot be checkpointed.
    """

    def __init__(self, **trackables: Any) -> None:
        if "save_counter" in trackables:
            raise ValueError("'save_counter' is reserved")
        for name, obj in trackables.items():
            if not is_checkpointable(obj):
                raise ValueError(describe_unsupported(name, obj))
        self._trackables = dict(trackables)
        self.save_counter = context.get_strategy().Variable(
            np.int64(0), name="save_counter", trainable=False
        )
        self._pending: concurrent.futures.Future | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._deferred: DeferredValues | None = None
        # host copies of an asynchronous save, refilled by the next one (TF keeps its copies
        # too): touching fresh memory costs more than the copy on these machines
        self._host_copies: dict[str, np.ndarray] = {}

    # -- object graph -------------------------------------------------------------------------

    def track(self, name: str, obj: Any) -> None:
        """Add ``obj`` to the saved objects under ``name`` (TF: assigning an attribute).

        An object already tracked under ``name`` is replaced, as TF's attribute assignment
        replaces a dependency. `PreemptionCheckpointHandler` adds its run counter this way.

        Raises:
            ValueError: ``name`` is ``save_counter`` (reserved), or ``obj`` cannot be
                checkpointed.
        """
        if name == "save_counter":
            raise ValueError("'save_counter' is reserved")
        if not is_checkpointable(obj):
            raise ValueError(describe_unsupported(name, obj))
        self._trackables[name] = obj

    def _roots(self) -> dict[str, Any]:
        return {"save_counter": self.save_counter, **self._trackables}

    def _snapshot(self, copy: bool) -> dict[str, Any]:
        """Current values; without ``copy`` they may be the variables' own arrays (write now)."""
        graph = collect(self._roots())
        if copy:  # the previous asynchronous write is done (`_write` waited): reuse its copies
            kept, self._host_copies = self._host_copies, {}
            for path, var in graph.variables.items():
                self._host_copies[path] = _host_copy(var.checkpoint_value(), kept.get(path))
            arrays: dict[str, Any] = dict(self._host_copies)
        else:
            arrays = {path: var.checkpoint_value() for path, var in graph.variables.items()}
        for path, obj in graph.states.items():
            for key, value in obj.checkpoint_state().items():
                arrays[f"{path}/state/{key}"] = np.array(value) if copy else np.asarray(value)
        return arrays

    # -- saving -------------------------------------------------------------------------------

    def write(self, file_prefix: str, options: CheckpointOptions | None = None) -> str:
        """Write a checkpoint to ``file_prefix + ".h5"`` without touching `save_counter`.

        Collective: every rank calls it; the chief writes, then the ranks agree on the outcome,
        so a write that failed on the chief raises on every rank (none waits for it). A rank
        whose ``file_prefix`` differs from the chief's writes its own copy there too (TF's
        multi-worker pattern: non-chief workers save to a temporary directory, then delete it).
        Missing directories are created.

        Returns:
            The file path.

        Raises:
            CheckpointWriteError: The file (or, asynchronously, the previous one) could not be
                written; raised on every rank, with the errno.
        """
        return self._write(file_prefix, options)[0]

    def write_with_outcome(
        self, file_prefix: str, options: CheckpointOptions | None = None
    ) -> WriteOutcome:
        """`write`, also saying whether this rank wrote a file (collective, as `write`).

        For code that keeps files beside the checkpoint (`CheckpointManager`'s state file):
        only a rank that wrote the checkpoint writes its companions, after `after_write`.

        Raises:
            CheckpointWriteError: As `write`.
        """
        return WriteOutcome(*self._write(file_prefix, options))

    def after_write(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once this rank's last write is complete.

        After an asynchronous write, ``fn`` runs on the writer thread once the file is
        complete; it becomes part of that write: `sync` (and the next save, write or restore)
        waits for it and raises its error. Otherwise ``fn`` runs now, in this thread, and its
        error is raised here. Not collective.
        """
        pending = self._pending
        if pending is None or self._executor is None:
            fn()
            return
        self._pending = self._executor.submit(_then, pending, fn)

    def _write(
        self,
        file_prefix: str,
        options: CheckpointOptions | None,
        then: Callable[[str], None] | None = None,
    ) -> tuple[str, bool]:
        """`write`, also returning whether this rank wrote a file.

        A writing rank calls ``then(path)`` once the file is complete (on the writer thread
        when asynchronous); its failure is the write's.
        """
        path = file_prefix if file_prefix.endswith(".h5") else f"{file_prefix}.h5"
        is_async = options is not None and options.experimental_enable_async_checkpoint
        comm = checkpoint_communicator()
        error = self._async_error()  # a failed background write is raised on every rank now
        with timeline.span("checkpoint", "snapshot"):
            arrays = self._snapshot(copy=is_async)  # async: a host copy, training may go on
        writer = _writes_here(comm, path)
        if writer and error is None:
            try:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                if is_async:
                    if self._executor is None:
                        self._executor = concurrent.futures.ThreadPoolExecutor(1, "hpcdist-ckpt")
                    self._pending = self._executor.submit(_write_file, path, arrays, then)
                else:
                    with timeline.span("checkpoint", "write", path=path):
                        _write_file(path, arrays, then)
            except Exception as exc:  # every rank must learn of it: agreed below
                error = exc
        with timeline.span("checkpoint", "agree"):
            agree(comm, error, f"write checkpoint {path!r}")  # the file exists when save returns
        return path, writer

    def save(self, file_prefix: str, options: CheckpointOptions | None = None) -> str:
        """Increment `save_counter`, write ``file_prefix-N.h5`` and record it as the latest.

        The directory's state file (``checkpoint``, see `hpcdist.checkpoint.state`) then names
        this file, so `latest_checkpoint` finds it, as TF's ``Checkpoint.save`` does; `write`
        leaves the state file alone.

        Returns:
            The path.

        Raises:
            CheckpointWriteError: The checkpoint or the state file could not be written (on
                every rank).
        """
        self.save_counter.assign_add(1, read_value=False)
        prefix = f"{file_prefix}-{int(self.save_counter.numpy())}"
        return self._write(prefix, options, then=_record_latest)[0]

    def sync(self) -> None:
        """Wait for an asynchronous write to finish (re-raising its error).

        Not collective: only the chief writes, so only the chief can raise here; the next
        `save`, `write` or `restore` raises the same failure on every rank.
        """
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _async_error(self) -> Exception | None:
        """Wait for an asynchronous write; return its exception instead of raising it."""
        try:
            self.sync()
        except Exception as exc:
            return exc
        return None

    wait = sync

    # -- restoring ----------------------------------------------------------------------------

    def read(self, save_path: str) -> CheckpointLoadStatus:
        """Restore every object found in ``save_path`` except `save_counter` (see `restore`)."""
        return self._restore(save_path, with_counter=False)

    def restore(self, save_path: str) -> CheckpointLoadStatus:
        """Restore every object (and `save_counter`) from ``save_path``.

        Collective: every rank calls it. Every value is checked before any is assigned, so a
        failed restore changes no object. Values of a model or layer that is not built yet
        wait, as in TF: they are assigned when it builds (its first call), together with the
        optimizer slots of its variables; until then they are listed in the status's
        ``unused``. ``save_path`` is what `latest_checkpoint` returns, a path, or a prefix.

        Raises:
            CheckpointCorruptError: The file is missing, truncated or corrupt (names the file).
            CheckpointMismatchError: A value does not fit its object (names the variable and
                both shapes), or the file has a newer format version.
        """
        return self._restore(save_path, with_counter=True)

    def _restore(self, save_path: str, with_counter: bool) -> CheckpointLoadStatus:
        """Check every value against its object, then assign (collective, like `write`).

        Nothing changes unless every rank read the file and every value fits: the ranks agree
        once after reading (before slot holders build slots), once after checking (and
        restoring states); only then are variables assigned.
        """
        comm = checkpoint_communicator()
        path = (
            save_path
            if save_path.endswith(".h5") or os.path.exists(save_path)
            else f"{save_path}.h5"
        )
        error = self._async_error()
        arrays: dict[str, np.ndarray] = {}
        if error is None:
            try:
                with timeline.span("checkpoint", "read and verify", path=path):
                    arrays, _ = read_arrays(path)
                    match_values(path, arrays, collect(self._roots()), with_counter)
            except Exception as exc:
                error = exc
        agree(comm, error, f"restore checkpoint {path!r}")
        self._build_slots(arrays)
        restored: list[tuple[Any, dict[str, Any]]] = []
        try:
            match = match_values(path, arrays, collect(self._roots()), with_counter)
            for obj, state in match.states:
                previous = {k: np.array(v) for k, v in obj.checkpoint_state().items()}
                obj.restore_state({k: _owned(v) for k, v in state.items()})
                restored.append((obj, previous))
        except Exception as exc:
            error = exc
        try:
            agree(comm, error, f"restore checkpoint {path!r}")
        except BaseException:
            _roll_back(restored)
            raise
        with timeline.span("checkpoint", "assign"):
            for var, value in match.assignments:
                var.assign(value, read_value=False)
        deferred = DeferredValues(  # kept past this call: copies, not views of the mapped file
            path,
            {
                p: _owned(arrays[p])
                for p in match.unused
                if p != "save_counter" and "/state/" not in p
            },
        )
        self._deferred = deferred
        if deferred.values:
            defer_until_built(self._trackables, deferred, self._apply_deferred)
        status = CheckpointLoadStatus(path, match.missing, deferred)
        if match.missing or match.unused:
            get_logger().debug(
                "partial restore from %s: missing %s, unused %s", path, match.missing, match.unused
            )
        return status

    # -- deferred restore ---------------------------------------------------------------------

    def _apply_deferred(self) -> None:
        """Assign the waiting values whose variables exist now (built objects, new slots).

        Raises:
            CheckpointMismatchError: A waiting value does not fit the variable built for it.
        """
        deferred = self._deferred
        if deferred is None or not deferred.values:
            return
        self._build_slots(deferred.values)
        graph = collect(self._roots())
        wrong = [
            f"{p} has shape {tuple(deferred.values[p].shape)} in the file, the object built "
            f"{tuple(var.shape)}"
            for p, var in graph.variables.items()
            if p in deferred.values and tuple(deferred.values[p].shape) != tuple(var.shape)
        ]
        if wrong:
            raise CheckpointMismatchError(
                f"checkpoint {deferred.path!r} does not fit the objects built after the restore: "
                + "; ".join(wrong)
            )
        for p, var in graph.variables.items():
            if p in deferred.values:
                var.assign(deferred.values.pop(p), read_value=False)

    def _build_slots(self, arrays: dict[str, np.ndarray]) -> None:
        """Let slot holders create the state that the file has and they have not built yet."""
        graph = collect(self._roots())
        for name, holder in graph.slot_holders.items():
            prefix = f"{name}/slots/"
            targets = sorted(
                {
                    k[len(prefix) :].split("/", 1)[1]
                    for k in arrays
                    if k.startswith(prefix) and "/" in k[len(prefix) :]
                }
            )
            primaries = [graph.variables[t] for t in targets if t in graph.variables]
            if primaries or any(k.startswith(f"{name}/") for k in arrays):
                holder.build_checkpoint_slots(primaries)


def _then(write: concurrent.futures.Future, fn: Callable[[], None]) -> None:
    """Wait for ``write`` (raising its error), then run ``fn`` (on the writer thread)."""
    write.result()
    fn()


def _writes_here(comm: Any, path: str) -> bool:
    """Whether this rank writes ``path``: the chief, and a rank whose path is not the chief's.

    Collective when ``comm`` is set (one broadcast of the chief's path).
    """
    if comm is None:
        return True
    chief_path = comm.broadcast_object(os.path.abspath(path), root=0)
    return is_checkpoint_chief(comm) or os.path.abspath(path) != chief_path


def _record_latest(path: str) -> None:
    """Name ``path`` as the latest checkpoint of its directory; it joins no manager's list."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        previous = read_state(directory)
    except ValueError:
        previous = None  # a damaged state file is replaced, as TF overwrites it
    last_preserved = time.time() if previous is None else previous["last_preserved"]
    write_state(directory, path, [], last_preserved)


def _write_file(path: str, arrays: dict[str, Any], then: Callable[[str], None] | None) -> None:
    write_arrays(path, arrays)
    if then is not None:
        then(path)


def _roll_back(restored: list[tuple[Any, dict[str, Any]]]) -> None:
    """Give states restored before a failure their previous arrays back (where they allow it)."""
    for obj, previous in reversed(restored):
        try:
            obj.restore_state(previous)
        except Exception as exc:  # e.g. an iterator cannot rewind: say so, keep the first error
            get_logger().warning("could not roll back %s after a failed restore: %s", obj, exc)


def _owned(value: Any) -> Any:
    """``value``, or a copy of it when it is a read-only view (of a mapped checkpoint file)."""
    if isinstance(value, np.ndarray) and not value.flags.writeable:
        return np.array(value)
    return value


def _host_copy(value: Any, into: np.ndarray | None = None) -> np.ndarray:
    """A private host copy of a `checkpoint_value` (an array or a `SlicedValue`).

    Args:
        value: The value.
        into: A previous copy, refilled when it has the value's shape and dtype.
    """
    shape, dtype = tuple(value.shape), np.dtype(value.dtype)
    if into is None or into.shape != shape or into.dtype != dtype:
        into = None
    if isinstance(value, SlicedValue):
        parts = list(value.slices())
        if not parts:
            return np.zeros(shape, dtype)
        return np.concatenate(parts, axis=0, out=into)
    if into is None:
        return np.array(value, copy=True)
    np.copyto(into, value)
    return into
