"""Learning-rate schedules (``keras.optimizers.schedules``): ``schedule(step) -> rate``."""

from __future__ import annotations

import numpy as np

__all__ = ["ExponentialDecay", "LearningRateSchedule", "PiecewiseConstantDecay"]


class LearningRateSchedule:
    """``schedule(step) -> learning rate``."""

    def __call__(self, step: int) -> float:
        """The learning rate at ``step``."""
        raise NotImplementedError

    def get_config(self) -> dict:
        """The constructor's arguments (Keras' ``get_config``)."""
        raise NotImplementedError(f"{type(self).__name__} does not define get_config")

    @classmethod
    def from_config(cls, config: dict) -> LearningRateSchedule:
        """A schedule from `get_config`'s output."""
        return cls(**config)


class ExponentialDecay(LearningRateSchedule):
    """``initial * decay_rate ** (step / decay_steps)`` (floored with ``staircase``)."""

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        decay_rate: float,
        staircase: bool = False,
        name: str = "ExponentialDecay",
    ) -> None:
        self.name = name
        if decay_steps <= 0:
            raise ValueError(f"decay_steps must be positive, got {decay_steps}")
        self.initial, self.decay_steps, self.rate, self.staircase = (
            float(initial_learning_rate),
            int(decay_steps),
            float(decay_rate),
            staircase,
        )

    def get_config(self) -> dict:
        """Keras' keys: the constructor's arguments, ``name`` included."""
        return {
            "initial_learning_rate": self.initial,
            "decay_steps": self.decay_steps,
            "decay_rate": self.rate,
            "staircase": self.staircase,
            "name": self.name,
        }

    def __call__(self, step: int) -> float:
        """The decayed rate."""
        p = step / self.decay_steps
        return self.initial * self.rate ** (np.floor(p) if self.staircase else p)


class PiecewiseConstantDecay(LearningRateSchedule):
    """``values[i]`` while ``step <= boundaries[i]`` (Keras' rule)."""

    def __init__(
        self, boundaries: list[int], values: list[float], name: str = "PiecewiseConstant"
    ) -> None:
        self.name = name
        if len(values) != len(boundaries) + 1:
            raise ValueError(
                f"values must have one more entry than boundaries, got {len(values)} and "
                f"{len(boundaries)}"
            )
        self.boundaries, self.values = list(boundaries), [float(v) for v in values]

    def get_config(self) -> dict:
        """Keras' keys: ``boundaries``, ``values``, ``name``."""
        return {"boundaries": list(self.boundaries), "values": list(self.values), "name": self.name}

    def __call__(self, step: int) -> float:
        """The rate of the piece ``step`` falls in."""
        for boundary, value in zip(self.boundaries, self.values, strict=False):
            if step <= boundary:
                return value
        return self.values[-1]
