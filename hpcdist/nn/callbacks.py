"""Callbacks for `Model.fit` (Keras).

History, ProgressBar, EarlyStopping, LearningRateScheduler, TerminateOnNaN, ModelCheckpoint,
BackupAndRestore, and (from their own modules) CSVLogger and TensorBoard.

Batch logs: after each training step, a callback that defines ``on_train_batch_end`` (other
than `ProgressBar`) receives Keras' batch logs, the epoch's running loss and metrics over all
replicas. Computing them is a small collective under MPI, so the callbacks must be the same on
every rank (as every hpcdist program is SPMD); without such a callback ``logs`` is None and
nothing is computed.
"""

from __future__ import annotations

import math
import shutil
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from tqdm import tqdm

from hpcdist.checkpoint import (
    Checkpoint,
    CheckpointManager,
    checkpoint_communicator,
    is_checkpoint_chief,
)
from hpcdist.nn.callback_base import Callback, CallbackList, is_chief
from hpcdist.nn.csv_logger import CSVLogger
from hpcdist.nn.tensorboard_callback import TensorBoard

__all__ = [
    "BackupAndRestore",
    "CSVLogger",
    "Callback",
    "CallbackList",
    "EarlyStopping",
    "History",
    "LearningRateScheduler",
    "ModelCheckpoint",
    "ProgressBar",
    "TensorBoard",
    "TerminateOnNaN",
]


class History(Callback):
    """Records each epoch's logs in ``history`` (returned by `Model.fit`)."""

    def __init__(self) -> None:
        super().__init__()
        self.history: dict[str, list[float]] = {}
        self.epoch: list[int] = []

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Append the epoch's values."""
        self.epoch.append(epoch)
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(value)


