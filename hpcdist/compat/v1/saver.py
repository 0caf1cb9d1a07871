"""``tf.train.Saver`` and the checkpoint queries of TF1 (``latest_checkpoint``, ...).

A `Saver` writes the graph's variables by their TF names (``w``, ``w/Adagrad``,
``global_step``) into one hpcdist HDF5 checkpoint per save, ``<dir>/model.ckpt-<N>.h5``,
through `hpcdist.checkpoint.Checkpoint` and `hpcdist.checkpoint.CheckpointManager` (atomic
files, checksums, every value checked before any is assigned, TF's retention rules). In the
file a variable named ``w/Adagrad`` is the dataset ``variables/w/Adagrad/.ATTRIBUTES/
VARIABLE_VALUE`` (TF2's layout), so names that are prefixes of others (``w`` and
``w/Adagrad``) never clash.

The TF1 chief saves alone: every save and restore runs under
`hpcdist.checkpoint.collective.local_checkpoints`, with no collective, while the other workers
train. Values are read and written through the variables themselves (``numpy()`` and
``assign``), so a variable held in a parameter server's RMA window is saved like a local one.

Differences from TF: one ``.h5`` file per checkpoint instead of ``.index``/``.data-*``/
``.meta`` (no meta graph is written); the state file ``checkpoint`` is the JSON of
`CheckpointManager`. A save without ``global_step`` writes ``<save_path>.h5`` and names it the
newest checkpoint of the state file (`latest_checkpoint` returns it, as TF's), without adding it
to the checkpoints a later numbered save keeps listing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

import h5py
import numpy as np

from hpcdist.checkpoint.checkpoint import Checkpoint
from hpcdist.checkpoint.collective import local_checkpoints
from hpcdist.checkpoint.format import CheckpointCorruptError, CheckpointMismatchError
from hpcdist.checkpoint.manager import CheckpointManager
from hpcdist.checkpoint.state import STATE_FILE, read_state
from hpcdist.checkpoint.state import write_state as write_state_file
from hpcdist.compat.v1.graph import Graph, GraphKeys, get_default_graph
from hpcdist.errors import NotFoundError

__all__ = [
    "CheckpointSaverListener",
    "CheckpointState",
    "KeyNotFoundInCheckpointError",
    "Saver",
    "checkpoint_exists",
    "default_saver",
    "get_checkpoint_state",
    "latest_checkpoint",
]


class KeyNotFoundInCheckpointError(CheckpointMismatchError, NotFoundError):
    """A variable has no value in the checkpoint: TF's ``NotFoundError`` of a restore.

    Also a `CheckpointMismatchError` (a ``ValueError``), as hpcdist's restores raise.
    """


#: The root under which the variables are saved, and the leaf under each variable's name.
_ROOT = "variables"
_LEAF = ".ATTRIBUTES/VARIABLE_VALUE"


class _VariableValue:
    """A TF1 variable as `Checkpoint` sees it: read with ``numpy()``, written with ``assign``.

    Args:
        var: The variable (local, or in a parameter server's window).
    """

    def __init__(self, var: Any) -> None:
        self.var = var

    @property
    def shape(self) -> tuple[int, ...]:
        """The variable's shape."""
        return tuple(self.var.shape)

    def checkpoint_value(self) -> np.ndarray:
        """The value, read through the variable."""
        return np.asarray(self.var.numpy())

    def assign(self, value: Any, read_value: bool = True) -> Any:
        """Assign ``value`` (cast to the variable's dtype) through the variable."""
        self.var.assign(np.asarray(value, dtype=self.var.dtype), read_value=False)
        return self.var.numpy() if read_value else None


class _NamedVariables:
    """The variables of a saver, by TF name (a `hpcdist.core.trackable.Trackable`).

    Args:
        variables: Name -> variable.
    """

    def __init__(self, variables: dict[str, Any]) -> None:
        self._children = {f"{name}/{_LEAF}": _VariableValue(v) for name, v in variables.items()}

    def checkpoint_children(self) -> dict[str, Any]:
        """``{"<name>/.ATTRIBUTES/VARIABLE_VALUE": value}`` for every variable."""
        return dict(self._children)


def _by_name(var_list: Any) -> dict[str, Any]:
    """The variables of ``var_list`` (None, a list or a dict) by the name they are saved under.

    Raises:
        TypeError: ``var_list`` is not a list, tuple, dict or None.
        ValueError: Two variables have the same name.
    """
    if var_list is None:
        var_list = get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES)
        var_list += get_default_graph().get_collection("saveable_objects")
    if isinstance(var_list, dict):
        items: Iterable[tuple[str, Any]] = var_list.items()
    elif isinstance(var_list, list | tuple | set):
        items = ((v.name, v) for v in var_list)
    else:
        raise TypeError(
            f"Variables to save should be passed in a dict or a list, got {type(var_list).__name__}"
        )
    found: dict[str, Any] = {}
    for name, var in items:
        name = name[:-2] if name.endswith(":0") else name
        if name in found and found[name] is not var:
            raise ValueError(f"At least two variables have the same name: {name}")
        found[name] = var
    return found


