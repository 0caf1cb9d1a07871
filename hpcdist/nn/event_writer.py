"""TensorBoard event files, written with the `tensorboard` package and never TensorFlow.

Needs the optional extra ``pip install hpcdist[tensorboard]``. Without it this module still
imports, and `require` raises the error naming the extra (`hpcdist.nn.tensorboard_callback` and
`hpcdist.compat.v1.summary_hook` call it when they are asked to write events).

The records are TensorBoard's own: its ``RecordWriter`` (length, masked CRC-32C, data, CRC)
over a plain Python file, and its ``Event`` / ``Summary`` protocol buffers. TensorBoard's
``EventFileWriter`` is not used: it opens files through ``tf.io.gfile``, which imports
TensorFlow whenever TensorFlow is installed. Scalars are ``simple_value`` summaries (32-bit
floats, the format every TensorBoard reader takes), one event per call with all its values.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from types import TracebackType

try:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter
except ImportError as error:  # the optional extra is not installed
    MISSING: ImportError | None = error
else:
    MISSING = None

__all__ = ["MISSING", "EventWriter", "require"]


def require(who: str) -> None:
    """Raise a clear ImportError when the `tensorboard` package is not installed.

    Args:
        who: What needs it, for the message (``"TensorBoard(log_dir='logs')"``).
    """
    if MISSING is not None:
        raise ImportError(
            f"{who} writes TensorBoard events with the 'tensorboard' package, which is not "
            f"installed ({MISSING}): pip install hpcdist[tensorboard]"
        ) from MISSING


_uid = itertools.count()


class EventWriter:
    """Appends events to a new ``events.out.tfevents.*`` file in ``logdir``.

    Args:
        logdir: Directory of the file (created if missing).
        filename_suffix: Appended to the file name (Keras uses ``".v2"``).

    Attributes:
        path: The event file.
    """

    def __init__(self, logdir: str, filename_suffix: str = "") -> None:
        os.makedirs(logdir, exist_ok=True)
        name = (
            f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
            f"{os.getpid()}.{next(_uid)}{filename_suffix}"
        )
        self.path = os.path.join(logdir, name)
        self._file = open(self.path, "wb")  # noqa: SIM115 (closed by close())
        self._records = RecordWriter(self._file)
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))
        self.flush()

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._file.closed

    def _write(self, event: event_pb2.Event) -> None:
        if self._file.closed:
            raise ValueError(f"event file {self.path} is closed: expected an open writer")
        self._records.write(event.SerializeToString())

    def add_scalars(self, values: dict[str, float], step: int) -> None:
        """Write ``{tag: value}`` as scalars at ``step`` (one event).

        Raises:
            ValueError: The writer is closed.
            TypeError: A value is not a real number.
        """
        summary = summary_pb2.Summary(
            value=[
                summary_pb2.Summary.Value(tag=tag, simple_value=float(value))
                for tag, value in values.items()
            ]
        )
        self._write(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))

    def add_session_start(self, step: int) -> None:
        """Write TF's ``SessionLog.START`` at ``step``.

        TensorBoard then drops the events of earlier files with a step at or after ``step``:
        the orphaned points of a run that crashed and restarted from an older checkpoint.
        """
        log = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
        self._write(event_pb2.Event(wall_time=time.time(), step=int(step), session_log=log))

    def flush(self) -> None:
        """Push the events written so far to the file."""
        if not self._file.closed:
            self._records.flush()

    def close(self) -> None:
        """Flush and close (closing twice is harmless)."""
        if not self._file.closed:
            self._records.flush()
            self._records.close()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
