"""The session-run-hook protocol of ``tf.train.MonitoredSession`` (TF's ``session_run_hook``).

A hook is told when the session is created (``begin`` before, ``after_create_session``
after), around every ``run`` (``before_run`` may add fetches and feeds, ``after_run`` sees
their values and may ask the session to stop), and at the end (``end``).
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

__all__ = ["SessionRunArgs", "SessionRunContext", "SessionRunHook", "SessionRunValues"]


class SessionRunHook:
    """Base class: every method does nothing."""

    def begin(self) -> None:
        """Called once before the session is created (the graph can still change)."""

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Called when the session is created (and initialized or restored)."""

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        """Called before each ``run``; may return extra fetches and feeds."""
        return None

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Called after each ``run`` with the values of the fetches it asked for."""

    def end(self, session: Any) -> None:
        """Called when the session ends normally (not after an exception)."""


class SessionRunArgs(namedtuple("SessionRunArgs", ["fetches", "feed_dict", "options"])):
    """What a hook adds to a ``run``: ``fetches``, ``feed_dict`` and ``options``."""

    def __new__(cls, fetches: Any, feed_dict: Any = None, options: Any = None) -> SessionRunArgs:
        """Fetches, with no feeds or options by default."""
        return super().__new__(cls, fetches, feed_dict, options)


class SessionRunValues(namedtuple("SessionRunValues", ["results", "options", "run_metadata"])):
    """What a hook gets back: ``results`` of its fetches."""


class SessionRunContext:
    """The ``run`` call a hook sees: its arguments, the session, and a way to stop.

    Args:
        original_args: The user's `SessionRunArgs`.
        session: The raw session (running it does not call hooks).
    """

    def __init__(self, original_args: SessionRunArgs, session: Any) -> None:
        self._original_args = original_args
        self._session = session
        self._stop_requested = False

    @property
    def original_args(self) -> SessionRunArgs:
        """The user's fetches and feeds."""
        return self._original_args

    @property
    def session(self) -> Any:
        """The raw session."""
        return self._session

    @property
    def stop_requested(self) -> bool:
        """Whether a hook asked to stop."""
        return self._stop_requested

    def request_stop(self) -> None:
        """Ask the monitored session to stop after this run."""
        self._stop_requested = True
