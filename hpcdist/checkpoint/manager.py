"""`CheckpointManager`: numbered checkpoints in a directory, with TF's retention rules.

The state file ``<directory>/checkpoint`` (JSON, replaced atomically after each checkpoint is
complete; `hpcdist.checkpoint.state`) lists the kept checkpoints with their timestamps, so a new
manager on the same directory continues where the last one stopped, and `latest_checkpoint`
finds the newest.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from typing import Any

from hpcdist.checkpoint.checkpoint import Checkpoint, CheckpointOptions
from hpcdist.checkpoint.collective import agree, checkpoint_communicator
from hpcdist.checkpoint.format import CheckpointCorruptError
from hpcdist.checkpoint.state import STATE_FILE, read_state, write_state
from hpcdist.logger import get_logger

__all__ = ["STATE_FILE", "CheckpointManager"]


class CheckpointManager:
    """Keeps the last ``max_to_keep`` checkpoints of ``checkpoint`` in ``directory``.

    Args:
        checkpoint: The `Checkpoint` to save and restore.
        directory: Where files and the state file live.
        max_to_keep: How many to keep; None keeps all; must be positive otherwise.
        keep_checkpoint_every_n_hours: Also keep one checkpoint per this many hours.
        checkpoint_name: File prefix (``ckpt`` -> ``ckpt-7.h5``).
        step_counter: A variable counting steps, read by ``checkpoint_interval`` (checkpoints
            are still numbered by the save counter, as in TF).
        checkpoint_interval: Save only when ``step_counter`` moved this far since the last save.
        init_fn: Called by `restore_or_initialize` when there is nothing to restore.

    Raises:
        ValueError: ``max_to_keep`` <= 0, or ``checkpoint_interval`` without ``step_counter``.
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        directory: str,
        max_to_keep: int | None,
        keep_checkpoint_every_n_hours: float | None = None,
        checkpoint_name: str = "ckpt",
        step_counter: Any = None,
        checkpoint_interval: int | None = None,
        init_fn: Callable[[], Any] | None = None,
    ) -> None:
        if max_to_keep is not None and max_to_keep <= 0:
            raise ValueError(f"max_to_keep must be a positive integer or None, got {max_to_keep}")
        if checkpoint_interval is not None and step_counter is None:
            raise ValueError("`step_counter` should be passed if `checkpoint_interval` is not None")
        self._checkpoint = checkpoint
        self.directory = directory
        self.max_to_keep = max_to_keep
        self.keep_hours = keep_checkpoint_every_n_hours
        self.checkpoint_name = checkpoint_name
        self.step_counter = step_counter
        self.checkpoint_interval = checkpoint_interval
        self.init_fn = init_fn
        self._last_saved_step: int | None = None
        os.makedirs(directory, exist_ok=True)
        self._entries: list[tuple[str, float]] = []
        self._last_preserved = time.time()
        self._recovered_latest: str | None = None
        self._load_state()

    # -- state file ---------------------------------------------------------------------------

    @property
    def _state_path(self) -> str:
        return os.path.join(self.directory, STATE_FILE)

    def _load_state(self) -> None:
        """Read the state file; a missing one means a new directory, a damaged one warns."""
        try:
            state = read_state(self.directory)
        except ValueError as exc:
            warnings.warn(
                f"{exc}; starting without its checkpoints (the files in the directory are left "
                "alone)",
                RuntimeWarning,
                stacklevel=3,
            )
            return
        if state is None:
            return
        self._entries = [(p, t) for p, t in state["checkpoints"] if os.path.exists(p)]
        self._last_preserved = state["last_preserved"]
        latest = state["latest"]
        if latest is not None and os.path.exists(latest):
            self._recovered_latest = latest  # a `Checkpoint.save` file: latest, not managed

    def _write_state(self, swept: tuple[list[tuple[str, float]], float, list[str]]) -> None:
        """Replace the state file with the entries of `_swept` (atomic)."""
        entries, last_preserved, _ = swept
        write_state(self.directory, entries[-1][0] if entries else None, entries, last_preserved)

    # -- queries ------------------------------------------------------------------------------

    @property
    def checkpoints(self) -> list[str]:
        """Paths of the kept checkpoints, oldest first."""
        return [p for p, _ in self._entries]

    @property
    def latest_checkpoint(self) -> str | None:
        """Path of the newest checkpoint, or None.

        Before this manager saved, the newest checkpoint the state file names, managed or not
        (one written by `Checkpoint.save`), as TF's.
        """
        return self._entries[-1][0] if self._entries else self._recovered_latest

    @property
    def checkpoint(self) -> Checkpoint:
        """The managed `Checkpoint`."""
        return self._checkpoint

    # -- saving -------------------------------------------------------------------------------

    def save(
        self,
        checkpoint_number: int | None = None,
        check_interval: bool = True,
        options: CheckpointOptions | None = None,
    ) -> str | None:
        """Save a checkpoint and apply the retention rules (collective).

        The chief writes the file and the state file. A rank whose ``directory`` differs from
        the chief's writes its own copy and state file there (TF's multi-worker tutorial gives
        each non-chief worker a temporary directory, which it deletes after the save).

        The number defaults to the checkpoint's ``save_counter`` after it is incremented
        (``ckpt-1``, ``ckpt-2``, ... as in TF, with or without a step counter);
        ``checkpoint_number`` names the file instead, and the save counter still counts the
        save. With ``checkpoint_interval`` (TF's rule), a step already saved is never saved
        again, and with ``check_interval`` a save less than an interval after the last one is
        skipped; a skipped save does not count.

        Returns:
            The path, or None when the save was skipped.

        Raises:
            CheckpointWriteError: The checkpoint or the state file could not be written (on
                every rank); the kept checkpoints and the state file are as before.
        """
        step = int(self.step_counter.numpy()) if self.step_counter is not None else None
        if self.checkpoint_interval is not None:
            last = self._last_saved_step
            if last is not None and (
                step == last or (check_interval and step < last + self.checkpoint_interval)
            ):
                return None
        ckpt = self._checkpoint
        ckpt.save_counter.assign_add(1, read_value=False)
        if checkpoint_number is None:
            checkpoint_number = int(ckpt.save_counter.numpy())
        prefix = os.path.join(self.directory, f"{self.checkpoint_name}-{checkpoint_number}")
        # raises on every rank if the chief could not write
        outcome = ckpt.write_with_outcome(prefix, options)
        path = outcome.path
        if self.checkpoint_interval is not None:
            self._last_saved_step = step
        kept = (list(self._entries), self._last_preserved)
        self._entries = [(p, t) for p, t in self._entries if p != path] + [(path, time.time())]
        comm = checkpoint_communicator()
        error = None
        if outcome.written_here:
            # After an asynchronous file, on the same writer thread: the state names complete
            # files only. After a synchronous one, now.
            try:
                ckpt.after_write(self._record_and_sweep)
            except Exception as exc:  # every rank must learn of it: agreed below
                error = exc
        else:
            self._sweep(delete=False)
        try:
            agree(comm, error, f"update the checkpoint state {self._state_path!r}")
        except BaseException:
            self._entries, self._last_preserved = kept
            raise
        return path

    def _record_and_sweep(self) -> None:
        """Write the state file with the retention rules applied, then delete what left."""
        self._write_state(self._swept())
        self._sweep()

    def _swept(self) -> tuple[list[tuple[str, float]], float, list[str]]:
        """The retention rules, changing nothing: (kept entries, last preserved, to delete)."""
        entries, last_preserved, leaving = list(self._entries), self._last_preserved, []
        if self.max_to_keep is not None:
            while len(entries) > self.max_to_keep:
                path, stamp = entries.pop(0)
                if self.keep_hours is not None and stamp - last_preserved >= self.keep_hours * 3600:
                    last_preserved = stamp  # preserved: no longer managed, never deleted
                else:
                    leaving.append(path)
        return entries, last_preserved, leaving

    def _sweep(self, delete: bool = True) -> None:
        """Apply the retention rules; with ``delete`` (the chief), remove the files that left.

        The chief writes the state file first (`_write_state`), so a state file never names a
        deleted checkpoint, and a failed state write deletes nothing.
        """
        self._entries, self._last_preserved, leaving = self._swept()
        for path in leaving if delete else ():
            if os.path.exists(path):
                os.remove(path)

    # -- restoring ----------------------------------------------------------------------------

    def restore_or_initialize(self) -> str | None:
        """Restore the newest readable checkpoint, else call ``init_fn``.

        A damaged newest file (missing, truncated, corrupt) is skipped with a warning and the
        next older one is tried. A readable checkpoint that does not fit the objects (a model
        that changed) raises, as TF does: skipping it would let the next saves delete every
        good checkpoint. A failed restore changes no object and no file.

        Returns:
            The path restored, or None after initialising.

        Raises:
            CheckpointMismatchError: The newest readable checkpoint does not fit (names the
                variable and both shapes) or has a newer format version.
        """
        for path in reversed(self.checkpoints):
            try:
                self._checkpoint.restore(path)
            except CheckpointCorruptError as exc:
                get_logger().warning("skipping unreadable checkpoint: %s", exc)
                continue
            if self.step_counter is not None:
                self._last_saved_step = int(self.step_counter.numpy())
            return path
        if self.init_fn is not None:
            self.init_fn()
        return None