def _file(save_path: str) -> str:
    """The file of a checkpoint prefix (``prefix.h5``), or ``save_path`` if it names one."""
    return save_path if save_path.endswith(".h5") else f"{save_path}.h5"


def _prefix(path: str) -> str:
    """The prefix of a checkpoint file (``.h5`` removed)."""
    return path[: -len(".h5")] if path.endswith(".h5") else path


def _datasets(path: str) -> dict[str, tuple[int, ...]] | None:
    """Dataset name -> shape in an HDF5 file, or None when the file cannot be read."""
    shapes: dict[str, tuple[int, ...]] = {}
    try:
        with h5py.File(path, "r") as f:
            f.visititems(
                lambda name, obj: (
                    shapes.__setitem__(name, tuple(obj.shape))
                    if isinstance(obj, h5py.Dataset)
                    else None
                )
            )
    except (OSError, KeyError, ValueError, RuntimeError):
        return None
    return shapes


class Saver:
    """``tf.train.Saver``: save and restore the variables of a TF1 graph.

    Args:
        var_list: Variables to save: a list (saved by name), a dict name -> variable, or None
            for the default graph's ``GLOBAL_VARIABLES`` (and ``saveable_objects``).
        max_to_keep: How many recent checkpoints to keep; 0 or None keeps all.
        keep_checkpoint_every_n_hours: Also keep one checkpoint per this many hours.
        name: Accepted (TF's op name prefix).
        sharded: Accepted: the chief writes one file per checkpoint.
        **kwargs: TF's other arguments (restore_sequentially, saver_def, builder, defer_build,
            allow_empty, write_version, pad_step_number, save_relative_paths, filename),
            accepted and unused.

    Raises:
        TypeError: ``var_list`` is neither a list nor a dict.
        ValueError: Two variables share a name, or there is nothing to save (unless
            ``allow_empty=True``).
    """

    def __init__(
        self,
        var_list: Any = None,
        max_to_keep: int | None = 5,
        keep_checkpoint_every_n_hours: float = 10000.0,
        name: str | None = None,
        sharded: bool = False,
        **kwargs: Any,
    ) -> None:
        del name, sharded
        self._variables = _by_name(var_list)
        if not self._variables and not kwargs.get("allow_empty"):
            raise ValueError("No variables to save")
        self.max_to_keep = max_to_keep
        self.keep_checkpoint_every_n_hours = keep_checkpoint_every_n_hours
        self._checkpoint = Checkpoint(**{_ROOT: _NamedVariables(self._variables)})
        self._managers: dict[tuple[str, str], CheckpointManager] = {}

    @property
    def variables(self) -> dict[str, Any]:
        """The variables saved, by name."""
        return dict(self._variables)

    @property
    def last_checkpoints(self) -> list[str]:
        """Prefixes of the kept checkpoints written by this saver, oldest first."""
        return [_prefix(p) for m in self._managers.values() for p in m.checkpoints]

    def _manager(self, directory: str, basename: str) -> CheckpointManager:
        key = (os.path.abspath(directory), basename)
        if key not in self._managers:
            self._managers[key] = CheckpointManager(
                self._checkpoint,
                directory,
                max_to_keep=self.max_to_keep or None,
                keep_checkpoint_every_n_hours=self.keep_checkpoint_every_n_hours,
                checkpoint_name=basename,
            )
        return self._managers[key]

    def save(
        self,
        sess: Any,
        save_path: str,
        global_step: Any = None,
        latest_filename: str | None = None,
        meta_graph_suffix: str = "meta",
        write_meta_graph: bool = True,
        write_state: bool = True,
        strip_default_attrs: bool = False,
        save_debug_info: bool = False,
    ) -> str:
        """Save the variables to ``<save_path>-<global_step>.h5`` (this process alone).

        Args:
            sess: The session (values are read through the variables).
            save_path: Prefix, e.g. ``"/ckpt/model.ckpt"``.
            global_step: A step number, or a variable holding it (read now); None writes
                ``<save_path>.h5`` without numbering, named the latest in the state file.
            latest_filename: Accepted (the state file is always ``checkpoint``).
            meta_graph_suffix: Accepted (no meta graph is written).
            write_meta_graph: Accepted.
            write_state: Whether the state file lists the new checkpoint (and old ones beyond
                ``max_to_keep`` are deleted).
            strip_default_attrs: Accepted.
            save_debug_info: Accepted.

        Returns:
            The checkpoint prefix, ``"<dir>/model.ckpt-<N>"`` (the file is ``<prefix>.h5``).

        Raises:
            TypeError: ``sess`` is None.
            CheckpointWriteError: The file or the state file could not be written.
        """
        del latest_filename, meta_graph_suffix, write_meta_graph
        del strip_default_attrs, save_debug_info
        if sess is None:
            raise TypeError("'sess' must be a Session; got None")
        with local_checkpoints():
            if global_step is None:
                path = self._checkpoint.write(_file(save_path))
                if write_state:
                    _record_latest(os.path.dirname(save_path) or ".", path)
                return _prefix(path)
            if not isinstance(global_step, int | np.integer):
                global_step = sess.run(global_step)
            step = int(global_step)
            if not write_state:
                return _prefix(self._checkpoint.write(_file(f"{save_path}-{step}")))
            directory = os.path.dirname(save_path) or "."
            manager = self._manager(directory, os.path.basename(save_path))
            return _prefix(manager.save(checkpoint_number=step))

    def restore(self, sess: Any, save_path: str | None) -> None:
        """Assign every variable its value in ``save_path`` (a prefix, with or without ``.h5``).

        Every value is checked (present, shape, checksum) before any variable is assigned: a
        restore that fails changes nothing.

        Raises:
            ValueError: ``save_path`` is None or names no checkpoint (TF's messages).
            KeyNotFoundInCheckpointError: A variable has no value in the file ("Key ... not
                found in checkpoint"): TF's ``NotFoundError``, and a `CheckpointMismatchError`.
            CheckpointMismatchError: A value of another shape.
            CheckpointCorruptError: The file is truncated or corrupt.
        """
        del sess
        if save_path is None:
            raise ValueError("Can't load save_path when it is None.")
        path = _file(save_path)
        if not os.path.exists(path):
            raise ValueError(
                f"The passed save_path is not a valid checkpoint: {save_path} (expected the "
                f"file {path})"
            )
        shapes = _datasets(path)
        if shapes is not None:
            missing = [n for n in self._variables if f"{_ROOT}/{n}/{_LEAF}" not in shapes]
            if missing:
                raise KeyNotFoundInCheckpointError(
                    f"Key {missing[0]} not found in checkpoint {path} (nothing was restored; "
                    f"variables without a value: {missing})"
                )
        with local_checkpoints():
            self._checkpoint.read(path)

    def recover_last_checkpoints(self, checkpoint_paths: list[str]) -> None:
        """Accepted for TF compatibility: kept checkpoints are read from the state file."""
        del checkpoint_paths