class ProgressBar(Callback):
    """A per-epoch progress bar (tqdm) on the chief only; other ranks print nothing.

    Args:
        is_chief: Whether this process prints; by default the model's strategy decides.
        file: Stream to draw on.
    """

    reads_batch_logs = False  # it counts steps; the epoch's logs go on the bar at its end

    def __init__(self, is_chief: bool | None = None, file: Any = None) -> None:
        super().__init__()
        self.is_chief = is_chief
        self.file = file
        self._bar: Any = None

    def _chief(self) -> bool:
        if self.is_chief is not None:
            return self.is_chief
        return is_chief(self.model)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """Open the bar."""
        if not self._chief():
            return
        self._bar = tqdm(
            total=self.params.get("steps"),
            desc=f"Epoch {epoch + 1}/{self.params.get('epochs')}",
            unit="step",
            file=self.file or sys.stderr,
            leave=True,
            dynamic_ncols=True,
        )

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Advance."""
        if self._bar is not None:
            self._bar.update(1)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Show the epoch's metrics and close."""
        if self._bar is not None:
            self._bar.set_postfix({k: f"{v:.4f}" for k, v in (logs or {}).items()})
            self._bar.close()
            self._bar = None


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs.

    Args:
        monitor: Logged quantity, e.g. ``"val_loss"``.
        min_delta: Smallest change that counts as an improvement.
        patience: Epochs without improvement before stopping.
        mode: ``"min"``, ``"max"`` or ``"auto"`` (max for names containing "acc").
        restore_best_weights: Put back the best epoch's weights when stopping.
    """

    def __init__(
        self,
        monitor: str = "val_loss",
        min_delta: float = 0.0,
        patience: int = 0,
        mode: str = "auto",
        restore_best_weights: bool = False,
    ) -> None:
        super().__init__()
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"mode must be 'auto', 'min' or 'max', got {mode!r}")
        self.monitor, self.min_delta, self.patience = monitor, abs(min_delta), patience
        self.mode = ("max" if "acc" in monitor else "min") if mode == "auto" else mode
        self.restore_best_weights = restore_best_weights
        self.stopped_epoch = 0

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Reset."""
        self.wait, self.best, self.best_weights = 0, np.inf if self.mode == "min" else -np.inf, None

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Compare, count, maybe stop.

        Raises:
            KeyError: ``monitor`` is not in the logs.
        """
        logs = logs or {}
        if self.monitor not in logs:
            raise KeyError(f"EarlyStopping monitors {self.monitor!r}, logs have {sorted(logs)}")
        value = logs[self.monitor]
        better = (
            value < self.best - self.min_delta
            if self.mode == "min"
            else value > self.best + self.min_delta
        )
        if better:
            self.best, self.wait = value, 0
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            return
        self.wait += 1
        if self.wait > self.patience:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.restore_best_weights and self.best_weights is not None:
                self.model.set_weights(self.best_weights)


class TerminateOnNaN(Callback):
    """Stop training when the loss becomes NaN or infinite (Keras' callback).

    Checks the running loss of the epoch after every batch; the value is all-reduced over
    the replicas, so every rank stops after the same step. The chief prints
    ``Batch N: Invalid loss, terminating training``. Where no batch logs exist (the
    parameter-server `fit`), the epoch's loss is checked at the end of the epoch.
    """

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Stop if the loss is not finite."""
        self._check(f"Batch {batch}", logs)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Stop if the epoch's loss is not finite (and no batch check stopped already)."""
        if not self.model.stop_training:
            self._check(f"Epoch {epoch}", logs)

    def _check(self, where: str, logs: dict | None) -> None:
        loss = (logs or {}).get("loss")
        if loss is None or math.isfinite(float(loss)):
            return
        if is_chief(self.model):
            print(f"{where}: Invalid loss, terminating training", flush=True)
        self.model.stop_training = True


class LearningRateScheduler(Callback):
    """Set the optimizer's learning rate to ``schedule(epoch, lr)`` before each epoch.

    As in Keras, a ``schedule`` that does not take two arguments (the call raises
    `TypeError`) is called as ``schedule(epoch)``.

    Args:
        schedule: ``schedule(epoch, lr) -> lr`` or ``schedule(epoch) -> lr``.
        verbose: Print the new rate (chief only) when nonzero.
    """

    def __init__(self, schedule: Callable[..., float], verbose: int = 0) -> None:
        super().__init__()
        self.schedule = schedule
        self.verbose = verbose

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """Update the learning rate."""
        optimizer = self.model.optimizer
        try:
            lr = self.schedule(epoch, float(optimizer.learning_rate))
        except TypeError:  # Keras' fallback: the old one-argument form
            lr = self.schedule(epoch)
        optimizer.learning_rate = float(lr)
        if self.verbose and is_chief(self.model):
            print(f"Epoch {epoch + 1}: LearningRateScheduler setting learning rate to {lr}.")


class ModelCheckpoint(Callback):
    """Write the model (and optionally its optimizer) after every epoch, or when it improves.

    Args:
        filepath: File name; ``{epoch}`` and log keys are substituted (``ckpt-{epoch:02d}.h5``).
        monitor: Quantity for ``save_best_only``.
        save_best_only: Write only when ``monitor`` improves.
        save_weights_only: Without the optimizer state when True.
        mode: ``"min"``, ``"max"`` or ``"auto"``.
    """

    def __init__(
        self,
        filepath: str,
        monitor: str = "val_loss",
        save_best_only: bool = False,
        save_weights_only: bool = False,
        mode: str = "auto",
    ) -> None:
        super().__init__()
        self.filepath, self.monitor, self.save_best_only = filepath, monitor, save_best_only
        self.save_weights_only = save_weights_only
        self.mode = ("max" if "acc" in monitor else "min") if mode == "auto" else mode
        self.best = np.inf if self.mode == "min" else -np.inf
        self.saved: list[str] = []

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Write (collective: every rank calls it, the chief writes).

        Raises:
            KeyError: ``save_best_only`` and ``monitor`` is not logged.
        """
        logs = logs or {}
        if self.save_best_only:
            if self.monitor not in logs:
                raise KeyError(
                    f"ModelCheckpoint monitors {self.monitor!r}, logs have {sorted(logs)}"
                )
            value = logs[self.monitor]
            if not (value < self.best if self.mode == "min" else value > self.best):
                return
            self.best = value
        objects = {"model": self.model}
        if not self.save_weights_only and self.model.optimizer is not None:
            objects["optimizer"] = self.model.optimizer
        path = self.filepath.format(epoch=epoch + 1, **logs)
        self.saved.append(Checkpoint(**objects).write(path))


class BackupAndRestore(Callback):
    """Back up the training state; a restarted `fit` resumes from the last backup.

    Args:
        backup_dir: Directory of the backup (one checkpoint kept).
        save_freq: ``"epoch"`` (after every epoch) or an integer: every that many batches
            (counted across epochs, as Keras does), and a restart resumes at the start of the
            epoch that was running, from the weights and optimizer state of the backup.
        delete_checkpoint: Remove the backup when training finishes.

    Raises:
        ValueError: ``save_freq`` is neither ``"epoch"`` nor a positive integer.
    """

    reads_batch_logs = False  # counts batches only

    def __init__(
        self, backup_dir: str, save_freq: Any = "epoch", delete_checkpoint: bool = True
    ) -> None:
        super().__init__()
        if save_freq != "epoch" and (
            not isinstance(save_freq, int) or isinstance(save_freq, bool) or save_freq < 1
        ):
            raise ValueError(f"save_freq must be 'epoch' or a positive integer, got {save_freq!r}")
        self.backup_dir, self.delete_checkpoint = backup_dir, delete_checkpoint
        self.save_freq = save_freq
        self._manager: Any = None
        self._current_epoch = 0
        self._batches_since_save = 0

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Restore the backup if there is one and tell `fit` where to resume.

        The resume epoch reaches `fit` through `Model.resume_at_epoch`.
        """
        strategy = self.model.distribute_strategy
        self._batches_since_save = 0
        with self.model.strategy_scope():
            self._epoch = strategy.Variable(np.int64(-1), name="backup_epoch", trainable=False)
            ckpt = Checkpoint(model=self.model, optimizer=self.model.optimizer, epoch=self._epoch)
            self._manager = CheckpointManager(ckpt, self.backup_dir, max_to_keep=1)
            if self._manager.restore_or_initialize() is not None:
                self.model.resume_at_epoch(int(self._epoch.numpy()) + 1)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """Remember the running epoch (a batch backup resumes at its start)."""
        self._current_epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Save every ``save_freq`` batches (integer ``save_freq`` only)."""
        if self.save_freq == "epoch":
            return
        self._batches_since_save += 1
        if self._batches_since_save >= self.save_freq:
            self._batches_since_save = 0
            self._save(self._current_epoch - 1)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Save the state after this epoch (``save_freq="epoch"``)."""
        if self.save_freq == "epoch":
            self._save(epoch)

    def _save(self, completed_epoch: int) -> None:
        with self.model.strategy_scope():
            self._epoch.assign(completed_epoch, read_value=False)
            self._manager.save()

    def on_train_end(self, logs: dict | None = None) -> None:
        """Remove the backup (chief) once training completed."""
        if not self.delete_checkpoint:
            return
        comm = checkpoint_communicator()
        if is_checkpoint_chief(comm):
            shutil.rmtree(self.backup_dir, ignore_errors=True)
        if comm is not None:
            comm.barrier()
