"""`TensorBoard`: Keras' callback writing the training curves as TensorBoard event files.

Needs the optional extra ``pip install hpcdist[tensorboard]`` (the `tensorboard` package, not
TensorFlow); without it the package still imports and constructing the callback raises an
`ImportError` that names the extra. Only the chief writes (rank 0 under
`MultiWorkerMirroredStrategy`, the coordinator under `ParameterServerStrategy`); every rank
must still have the callback, as every callback of an SPMD program (the number of examples
per epoch is read with a small all-reduce).
"""

from __future__ import annotations

import os
import time
from typing import Any

from hpcdist.nn import event_writer
from hpcdist.nn.callback_base import Callback, is_chief
from hpcdist.nn.event_writer import EventWriter
from hpcdist.strategies import ParameterServerStrategy

__all__ = ["TensorBoard"]


def _check_update_freq(update_freq: Any) -> Any:
    if update_freq in ("epoch", "batch"):
        return 1 if update_freq == "batch" else "epoch"
    if isinstance(update_freq, int) and not isinstance(update_freq, bool) and update_freq > 0:
        return update_freq
    raise ValueError(
        f"update_freq must be 'epoch', 'batch' or a positive integer, got {update_freq!r}"
    )


class TensorBoard(Callback):
    """Write loss, metrics, learning rate and samples/s as TensorBoard scalars (Keras' layout).

    After every epoch, in ``log_dir/train``: ``epoch_<name>`` for each training log (``loss``,
    the metrics, hpcdist's ``time_s``), ``epoch_learning_rate`` (the optimizer's rate at the
    end of the epoch) and ``epoch_samples_per_second`` (the examples of the epoch, all replicas
    together, over its ``time_s``); in ``log_dir/validation``: ``epoch_<name>`` for each
    ``val_<name>``. The step is the epoch (0-based). The examples are counted after the
    epoch's last step when the number of steps is known (arrays, ``steps_per_epoch``, datasets
    of known cardinality), else at the epoch's end when it has no validation pass (which
    resets the count); otherwise no ``epoch_samples_per_second`` is written.

    With ``update_freq="batch"`` or ``N``, also ``batch_<name>`` (the epoch's running loss and
    metrics, as in Keras) every ``N`` steps, at the step's number counted from 1 across epochs.
    Values are 32-bit floats.

    Under `ParameterServerStrategy` steps run asynchronously and have no batch logs: only the
    epoch scalars are written.

    Args:
        log_dir: Directory of the ``train`` and ``validation`` event files.
        update_freq: ``"epoch"``, ``"batch"`` (every step) or a number of steps.

    Raises:
        ImportError: The `tensorboard` package is missing (``pip install hpcdist[tensorboard]``).
        ValueError: ``update_freq`` is not ``"epoch"``, ``"batch"`` or a positive integer.
    """

    def __init__(self, log_dir: str | os.PathLike = "logs", update_freq: Any = "epoch") -> None:
        super().__init__()
        event_writer.require("hd.nn.callbacks.TensorBoard")
        self.log_dir = os.fspath(log_dir)
        self.update_freq = _check_update_freq(update_freq)
        self.reads_batch_logs = self.update_freq != "epoch"
        self._writers: dict[str, Any] = {}
        self._global_batch = 0
        self._epoch_start = time.perf_counter()
        self._samples: float | None = None

    def _asynchronous(self) -> bool:
        """Steps are scheduled, not run, when the batch hook is called (parameter servers)."""
        return isinstance(self.model.distribute_strategy, ParameterServerStrategy)

    def _writer(self, run: str) -> Any:
        if run not in self._writers:
            self._writers[run] = EventWriter(os.path.join(self.log_dir, run), ".v2")
        return self._writers[run]

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Count steps from zero."""
        self._global_batch = 0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """Start the epoch's clock (used when the logs carry no ``time_s``)."""
        self._epoch_start = time.perf_counter()
        self._samples = None

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Write ``batch_<name>`` every ``update_freq`` steps (chief only)."""
        self._global_batch += 1
        if batch + 1 == self.params.get("steps") and not self._asynchronous():
            # the epoch's last step: count its examples before a validation pass resets them
            self._samples = self._epoch_samples()
        if self.update_freq == "epoch" or not logs or self._global_batch % self.update_freq:
            return
        if is_chief(self.model):
            values = {f"batch_{name}": value for name, value in logs.items()}
            self._writer("train").add_scalars(values, self._global_batch)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Write the epoch's scalars (every rank reads the example count; the chief writes)."""
        logs = dict(logs or {})
        train = {k: v for k, v in logs.items() if not k.startswith("val_")}
        val = {k[len("val_") :]: v for k, v in logs.items() if k.startswith("val_")}
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            train.setdefault("learning_rate", float(optimizer.learning_rate))
        samples = self._samples
        if samples is None and not any(k.startswith("val_") for k in logs):
            samples = self._epoch_samples()
        seconds = float(logs.get("time_s", time.perf_counter() - self._epoch_start))
        if samples is not None and seconds > 0:
            train.setdefault("samples_per_second", samples / seconds)
        if not is_chief(self.model):
            return
        for run, values in (("train", train), ("validation", val)):
            if values:
                writer = self._writer(run)
                writer.add_scalars({f"epoch_{k}": v for k, v in values.items()}, epoch)
                writer.flush()

    def _epoch_samples(self) -> float | None:
        """Examples trained on so far this epoch, all replicas (the loss tracker's count).

        A collective under MPI: every rank reads it at the same point.
        """
        tracker = getattr(self.model, "loss_tracker", None)
        if tracker is None:
            return None
        with self.model.strategy_scope():
            return float(tracker.count.numpy())

    def on_train_end(self, logs: dict | None = None) -> None:
        """Close the event files."""
        for writer in self._writers.values():
            writer.close()
        self._writers = {}
