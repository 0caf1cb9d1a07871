"""``tf.train.MonitoredTrainingSession``: create, restore, run with hooks, recover, close.

Sessions are created by `hpcdist.compat.v1.session_manager` (the chief initializes or
restores and publishes "ready"; the other workers wait for it).

``run`` calls the hooks around each run, and re-creates the session after an
`AbortedError`/`UnavailableError` (the chief restores again); ``run_step_fn`` then runs the
whole step function again. `SingularMonitoredSession` does not recover (TF's
``should_recover=False``). The session's step bound, the smallest ``last_step`` of its hooks,
keeps train ops from passing the last step (exact `StopAtStepHook`). A graph the session
finalized is unfinalized again when it closes, as in TF.
"""

from __future__ import annotations

import inspect
from typing import Any

from hpcdist.compat.v1.graph import get_default_graph
from hpcdist.compat.v1.hooks import CheckpointSaverHook, StepCounterHook, SummarySaverHook
from hpcdist.compat.v1.session import AfterOperations, Session
from hpcdist.compat.v1.session_manager import ChiefSessionCreator, Scaffold, WorkerSessionCreator
from hpcdist.compat.v1.session_run_hook import SessionRunArgs, SessionRunContext, SessionRunValues
from hpcdist.errors import AbortedError, OutOfRangeError, UnavailableError
from hpcdist.logger import get_logger
from hpcdist.nn import event_writer

__all__ = [
    "USE_DEFAULT",
    "ChiefSessionCreator",
    "MonitoredSession",
    "MonitoredTrainingSession",
    "Scaffold",
    "SingularMonitoredSession",
    "WorkerSessionCreator",
]

USE_DEFAULT = object()
_RECOVERABLE = (AbortedError, UnavailableError)


class StepContext:
    """What ``run_step_fn``'s function receives: the raw session and ``run_with_hooks``."""

    def __init__(self, session: Session, run_with_hooks: Any) -> None:
        self._session, self._run_with_hooks = session, run_with_hooks

    @property
    def session(self) -> Session:
        """The raw session (running it calls no hook)."""
        return self._session

    def run_with_hooks(self, *args: Any, **kwargs: Any) -> Any:
        """``run`` through the hooks."""
        return self._run_with_hooks(*args, **kwargs)

    def request_stop(self) -> None:
        """Stop: raises StopIteration, which ends a ``with MonitoredSession()`` block cleanly.

        Raises:
            StopIteration: Always (TF's rule: it propagates out of ``run_step_fn``).
        """
        raise StopIteration("step_fn has called request_stop()")


