"""TF1's ``SummarySaverHook``, writing scalars to a TensorBoard event file.

hpcdist's TF1 graph has no ``tf.summary`` ops, so the hook is told which values to record:
``summary_op`` takes what `LoggingTensorHook` takes (a ``{tag: fetchable}`` dict or a list of
fetchables) and writes each value as a scalar at the global step, with TF's timing rules.
The events are written by `hpcdist.nn.event_writer.EventWriter` (the `tensorboard` package,
the optional extra ``pip install hpcdist[tensorboard]``; never TensorFlow).
"""

from __future__ import annotations

import atexit
import os
from typing import Any

import numpy as np

from hpcdist.compat.v1.graph import get_default_graph
from hpcdist.compat.v1.session_run_hook import (
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
)
from hpcdist.compat.v1.step_timer import SecondOrStepTimer
from hpcdist.compat.v1.variables import get_global_step
from hpcdist.nn import event_writer
from hpcdist.nn.event_writer import EventWriter

__all__ = ["SummarySaverHook", "check_event_writer", "fetch_tag", "open_event_writer"]

_WRITERS: dict[str, Any] = {}


def check_event_writer(who: str, output_dir: str | None, summary_writer: Any) -> None:
    """Fail early when ``output_dir`` asks for event files and `tensorboard` is missing.

    Raises:
        ImportError: ``output_dir`` without ``summary_writer``, and no `tensorboard` package.
    """
    if summary_writer is None and output_dir:
        event_writer.require(f"{who}(output_dir={output_dir!r})")


def open_event_writer(who: str, output_dir: str | None, summary_writer: Any) -> Any:
    """``summary_writer`` if given, else the shared `EventWriter` of ``output_dir``, else None.

    One writer per directory (TF's ``SummaryWriterCache``): hooks writing to the same
    directory share one event file, so the ``SessionLog.START`` of one does not hide the
    other's points. The writers stay open (each write is flushed).

    Raises:
        ImportError: ``output_dir`` without ``summary_writer``, and no `tensorboard` package.
    """
    check_event_writer(who, output_dir, summary_writer)
    if summary_writer is not None or not output_dir:
        return summary_writer
    key = os.path.abspath(output_dir)
    writer = _WRITERS.get(key)
    if writer is None or writer.closed:
        writer = _WRITERS[key] = EventWriter(output_dir)
        atexit.register(writer.close)  # shared by hooks: closed when the program ends
    return writer


def fetch_tag(item: Any) -> str:
    """The tag of a fetchable given in a list (`LoggingTensorHook`, `SummarySaverHook`)."""
    return str(getattr(item, "name", None) or getattr(item, "__name__", None) or item)


def _scalar(tag: str, value: Any) -> float:
    array = np.asarray(value)
    if array.size != 1 or not np.issubdtype(array.dtype, np.number):
        raise ValueError(
            f"SummarySaverHook writes scalars: expected one number for {tag!r}, got "
            f"{array.dtype} of shape {array.shape}"
        )
    return float(array.reshape(()))


class SummarySaverHook(SessionRunHook):
    """Writes the values of ``summary_op`` every N global steps or seconds (TF's rules).

    A run is due when it is the session's first or the timer triggers for the step expected
    next; the due run fetches the values with its own run and they are written at the global
    step read after it (as TF writes a summary). The first run also writes TF's
    ``SessionLog.START`` at that step, so TensorBoard drops the points that an earlier attempt
    wrote past the step this one restored. Without ``output_dir`` or ``summary_writer``
    nothing is written (as in TF, which leaves the directory to `MonitoredTrainingSession`).

    Args:
        save_steps: Global steps between writes.
        save_secs: Seconds between writes.
        output_dir: Directory of the event file (created at ``begin``).
        summary_writer: An `hpcdist.nn.event_writer.EventWriter` used instead of a new file.
        scaffold: Its ``summary_op`` is used when ``summary_op`` is None.
        summary_op: The scalars: ``{tag: fetchable}``, a list of fetchables (tagged by their
            names, as `LoggingTensorHook` tags them), or one fetchable.

    Raises:
        ValueError: Neither or both of ``save_steps``/``save_secs``.
        ImportError: ``output_dir`` without the `tensorboard` package.
    """

    def __init__(
        self,
        save_steps: int | None = None,
        save_secs: float | None = None,
        output_dir: str | None = None,
        summary_writer: Any = None,
        scaffold: Any = None,
        summary_op: Any = None,
    ) -> None:
        self._timer = SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)
        check_event_writer("SummarySaverHook", output_dir, summary_writer)
        self._output_dir = output_dir
        self._summary_writer = summary_writer
        self._writer: Any = None
        if summary_op is None:
            summary_op = getattr(scaffold, "summary_op", None)
        if summary_op is None or isinstance(summary_op, dict):
            self._fetches = dict(summary_op or {})
        else:
            items = summary_op if isinstance(summary_op, (list, tuple)) else [summary_op]
            self._fetches = {fetch_tag(item): item for item in items}
        self._next_step: int | None = None
        self._request = False
        self._global_step: Any = None

    def begin(self) -> None:
        """Find the global step and open the event file.

        Raises:
            RuntimeError: The graph has no global step.
        """
        self._global_step = get_global_step(get_default_graph())
        if self._global_step is None:
            raise RuntimeError("Global step should be created to use SummarySaverHook.")
        self._writer = open_event_writer("SummarySaverHook", self._output_dir, self._summary_writer)
        self._next_step = None

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        """Fetch the global step, and the scalars when this run is due."""
        self._request = self._next_step is None or self._timer.should_trigger_for_step(
            self._next_step
        )
        requests: dict[str, Any] = {"global_step": self._global_step}
        if self._request and self._fetches:
            requests["summary"] = dict(self._fetches)
        return SessionRunArgs(requests)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Write the fetched scalars at the global step.

        Raises:
            ValueError: A fetched value is not a single number.
        """
        if self._writer is None:
            return
        # A monitored session reads its hooks' variables after the run's operations
        # (`AfterOperations`): the fetched global step is already this run's (TF's hook adds
        # one to a stale read).
        global_step = int(run_values.results["global_step"])
        if self._next_step is None or self._request:
            global_step = int(run_context.session.run(self._global_step))
        if self._next_step is None:
            self._writer.add_session_start(global_step)
        if self._request:
            self._timer.update_last_triggered_step(global_step)
            values = run_values.results.get("summary")
            if values:
                scalars = {tag: _scalar(tag, value) for tag, value in values.items()}
                self._writer.add_scalars(scalars, global_step)
            self._writer.flush()  # a crash keeps what was written
        self._next_step = global_step + 1

    def end(self, session: Any) -> None:
        """Flush the event file."""
        if self._writer is not None:
            self._writer.flush()
