"""``tf.train.MonitoredTrainingSession``: create, restore, run with hooks, recover, close.

Sessions are created by `hpcdist.compat.v1.session_manager` (the chief initializes or
restores and publishes "ready"; the other workers wait for it).

``run`` calls the hooks around each run, and re-creates the session after an
`AbortedError`/`UnavailableError` (the chief restores again). The session's step bound, the
smallest ``last_step`` of its hooks, keeps train ops from passing the last step (exact
`StopAtStepHook`).
"""

from __future__ import annotations

import inspect
from typing import Any

from hpcdist.compat.v1.graph import get_default_graph
from hpcdist.compat.v1.hooks import CheckpointSaverHook, StepCounterHook
from hpcdist.compat.v1.session import Session
from hpcdist.compat.v1.session_manager import ChiefSessionCreator, Scaffold, WorkerSessionCreator
from hpcdist.compat.v1.session_run_hook import SessionRunArgs, SessionRunContext, SessionRunValues
from hpcdist.errors import AbortedError, OutOfRangeError, UnavailableError
from hpcdist.log import get_logger

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
        """Stop: ends the step function (raises StopIteration, caught by ``run_step_fn``)."""
        raise StopIteration("step_fn has requested the iterations to stop.")


class MonitoredSession:
    """A session with hooks, recovery from aborted sessions, and a clean stop.

    Args:
        session_creator: A `ChiefSessionCreator` (default) or `WorkerSessionCreator`.
        hooks: Session-run hooks.
        stop_grace_period_secs: Accepted (nothing runs in the background).
    """

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
        for hook in self._hooks:
            hook.begin()
        self._create()

    # -- session ------------------------------------------------------------------------------

    def _create(self) -> None:
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
                get_logger().info("session creation failed (%s); creating it again", exc)

    @property
    def graph(self) -> Any:
        """The graph."""
        return get_default_graph() if self._sess is None else self._sess.graph

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
                get_logger().info("run failed (%s); re-creating the session", exc)
                self._create()

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
        results = self._sess.run({"caller": fetches, "hooks": wanted}, feed_dict=feeds or None)
        for i, hook in enumerate(self._hooks):
            hook.after_run(
                context, SessionRunValues(results["hooks"].get(i), options, run_metadata)
            )
        self._should_stop = self._should_stop or context.stop_requested
        return results["caller"]

    def run_step_fn(self, step_fn: Any) -> Any:
        """``step_fn(step_context)`` once; a ``request_stop`` inside ends training.

        Raises:
            ValueError: ``step_fn`` does not take ``(step_context)`` or ``(self, step_context)``.
        """
        params = list(inspect.signature(step_fn).parameters)
        if inspect.ismethod(step_fn):
            params = ["self", *params]
        if (
            "step_context" not in params
            and len(params) != 1
            and (len(params) != 2 or params[0] != "self")
        ):
            raise ValueError(
                "`step_fn` may either have one `step_context` argument, or `self` and "
                f"`step_context` arguments if it's an instance method. Got {params} instead."
            )
        self._check_open()
        try:
            return step_fn(StepContext(self._sess, self.run))
        except StopIteration:
            self._should_stop = True
            return None

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

    def __enter__(self) -> MonitoredSession:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        ended = exc_type is None or issubclass(exc_type, OutOfRangeError | StopIteration)
        if ended and exc_type is not None:
            self._should_stop = True
        self._close(call_end=ended)
        return ended and exc_type is not None


class SingularMonitoredSession(MonitoredSession):
    """A monitored session for one process: chief, with ``raw_session()``.

    Args:
        hooks: Hooks.
        scaffold: Scaffold.
        master: Target.
        config: Accepted.
        checkpoint_dir: Restore from here.
        stop_grace_period_secs: Accepted.
        checkpoint_filename_with_path: Restore this checkpoint.
    """

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

    Chief hooks: ``chief_only_hooks``, a `StepCounterHook` (``log_step_count_steps``), a
    `CheckpointSaverHook` when ``checkpoint_dir`` is given (every ``save_checkpoint_steps``,
    or ``save_checkpoint_secs``, 600 s by default), then ``hooks``. Other workers: ``hooks``.
    """
    del save_summaries_steps, save_summaries_secs, save_graph_def
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
    if (summary_dir or checkpoint_dir) and log_step_count_steps and log_step_count_steps > 0:
        all_hooks.append(StepCounterHook(every_n_steps=log_step_count_steps))
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
