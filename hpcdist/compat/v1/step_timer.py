"""TF's ``SecondOrStepTimer``: triggers every N seconds or every N steps (used by the hooks)."""

from __future__ import annotations

import time

__all__ = ["SecondOrStepTimer"]


class SecondOrStepTimer:
    """Triggers every ``every_secs`` seconds or every ``every_steps`` steps (TF's timer).

    Args:
        every_secs: Seconds between triggers.
        every_steps: Steps between triggers.

    Raises:
        ValueError: Neither or both given.
    """

    def __init__(self, every_secs: float | None = None, every_steps: int | None = None) -> None:
        self.reset()
        self._every_secs = every_secs
        self._every_steps = every_steps
        if every_secs is None and every_steps is None:
            raise ValueError("Either every_secs or every_steps should be provided.")
        if every_secs is not None and every_steps is not None:
            raise ValueError("Can not provide both every_secs and every_steps.")

    def reset(self) -> None:
        """Forget the last trigger (the next step triggers)."""
        self._last_triggered_step: int | None = None
        self._last_triggered_time: float | None = None

    def should_trigger_for_step(self, step: int) -> bool:
        """Whether ``step`` is due: the first step, or enough seconds or steps since the last."""
        if self._last_triggered_step is None:
            return True
        if self._last_triggered_step == step:
            return False
        secs, steps = self._every_secs, self._every_steps
        if secs is not None and time.time() >= self._last_triggered_time + secs:
            return True
        return steps is not None and step >= self._last_triggered_step + steps

    def update_last_triggered_step(self, step: int) -> tuple[float | None, int | None]:
        """Record a trigger at ``step``; ``(elapsed_secs, elapsed_steps)`` since the last one.

        Both are None at the first trigger.
        """
        now = time.time()
        if self._last_triggered_time is None:
            elapsed_secs, elapsed_steps = None, None
        else:
            elapsed_secs = now - self._last_triggered_time
            elapsed_steps = step - self._last_triggered_step
        self._last_triggered_time = now
        self._last_triggered_step = step
        return elapsed_secs, elapsed_steps

    def last_triggered_step(self) -> int | None:
        """The step of the last trigger, or None."""
        return self._last_triggered_step
