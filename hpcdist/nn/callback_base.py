"""The base of `Model.fit`'s callbacks: `Callback`, `CallbackList`, and which rank writes.

Kept apart from `hpcdist.nn.callbacks` so that callbacks in modules of their own (TensorBoard,
CSV) share the base without importing the module that re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Callback", "CallbackList", "is_chief"]


def is_chief(model: Any) -> bool:
    """Whether this process writes logs for ``model``: the strategy's chief (rank 0).

    Under `MultiWorkerMirroredStrategy` that is worker 0; under `ParameterServerStrategy` the
    coordinator (the only process running ``fit``); without a strategy, every process.
    """
    extended = getattr(getattr(model, "distribute_strategy", None), "extended", None)
    return bool(getattr(extended, "should_checkpoint", True))


class Callback:
    """Base class; ``self.model`` is set by `Model.fit`. Every hook is optional."""

    #: Whether ``on_train_batch_end`` reads its ``logs`` (computing them costs one small
    #: all-reduce per step); None means: whenever the callback overrides that hook.
    reads_batch_logs: bool | None = None

    def __init__(self) -> None:
        self.model: Any = None
        self.params: dict[str, Any] = {}

    def set_model(self, model: Any) -> None:
        """Attach the model being trained."""
        self.model = model

    def set_params(self, params: dict[str, Any]) -> None:
        """Record ``epochs``, ``steps`` and ``verbose``."""
        self.params = params

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Before the first epoch."""

    def on_train_end(self, logs: dict | None = None) -> None:
        """After the last epoch."""

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """Before an epoch."""

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """After an epoch; ``logs`` holds the epoch's metrics (validation ones prefixed val_)."""

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """After a training step."""


class CallbackList:
    """Dispatches every hook to several callbacks.

    Attributes:
        wants_batch_logs: Some callback reads the logs of ``on_train_batch_end``
            (`Callback.reads_batch_logs`), so `Model.fit` computes them.
    """

    def __init__(self, callbacks: list[Callback], model: Any, params: dict[str, Any]) -> None:
        self.callbacks = list(callbacks)
        for cb in self.callbacks:
            cb.set_model(model)
            cb.set_params(params)
        self.wants_batch_logs = any(
            cb.reads_batch_logs
            if cb.reads_batch_logs is not None
            else type(cb).on_train_batch_end is not Callback.on_train_batch_end
            for cb in self.callbacks
        )

    def __getattr__(self, hook: str) -> Callable[..., None]:
        def dispatch(*args: Any, **kwargs: Any) -> None:
            for cb in self.callbacks:
                getattr(cb, hook)(*args, **kwargs)

        return dispatch
