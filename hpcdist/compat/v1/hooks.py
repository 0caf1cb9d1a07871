"""TF1's session-run hooks: TF's ``basic_session_run_hooks`` with its rules and messages.

Hooks read the global step with ``session.run(global_step)`` and log through
`hpcdist.logger.get_logger`. Differences from TF: `StopAtStepHook.last_step` lets a monitored
session bound its train op (exact stop with any number of workers); `CheckpointSaverHook`
writes HDF5 checkpoints through `hpcdist.compat.v1.saver.Saver` (no graph or events file);
`SummarySaverHook` (in `hpcdist.compat.v1.summary_hook`) writes the scalars it is given to a
TensorBoard event file; `StepCounterHook` keeps its rates in ``history``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from hpcdist.compat.v1.graph import get_default_graph
from hpcdist.compat.v1.saver import CheckpointSaverListener, Saver, default_saver
from hpcdist.compat.v1.session_run_hook import (
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
)
from hpcdist.compat.v1.step_timer import SecondOrStepTimer
from hpcdist.compat.v1.summary_hook import (
    SummarySaverHook,
    check_event_writer,
    fetch_tag,
    open_event_writer,
)
from hpcdist.compat.v1.variables import get_global_step
from hpcdist.logger import get_logger

__all__ = [
    "CheckpointSaverHook",
    "CheckpointSaverListener",
    "FeedFnHook",
    "FinalOpsHook",
    "LoggingTensorHook",
    "NanLossDuringTrainingError",
    "NanTensorHook",
    "SecondOrStepTimer",
    "StepCounterHook",
    "StopAtStepHook",
    "SummarySaverHook",
]


class _GlobalStepHook(SessionRunHook):
    """A hook fetching the global step at every run (found in the default graph at ``begin``)."""

    _global_step: Any = None

    def begin(self) -> None:
        """Find the global step (TF's RuntimeError when the graph has none)."""
        self._global_step = get_global_step(get_default_graph())
        if self._global_step is None:
            raise RuntimeError(f"Global step should be created to use {type(self).__name__}.")

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        """Fetch the global step."""
        return SessionRunArgs(self._global_step)

    def _due_step(self, timer: SecondOrStepTimer, context: Any, stale: int, ahead: int) -> Any:
        """The global step (re-read) when ``timer`` triggers for it, else None (TF's rule)."""
        if not timer.should_trigger_for_step(stale + ahead):
            return None
        step = int(context.session.run(self._global_step))
        return step if timer.should_trigger_for_step(step) else None


class StopAtStepHook(_GlobalStepHook):
    """Requests a stop when the global step reaches a step.

    Args:
        num_steps: Steps to run from the global step at session creation.
        last_step: The step at which to stop.

    Raises:
        ValueError: Neither or both given.
    """

    def __init__(self, num_steps: int | None = None, last_step: int | None = None) -> None:
        if num_steps is None and last_step is None:
            raise ValueError("One of num_steps or last_step must be specified.")
        if num_steps is not None and last_step is not None:
            raise ValueError("Only one of num_steps or last_step can be specified.")
        self._num_steps = num_steps
        self._last_step = last_step

    @property
    def last_step(self) -> int | None:
        """The step to stop at (None until the session is created when given ``num_steps``)."""
        return None if self._last_step is None else int(self._last_step)

    def after_create_session(self, session: Any, coord: Any) -> None:
        """With ``num_steps``: last step = the global step now + ``num_steps``."""
        del coord
        if self._last_step is None:
            self._last_step = int(session.run(self._global_step)) + self._num_steps

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Request a stop once the global step (re-read when near) reached the last step.

        Near: the step fetched before the run plus one (TF's estimate), or the step this
        process's train op left, when later (the fetched step is stale by the other workers'
        steps; the train op's is not).
        """
        estimate = int(run_values.results) + 1
        known = getattr(run_context.session, "known_step", None)
        if known is not None:
            estimate = max(estimate, known)
        if estimate >= self._last_step:
            step = int(run_context.session.run(self._global_step))
            if step >= self._last_step:
                run_context.request_stop()


class CheckpointSaverHook(_GlobalStepHook):
    """Saves a checkpoint every ``save_secs`` seconds or ``save_steps`` steps.

    Saves when the session is created, whenever the timer triggers, and at ``end`` if the
    global step moved since the last save. Files are ``<checkpoint_dir>/model.ckpt-<step>.h5``.

    Args:
        checkpoint_dir: Where to save.
        save_secs: Seconds between saves.
        save_steps: Global steps between saves.
        saver: The `Saver` (default: the scaffold's, else the graph's ``SAVERS`` collection,
            else a new ``Saver(sharded=True, max_to_keep=5)`` of the global variables).
        checkpoint_basename: File prefix.
        scaffold: A scaffold whose ``saver`` to use.
        listeners: `CheckpointSaverListener` objects.
        save_graph_def: Accepted (no graph file is written).

    Raises:
        ValueError: Neither or both of ``save_secs``/``save_steps``, or both ``saver`` and
            ``scaffold``.
    """

    def __init__(
        self,
        checkpoint_dir: str,
        save_secs: float | None = None,
        save_steps: int | None = None,
        saver: Saver | None = None,
        checkpoint_basename: str = "model.ckpt",
        scaffold: Any = None,
        listeners: list[CheckpointSaverListener] | None = None,
        save_graph_def: bool = True,
    ) -> None:
        del save_graph_def
        get_logger().info("Create CheckpointSaverHook.")
        if saver is not None and scaffold is not None:
            raise ValueError("You cannot provide both saver and scaffold.")
        self._saver = saver
        self._save_path = os.path.join(checkpoint_dir, checkpoint_basename)
        self._scaffold = scaffold
        self._timer = SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)
        self._listeners = list(listeners or [])

    def begin(self) -> None:
        """Find the global step (RuntimeError without one) and tell the listeners."""
        super().begin()
        for listener in self._listeners:
            listener.begin()

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Save the checkpoint of the step the session starts at."""
        del coord
        step = int(session.run(self._global_step))
        self._save(session, step)
        self._timer.update_last_triggered_step(step)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Save when the timer triggers (re-reading the step); a listener may request a stop."""
        step = self._due_step(self._timer, run_context, int(run_values.results), 1000000)
        if step is not None:
            self._timer.update_last_triggered_step(step)
            if self._save(run_context.session, step):
                run_context.request_stop()

    def end(self, session: Any) -> None:
        """Save if the step moved since the last save, then tell the listeners."""
        last_step = int(session.run(self._global_step))
        if last_step != self._timer.last_triggered_step():
            self._save(session, last_step)
        for listener in self._listeners:
            listener.end(session, last_step)

    def _save(self, session: Any, step: int) -> bool:
        """Save at ``step`` with the listeners around; whether one of them asked to stop."""
        log = get_logger()
        log.info("Calling checkpoint listeners before saving checkpoint %d...", step)
        for listener in self._listeners:
            listener.before_save(session, step)
        log.info("Saving checkpoints for %d into %s.", step, self._save_path)
        self._get_saver().save(session, self._save_path, global_step=step)
        log.info("Calling checkpoint listeners after saving checkpoint %d...", step)
        should_stop = False
        for listener in self._listeners:
            if listener.after_save(session, step):
                log.info(
                    "A CheckpointSaverListener requested that training be stopped. listener: %s",
                    listener,
                )
                should_stop = True
        return should_stop

    def _get_saver(self) -> Saver:
        """The saver given, else the scaffold's, else `default_saver` of the graph."""
        if self._saver is None and self._scaffold is not None:
            self._saver = getattr(self._scaffold, "saver", None)
        if self._saver is None:
            self._saver = default_saver(self._global_step.graph)
        return self._saver


class LoggingTensorHook(SessionRunHook):
    """Logs the values of tensors every N local steps, every N seconds, or at the end.

    Args:
        tensors: ``{tag: fetchable}`` (logged in sorted tag order), or a list of fetchables
            (variables, functions) logged by name in list order.
        every_n_iter: Log every this many ``run`` calls of this session (the first one too).
        every_n_secs: Log every this many seconds.
        at_end: Also log when the session ends.
        formatter: ``fn(dict tag -> value) -> str``; default ``"tag = value, ..."``.

    Raises:
        ValueError: Not (``at_end`` and/or exactly one of ``every_n_iter``/``every_n_secs``),
            or ``every_n_iter <= 0``.
    """

    def __init__(
        self,
        tensors: dict[str, Any] | list[Any],
        every_n_iter: int | None = None,
        every_n_secs: float | None = None,
        at_end: bool = False,
        formatter: Callable[[dict[str, Any]], str] | None = None,
    ) -> None:
        only_log_at_end = at_end and every_n_iter is None and every_n_secs is None
        if not only_log_at_end and (every_n_iter is None) == (every_n_secs is None):
            raise ValueError(
                "either at_end and/or exactly one of every_n_iter and every_n_secs must be "
                f"provided; got every_n_iter={every_n_iter}, every_n_secs={every_n_secs}"
            )
        if every_n_iter is not None and every_n_iter <= 0:
            raise ValueError(f"Invalid every_n_iter={every_n_iter}: expected a positive integer.")
        is_dict = isinstance(tensors, dict)
        self._tensors = dict(tensors) if is_dict else {fetch_tag(t): t for t in tensors}
        self._tag_order = sorted(self._tensors) if is_dict else list(self._tensors)
        self._formatter = formatter
        self._timer = SecondOrStepTimer(every_n_secs, every_n_iter) if not only_log_at_end else None
        self._log_at_end = at_end
        self._iter_count = 0
        self._should_trigger = False

    def begin(self) -> None:
        """Start counting runs from zero."""
        if self._timer is not None:
            self._timer.reset()
        self._iter_count = 0

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        """Fetch the tensors when this run is due."""
        timer = self._timer
        self._should_trigger = timer is not None and timer.should_trigger_for_step(self._iter_count)
        return SessionRunArgs(dict(self._tensors)) if self._should_trigger else None

    def _log_tensors(self, values: dict[str, Any]) -> None:
        timer = self._timer
        elapsed = None if timer is None else timer.update_last_triggered_step(self._iter_count)[0]
        with np.printoptions(suppress=True):
            if self._formatter is not None:
                get_logger().info(self._formatter(values))
                return
            stats = ", ".join(f"{tag} = {values[tag]}" for tag in self._tag_order)
            get_logger().info("%s%s", stats, "" if elapsed is None else f" ({elapsed:.3f} sec)")

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Log the values fetched, if this run was due."""
        del run_context
        if self._should_trigger:
            self._log_tensors(run_values.results)
        self._iter_count += 1

    def end(self, session: Any) -> None:
        """With ``at_end``, log the tensors' final values."""
        if self._log_at_end:
            self._log_tensors(session.run(dict(self._tensors)))


class NanLossDuringTrainingError(RuntimeError):
    """The loss was NaN (raised by `NanTensorHook`)."""

    def __init__(self) -> None:
        super().__init__("NaN loss during training.")


class NanTensorHook(SessionRunHook):
    """Raises, or requests a stop, when the loss is NaN.

    Args:
        loss_tensor: The loss (a function, variable or placeholder).
        fail_on_nan_loss: Raise `NanLossDuringTrainingError` (True) or request a stop.
    """

    def __init__(self, loss_tensor: Any, fail_on_nan_loss: bool = True) -> None:
        self._loss_tensor = loss_tensor
        self._fail_on_nan_loss = fail_on_nan_loss

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        """Fetch the loss."""
        return SessionRunArgs(self._loss_tensor)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Raise `NanLossDuringTrainingError` (or request a stop) when the loss is NaN."""
        if np.any(np.isnan(np.asarray(run_values.results, dtype=np.float64))):
            message = "Model diverged with loss = NaN."
            if self._fail_on_nan_loss:
                get_logger().error(message)
                raise NanLossDuringTrainingError
            get_logger().warning(message)
            run_context.request_stop()


_NOT_INCREASED = (
    "It seems that global step (tf.train.get_global_step) has not been increased. Current value "
    "(could be stable): %s vs previous value: %s. You could increase the global step by passing "
    "tf.train.get_global_step() to Optimizer.apply_gradients or Optimizer.minimize."
)


class StepCounterHook(_GlobalStepHook):
    """Logs ``global_step/sec`` every N steps or seconds; ``history`` keeps ``(step, rate)``.

    Args:
        every_n_steps: Global steps between logs.
        every_n_secs: Seconds between logs.
        output_dir: Also write each rate as a TensorBoard scalar (tag ``global_step/sec``)
            to an event file there (needs the `tensorboard` package).
        summary_writer: An `hpcdist.nn.event_writer.EventWriter` to write the rates to.

    Raises:
        ValueError: Neither or both of ``every_n_steps``/``every_n_secs``.
    """

    def __init__(
        self,
        every_n_steps: int | None = 100,
        every_n_secs: float | None = None,
        output_dir: str | None = None,
        summary_writer: Any = None,
    ) -> None:
        if (every_n_steps is None) == (every_n_secs is None):
            raise ValueError(
                "exactly one of every_n_steps and every_n_secs should be provided; got "
                f"every_n_steps={every_n_steps}, every_n_secs={every_n_secs}"
            )
        self._timer = SecondOrStepTimer(every_steps=every_n_steps, every_secs=every_n_secs)
        check_event_writer("StepCounterHook", output_dir, summary_writer)
        self._output_dir, self._summary_writer = output_dir, summary_writer
        self._writer: Any = None
        self._last_global_step: int | None = None
        self._warned = 0
        self._summary_tag = "global_step/sec"
        self.history: list[tuple[int, float]] = []

    def begin(self) -> None:
        """Find the global step (RuntimeError without one); open the event file, if any."""
        super().begin()
        self._summary_tag = f"{self._global_step.name}/sec"
        self._writer = open_event_writer("StepCounterHook", self._output_dir, self._summary_writer)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Log the rate when the timer triggers; warn when the global step does not move."""
        stale = int(run_values.results)
        step = self._due_step(self._timer, run_context, stale, 1)
        if step is not None:
            elapsed_time, elapsed_steps = self._timer.update_last_triggered_step(step)
            if elapsed_time is not None:
                rate = elapsed_steps / elapsed_time if elapsed_time > 0 else float("inf")
                self.history.append((step, rate))
                get_logger().info("%s: %g", self._summary_tag, rate)
                if self._writer is not None:
                    self._writer.add_scalars({self._summary_tag: rate}, step)
                    self._writer.flush()
        if stale == self._last_global_step and self._warned < 5:
            self._warned += 1
            get_logger().warning(_NOT_INCREASED, stale, self._last_global_step)
        self._last_global_step = stale


class FinalOpsHook(SessionRunHook):
    """Runs ``final_ops`` when the session ends and keeps their values.

    Args:
        final_ops: Fetches run at ``end``.
        final_ops_feed_dict: Feeds for them.
    """

    def __init__(self, final_ops: Any, final_ops_feed_dict: dict | None = None) -> None:
        self._final_ops = final_ops
        self._final_ops_feed_dict = final_ops_feed_dict
        self._final_ops_values: Any = None

    @property
    def final_ops_values(self) -> Any:
        """The values of ``final_ops`` (None before ``end``)."""
        return self._final_ops_values

    def end(self, session: Any) -> None:
        """Run ``final_ops``."""
        if self._final_ops is not None:
            feeds = self._final_ops_feed_dict
            self._final_ops_values = session.run(self._final_ops, feed_dict=feeds)


class FeedFnHook(SessionRunHook):
    """Feeds ``feed_fn()`` to every run.

    Args:
        feed_fn: Returns a ``{placeholder: value}`` feed dict.
    """

    def __init__(self, feed_fn: Callable[[], dict]) -> None:
        self.feed_fn = feed_fn

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        """Add ``feed_fn()``'s feeds."""
        return SessionRunArgs(fetches=None, feed_dict=self.feed_fn())