def _record_latest(directory: str, path: str) -> None:
    """Name ``path`` (an unnumbered save) the newest checkpoint of ``directory``'s state file.

    The numbered checkpoints the file lists stay listed (and managed); the unnumbered one is
    the latest until the next save.
    """
    try:
        state = read_state(directory)
    except ValueError:  # a damaged state file: replaced, as TF overwrites it
        state = None
    entries = state["checkpoints"] if state is not None else []
    last_preserved = state["last_preserved"] if state is not None else time.time()
    write_state_file(directory, path, entries, last_preserved)


class CheckpointSaverListener:
    """Told around each save of a `CheckpointSaverHook` (subclass and override)."""

    def begin(self) -> None:
        """Called once, from the hook's ``begin``."""

    def before_save(self, session: Any, global_step_value: int) -> None:
        """Called before each save."""

    def after_save(self, session: Any, global_step_value: int) -> bool | None:
        """Called after each save; returning True requests that training stop."""

    def end(self, session: Any, global_step_value: int) -> None:
        """Called once at the end, after the last save."""


def default_saver(graph: Graph | None = None) -> Saver:
    """The saver of ``graph``'s ``SAVERS`` collection, else a new one of its global variables.

    The new one is ``Saver(sharded=True, max_to_keep=5, allow_empty=True)``, as TF's scaffold
    makes (not added to the collection: the graph may be finalized).

    Raises:
        RuntimeError: The collection holds more than one saver (TF's message).
    """
    graph = graph or get_default_graph()
    savers = graph.get_collection(GraphKeys.SAVERS)
    if len(savers) > 1:
        raise RuntimeError(
            f"More than one item in collection {GraphKeys.SAVERS}. Please indicate which one to "
            f"use by passing it to the constructor (found {len(savers)} savers)."
        )
    if savers:
        return savers[0]
    with graph.as_default():
        return Saver(sharded=True, max_to_keep=5, allow_empty=True)