class MonitoredSession:
    """A session with hooks, recovery from aborted sessions, and a clean stop.

    Args:
        session_creator: A `ChiefSessionCreator` (default) or `WorkerSessionCreator`.
        hooks: Session-run hooks.
        stop_grace_period_secs: Accepted (nothing runs in the background).
    """

    _should_recover = True

    def __init__(
        self,
        session_creator: Any = None,
        hooks: list[Any] | None = None,
        stop_grace_period_secs: float = 120,
    ) -> None:
        del stop_grace_period_secs
        self._creator = session_creator or ChiefSessionCreator()
        self._hooks = list(hooks or [])
        self._should_stop = False
        self._closed = False
        self._sess: Session | None = None
        self._graph = get_default_graph()
        self._graph_was_finalized = self._graph.finalized
        for hook in self._hooks:
            hook.begin()
        self._create()

    # -- session ------------------------------------------------------------------------------

    def _create(self) -> None:
        """Create the session and tell the hooks; retried after an aborted creation."""
        while True:
            try:
                self._sess = self._creator.create_session()
                for hook in self._hooks:
                    hook.after_create_session(self._sess, None)
                bounds = [getattr(h, "last_step", None) for h in self._hooks]
                bounds = [int(b) for b in bounds if b is not None]
                self._sess.step_bound = min(bounds) if bounds else None
                return
            except _RECOVERABLE as exc:
                if not self._should_recover:
                    raise
                get_logger().info("session creation failed (%s); creating it again", exc)

    def _recover(self, exc: Exception) -> None:
        """Close the aborted session and create a new one (the chief restores again)."""
        get_logger().info("run failed (%s); re-creating the session", exc)
        if self._sess is not None:
            self._sess.close()
        self._create()

    @property
    def graph(self) -> Any:
        """The graph."""
        return self._graph if self._sess is None else self._sess.graph

    def should_stop(self) -> bool:
        """Whether a hook asked to stop, or the input ended."""
        return self._should_stop or self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Session is already closed.")
        if self._should_stop:
            raise RuntimeError("Run called even after should_stop requested.")

    # -- running ------------------------------------------------------------------------------

    def run(
        self, fetches: Any, feed_dict: Any = None, options: Any = None, run_metadata: Any = None
    ) -> Any:
        """Run ``fetches`` with the hooks; re-create the session after an aborted run.

        Raises:
            RuntimeError: Called after ``should_stop()`` became true, or a feed given by both
                a hook and the caller.
        """
        self._check_open()
        while True:
            try:
                return self._hooked_run(fetches, feed_dict, options, run_metadata)
            except _RECOVERABLE as exc:
                if not self._should_recover:
                    raise
                self._recover(exc)

    def _run_with_hooks(
        self, fetches: Any, feed_dict: Any = None, options: Any = None, run_metadata: Any = None
    ) -> Any:
        """``run`` through the hooks without recovery (``run_step_fn`` recovers)."""
        self._check_open()
        return self._hooked_run(fetches, feed_dict, options, run_metadata)

    def _hooked_run(self, fetches: Any, feed_dict: Any, options: Any, run_metadata: Any) -> Any:
        context = SessionRunContext(SessionRunArgs(fetches, feed_dict, options), self._sess)
        wanted: dict[int, Any] = {}
        feeds = dict(feed_dict or {})
        for i, hook in enumerate(self._hooks):
            args = hook.before_run(context)
            if args is None:
                continue
            wanted[i] = args.fetches
            for key, value in (args.feed_dict or {}).items():
                if key in feeds:
                    raise RuntimeError(f"Same tensor is fed by a SessionRunHook and user. {key!r}")
                feeds[key] = value
        # The hooks' fetches see the state the run left (AfterOperations), the caller's
        # variables are read before the update (TF's read does not wait for the train op).
        results = self._sess.run(
            {"caller": fetches, "hooks": AfterOperations(wanted)}, feed_dict=feeds or None
        )
        for i, hook in enumerate(self._hooks):
            hook.after_run(
                context, SessionRunValues(results["hooks"].get(i), options, run_metadata)
            )
        self._should_stop = self._should_stop or context.stop_requested
        return results["caller"]

    def run_step_fn(self, step_fn: Any) -> Any:
        """``step_fn(step_context)``; run again from the start on a new session if it aborts.

        ``step_context.request_stop()`` raises StopIteration out of here, which a
        ``with MonitoredSession()`` block catches (then ``should_stop()`` is true).

        Raises:
            ValueError: ``step_fn`` does not take ``(step_context)`` or ``(self, step_context)``.
            StopIteration: ``step_fn`` called ``step_context.request_stop()``.
        """
        params = list(inspect.signature(step_fn).parameters)
        if params not in (["step_context"], ["self", "step_context"]):
            raise ValueError(
                "`step_fn` may either have one `step_context` argument, or `self` and "
                f"`step_context` arguments if it's an instance method. Got {params} instead."
            )
        self._check_open()
        while True:
            try:
                return step_fn(StepContext(self._sess, self._run_with_hooks))
            except _RECOVERABLE as exc:
                if not self._should_recover:
                    raise
                self._recover(exc)

    # -- ending ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Call the hooks' ``end`` and close (a second close does nothing)."""
        self._close(call_end=True)

    def _close(self, call_end: bool) -> None:
        if self._closed:
            return
        try:
            if call_end and self._sess is not None:
                for hook in self._hooks:
                    hook.end(self._sess)
        finally:
            self._closed = True
            if self._sess is not None:
                self._sess.close()
            if not self._graph_was_finalized:
                self._graph.unfinalize()

    def __enter__(self) -> MonitoredSession:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        ended = exc_type is None or issubclass(exc_type, OutOfRangeError | StopIteration)
        if ended and exc_type is not None:
            self._should_stop = True
        self._close(call_end=ended)
        return ended and exc_type is not None


