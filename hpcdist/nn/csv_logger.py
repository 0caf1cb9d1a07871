"""`CSVLogger`: Keras' callback streaming each epoch's logs to a CSV file, on the chief."""

from __future__ import annotations

import collections.abc
import csv
import os
from typing import Any

import numpy as np

from hpcdist.nn.callback_base import Callback, is_chief

__all__ = ["CSVLogger"]


def _cell(value: Any) -> Any:
    """Keras' ``handle_value``: strings as they are, iterables as ``"[a, b]"``."""
    if isinstance(value, str):
        return value
    if isinstance(value, collections.abc.Iterable) and not (
        isinstance(value, np.ndarray) and value.ndim == 0
    ):
        return f'"[{", ".join(map(str, value))}]"'
    return value


class CSVLogger(Callback):
    """Write one row per epoch: ``epoch`` (0-based), then the logs' keys in sorted order.

    Keras 3's format, byte for byte: the ``excel`` dialect (CRLF line ends) with
    ``separator``; the columns are fixed by the first epoch's keys, and when they hold no
    ``val_`` key the ``val_`` twins of every key are added (``NA`` where missing). With
    ``append`` an existing file is continued, without a second header. Only the chief writes;
    other ranks never open the file.

    Args:
        filename: The CSV file.
        separator: Field separator.
        append: Continue an existing file instead of overwriting it.
    """

    reads_batch_logs = False

    def __init__(
        self, filename: str | os.PathLike, separator: str = ",", append: bool = False
    ) -> None:
        super().__init__()
        self.sep = separator
        self.filename = os.fspath(filename)
        self.append = append
        self.keys: list[str] | None = None
        self._file: Any = None
        self._writer: Any = None
        self._header = True

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Open the file (chief only)."""
        self.keys, self._writer = None, None
        if not is_chief(self.model):
            return
        self._header = True
        if self.append and os.path.exists(self.filename):
            with open(self.filename, newline="") as existing:
                self._header = not existing.readline()
        if self._file is not None and not self._file.closed:
            self._file.close()
        self._file = open(self.filename, "a" if self.append else "w", newline="")  # noqa: SIM115

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Write the epoch's row (chief only)."""
        if self._file is None or self._file.closed:
            return
        logs = logs or {}
        if self.keys is None:
            self.keys = sorted(logs)
            if self.keys and not any(k.startswith("val_") for k in self.keys):
                self.keys.extend(f"val_{k}" for k in list(self.keys))
        if self._writer is None:
            dialect = type("Dialect", (csv.excel,), {"delimiter": self.sep})
            self._writer = csv.DictWriter(
                self._file, fieldnames=["epoch", *self.keys], dialect=dialect
            )
            if self._header:
                self._writer.writeheader()
        row = {"epoch": epoch, **{k: _cell(logs.get(k, "NA")) for k in self.keys}}
        self._writer.writerow(row)
        self._file.flush()

    def on_train_end(self, logs: dict | None = None) -> None:
        """Close the file."""
        if self._file is not None and not self._file.closed:
            self._file.close()
        self._writer = None