class CheckpointState:
    """What ``get_checkpoint_state`` returns (TF's ``CheckpointState`` proto).

    Attributes:
        model_checkpoint_path: The newest checkpoint's prefix.
        all_model_checkpoint_paths: Every kept checkpoint's prefix, oldest first.
        all_model_checkpoint_timestamps: Their save times (seconds since the epoch).
    """

    def __init__(self, paths: list[str], timestamps: list[float]) -> None:
        self.model_checkpoint_path = paths[-1]
        self.all_model_checkpoint_paths = list(paths)
        self.all_model_checkpoint_timestamps = list(timestamps)

    def __repr__(self) -> str:
        return (
            f"CheckpointState(model_checkpoint_path={self.model_checkpoint_path!r}, "
            f"all_model_checkpoint_paths={self.all_model_checkpoint_paths!r})"
        )


def get_checkpoint_state(
    checkpoint_dir: str, latest_filename: str | None = None
) -> CheckpointState | None:
    """The checkpoints listed in ``checkpoint_dir``'s state file whose files exist, or None.

    Args:
        checkpoint_dir: The directory.
        latest_filename: The state file's name (default ``checkpoint``).
    """
    try:
        state = read_state(checkpoint_dir, latest_filename or STATE_FILE)
    except ValueError as exc:  # the file exists but is not the JSON the managers write
        raise CheckpointCorruptError(
            f"{exc}: expected the JSON written by CheckpointManager"
        ) from None
    if state is None:
        return None
    entries = [(p, t) for p, t in state["checkpoints"] if os.path.exists(p)]
    latest = state["latest"]
    if latest is not None and os.path.exists(latest) and latest not in (p for p, _ in entries):
        # an unnumbered save: the newest, listed last (its time is the file's)
        entries.append((latest, os.path.getmtime(latest)))
    if not entries:
        return None
    return CheckpointState([_prefix(p) for p, _ in entries], [t for _, t in entries])


def latest_checkpoint(checkpoint_dir: str, latest_filename: str | None = None) -> str | None:
    """The newest checkpoint prefix in ``checkpoint_dir`` (``.../model.ckpt-N``), or None."""
    state = get_checkpoint_state(checkpoint_dir, latest_filename)
    return state.model_checkpoint_path if state is not None else None


def checkpoint_exists(checkpoint_prefix: str) -> bool:
    """Whether a checkpoint file exists for ``checkpoint_prefix`` (with or without ``.h5``)."""
    return os.path.isfile(_file(checkpoint_prefix))