class SingularMonitoredSession(MonitoredSession):
    """A monitored session for one process: chief, with ``raw_session()``, no recovery.

    An `AbortedError` propagates (TF's ``should_recover=False``).

    Args:
        hooks: Hooks.
        scaffold: Scaffold.
        master: Target.
        config: Accepted.
        checkpoint_dir: Restore from here.
        stop_grace_period_secs: Accepted.
        checkpoint_filename_with_path: Restore this checkpoint.
    """

    _should_recover = False

    def __init__(
        self,
        hooks: list[Any] | None = None,
        scaffold: Scaffold | None = None,
        master: str = "",
        config: Any = None,
        checkpoint_dir: str | None = None,
        stop_grace_period_secs: float = 120,
        checkpoint_filename_with_path: str | None = None,
    ) -> None:
        creator = ChiefSessionCreator(
            scaffold, master, config, checkpoint_dir, checkpoint_filename_with_path
        )
        super().__init__(creator, hooks, stop_grace_period_secs)

    def raw_session(self) -> Session:
        """The session without hooks."""
        return self._sess


def MonitoredTrainingSession(  # noqa: N802 - TF's name
    master: str = "",
    is_chief: bool = True,
    checkpoint_dir: str | None = None,
    scaffold: Scaffold | None = None,
    hooks: list[Any] | None = None,
    chief_only_hooks: list[Any] | None = None,
    save_checkpoint_secs: Any = USE_DEFAULT,
    save_summaries_steps: Any = USE_DEFAULT,
    save_summaries_secs: Any = USE_DEFAULT,
    config: Any = None,
    stop_grace_period_secs: float = 120,
    log_step_count_steps: int = 100,
    max_wait_secs: float = 7200,
    save_checkpoint_steps: Any = USE_DEFAULT,
    summary_dir: str | None = None,
    save_graph_def: bool = True,
) -> MonitoredSession:
    """TF's training session: the chief restores/initializes and saves, the others wait.

    Chief hooks: ``chief_only_hooks``; with ``summary_dir`` or ``checkpoint_dir`` a
    `StepCounterHook` (``log_step_count_steps``) and a `SummarySaverHook` (every 100 steps by
    default; it writes nothing); a `CheckpointSaverHook` when ``checkpoint_dir`` is given
    (every ``save_checkpoint_steps``, or ``save_checkpoint_secs``, 600 s by default); then
    ``hooks``. Other workers: ``hooks``.
    """
    del save_graph_def
    if save_summaries_steps is USE_DEFAULT and save_summaries_secs is USE_DEFAULT:
        save_summaries_steps, save_summaries_secs = 100, None
    elif save_summaries_secs is USE_DEFAULT:
        save_summaries_secs = None
    elif save_summaries_steps is USE_DEFAULT:
        save_summaries_steps = None
    if save_checkpoint_steps is USE_DEFAULT and save_checkpoint_secs is USE_DEFAULT:
        save_checkpoint_steps, save_checkpoint_secs = None, 600
    elif save_checkpoint_secs is USE_DEFAULT:
        save_checkpoint_secs = None
    elif save_checkpoint_steps is USE_DEFAULT:
        save_checkpoint_steps = None
    scaffold = scaffold or Scaffold()
    if not is_chief:
        creator = WorkerSessionCreator(scaffold, master, config, max_wait_secs)
        return MonitoredSession(creator, hooks or [], stop_grace_period_secs)
    all_hooks = list(chief_only_hooks or [])
    creator = ChiefSessionCreator(scaffold, master, config, checkpoint_dir)
    summary_dir = summary_dir or checkpoint_dir
    # TF's hooks write events to summary_dir; here when the 'tensorboard' extra is installed.
    events_dir = summary_dir if event_writer.MISSING is None else None
    if summary_dir and log_step_count_steps and log_step_count_steps > 0:
        all_hooks.append(StepCounterHook(every_n_steps=log_step_count_steps, output_dir=events_dir))
    if summary_dir and (
        (save_summaries_steps and save_summaries_steps > 0)
        or (save_summaries_secs and save_summaries_secs > 0)
    ):
        all_hooks.append(
            SummarySaverHook(
                save_steps=save_summaries_steps,
                save_secs=save_summaries_secs,
                output_dir=events_dir,
            )
        )
    if checkpoint_dir and (
        (save_checkpoint_secs and save_checkpoint_secs > 0)
        or (save_checkpoint_steps and save_checkpoint_steps > 0)
    ):
        all_hooks.append(
            CheckpointSaverHook(
                checkpoint_dir,
                save_secs=save_checkpoint_secs,
                save_steps=save_checkpoint_steps,
                scaffold=scaffold,
            )
        )
    all_hooks.extend(hooks or [])
    return MonitoredSession(creator, all_hooks, stop_grace_period_secs)
