"""`Trainer`: the training half of `Model` (Keras' ``compile``, ``fit``, ``evaluate``, ``predict``).

A model created under ``strategy.scope()`` belongs to that strategy and trains distributed: each
global batch is split across all replicas, each replica's loss is divided by the *global* batch
size (so the SUM all-reduce of gradients gives the gradient of the global mean, exactly, even
for uneven splits), the optimizer all-reduces gradients once per step, and metrics count every
example once. Numpy inputs are shuffled with the same permutation on every rank.

Split by topic as Keras 3 splits it (``keras/src/trainers``): `hpcdist.nn.batches` turns
arrays and datasets into global batches, `hpcdist.nn.epoch_iterator` walks them epoch by
epoch (`hpcdist.nn.ps_training` under a parameter server), and `Trainer.fit` only loops:
callbacks, metrics, validation.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from hpcdist.core import context
from hpcdist.core import math_ops as ops
from hpcdist.core.autodiff import GradientTape
from hpcdist.data.dataset import Dataset
from hpcdist.nn import compile_metrics
from hpcdist.nn import losses as losses_mod
from hpcdist.nn import metrics as metrics_mod
from hpcdist.nn import optimizers as optimizers_mod
from hpcdist.nn.batches import array_batches, check_input
from hpcdist.nn.callbacks import Callback, CallbackList, History, ProgressBar
from hpcdist.nn.epoch_iterator import EpochIterator, steps_per_epoch_of
from hpcdist.nn.example_losses import penalty_sum, per_example_losses, replica_loss
from hpcdist.nn.ps_training import ParameterServerFit
from hpcdist.strategies import DefaultStrategy, ParameterServerStrategy
from hpcdist.strategies.grad_buckets import overlapped_reduction

__all__ = ["Trainer"]


class Trainer:
    """Training for a model: mixed into `hpcdist.nn.models.Model` (Keras 3's ``Trainer``).

    Uses the model's ``__call__``, ``trainable_variables`` and ``losses``. The strategy current
    at construction is the model's `distribute_strategy`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.distribute_strategy = context.get_strategy()
        self.optimizer: Any = None
        self.loss: Any = None
        self.compiled_metrics: list[Any] = []
        self.compiled_weighted_metrics: list[Any] = []
        self.steps_per_execution = 1
        self.stop_training = False
        self.history: History | None = None
        self._loss_tracker: Any = None
        self._resume_epoch: int | None = None

    def strategy_scope(self) -> contextlib.AbstractContextManager[Any]:
        """The scope of the model's `distribute_strategy`, where its state is made and read.

        Variables, metrics and optimizer slots of the model are created in it, and sync-on-read
        values (metrics) are read in it; callbacks that touch them enter it too. Under the
        default strategy it does nothing: entering that scope would make later code see an
        explicit strategy where none was chosen.
        """
        strategy = self.distribute_strategy
        if isinstance(strategy, DefaultStrategy):
            return contextlib.nullcontext()
        return strategy.scope()

    def resume_at_epoch(self, epoch: int) -> None:
        """Make the `fit` that is starting resume at ``epoch`` (a callback restored a backup).

        The public form of Keras 3's ``model._initial_epoch``: a callback's
        ``on_train_begin`` that restored a training state (`BackupAndRestore`) calls it, and
        `fit` then starts at the larger of ``epoch`` and its ``initial_epoch`` argument. Each
        `fit` forgets the request of the previous one before its callbacks start.

        Raises:
            ValueError: ``epoch`` is not a non-negative integer.
        """
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ValueError(f"resume_at_epoch needs a non-negative integer, got {epoch!r}")
        self._resume_epoch = int(epoch)

    # -- compile ---------------------------------------------------------------------------

    def compile(
        self,
        optimizer: Any = "rmsprop",
        loss: Any = None,
        metrics: list[Any] | None = None,
        steps_per_execution: int = 1,
        weighted_metrics: list[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Choose the optimizer, the loss and the metrics (strings or instances).

        Args:
            optimizer: Name or instance.
            loss: Name, instance or callable.
            metrics: Names or instances, updated without sample weights (Keras' rule).
            steps_per_execution: Steps run per call into the training loop (Keras' lever
                against per-step overhead); accepted and recorded. hpcdist runs steps eagerly,
                so there is no per-call dispatch to amortise: callbacks still see every step.
            weighted_metrics: Names or instances updated with the sample weights of ``fit`` and
                ``evaluate`` (Keras' rule: one whose name a plain metric already has is logged
                as ``weighted_<name>``).
            **kwargs: Keras' other arguments (``jit_compile``, ``run_eagerly``, ...), accepted
                and ignored: they tune TF's graph execution, which hpcdist does not have.

        Raises:
            ValueError: ``steps_per_execution`` is not a positive integer.
        """
        if int(steps_per_execution) < 1:
            raise ValueError(
                f"steps_per_execution must be a positive integer, got {steps_per_execution!r}"
            )
        self.steps_per_execution = int(steps_per_execution)
        with self.strategy_scope():
            self.optimizer = optimizers_mod.get(optimizer)
            self.loss = losses_mod.as_loss(loss) if loss is not None else None
            self._loss_tracker = metrics_mod.Mean(name="loss")
            plain, weighted, asked = compile_metrics.build(metrics, weighted_metrics, self.loss)
        self.compiled_metrics, self.compiled_weighted_metrics = plain, weighted
        self._weighted_metric_names = asked

    @property
    def metrics(self) -> list[Any]:
        """The loss tracker, the compiled metrics and the weighted ones."""
        if self.loss is None:
            return []
        return [self._loss_tracker, *self.compiled_metrics, *self.compiled_weighted_metrics]

    @property
    def weighted_metric_names(self) -> list[str]:
        """The names asked for as ``compile(weighted_metrics=...)`` (saved with the model)."""
        return list(getattr(self, "_weighted_metric_names", ()))

    @property
    def loss_tracker(self) -> Any:
        """The `Mean` of the loss over the epoch (``logs["loss"]``), None before `compile`.

        Its ``count`` is the number of examples seen this epoch (every replica's).
        """
        return self._loss_tracker

    def _reset_metrics(self) -> None:
        with self.strategy_scope():
            for m in self.metrics:
                m.reset_state()

    def _metric_results(self) -> dict[str, float]:
        """The running loss and metrics over all replicas (collective under MPI)."""
        with self.strategy_scope():
            return {m.name: float(m.result()) for m in self.metrics}

    def _require_compiled(self) -> None:
        if self.optimizer is None or self.loss is None:
            raise RuntimeError("call model.compile(optimizer, loss) before fit/evaluate")

    # -- steps (run per replica) -------------------------------------------------------------

    def train_step(
        self, x: Any, y: Any, global_rows: np.ndarray, sample_weight: Any = None
    ) -> None:
        """One replica's step: forward, loss over the global batch, gradients, update, metrics.

        With ``sample_weight`` each example's loss is weighted; the batch loss is reduced as the
        compiled loss's ``reduction`` says (`replica_loss`: by default the sum over the global
        batch size, Keras' ``sum_over_batch_size``).
        """
        n = float(global_rows[0]) if len(global_rows) else 1.0
        replicas = self.distribute_strategy.num_replicas_in_sync
        variables = self.trainable_variables
        with GradientTape() as tape:
            y_pred = self(x, training=True)
            per_example = per_example_losses(self.loss, y, y_pred, sample_weight)
            loss, tracked = replica_loss(
                self.loss, per_example, y_pred.ndim == 1, sample_weight, n, replicas
            )
            reg = penalty_sum(self.losses)
            if reg is not None:
                loss = ops.add(loss, ops.divide(reg, replicas))
        # With one replica per process, buckets of final gradients start their all-reduce
        # while the tape computes the earlier layers (`hpcdist.strategies.grad_buckets`).
        overlap = overlapped_reduction(self.distribute_strategy, variables)
        if overlap is None:
            grads = tape.gradient(loss, variables)
            self.optimizer.apply_gradients(zip(grads, variables, strict=True))
        else:
            grads = overlap.finish(tape.gradient(loss, variables, on_final=overlap.ready))
            self.optimizer.apply_gradients(
                zip(grads, variables, strict=True), skip_gradients_aggregation=True
            )
        compile_metrics.update(self, y, y_pred, (tracked, per_example), reg, sample_weight)

    def test_step(self, x: Any, y: Any, sample_weight: Any = None) -> None:
        """One replica's evaluation step."""
        y_pred = self(x, training=False)
        per_example = per_example_losses(self.loss, y, y_pred, sample_weight)
        replicas = self.distribute_strategy.num_replicas_in_sync
        rows = float(per_example.shape[0] * replicas) if per_example.ndim else 1.0
        _, tracked = replica_loss(
            self.loss, per_example, y_pred.ndim == 1, sample_weight, rows, replicas
        )
        reg = penalty_sum(self.losses)
        compile_metrics.update(self, y, y_pred, (tracked, per_example), reg, sample_weight)

    # -- fit / evaluate / predict ---------------------------------------------------------------

    def fit(
        self,
        x: Any = None,
        y: Any = None,
        batch_size: int | None = None,
        epochs: int = 1,
        verbose: Any = "auto",
        callbacks: list[Callback] | None = None,
        validation_data: Any = None,
        shuffle: bool = True,
        steps_per_epoch: int | None = None,
        initial_epoch: int = 0,
        seed: int = 0,
        sample_weight: Any = None,
    ) -> History:
        """Train for ``epochs`` epochs; returns the `History`.

        Args:
            x: Inputs (numpy) or a `hpcdist.data.Dataset` of global batches ``(x, y)``.
            y: Targets when ``x`` is an array.
            batch_size: Global batch size for arrays (default 32).
            epochs: Number of epochs.
            verbose: 0 silent; 1 / "auto" a progress bar on the chief.
            callbacks: Extra callbacks.
            validation_data: ``(x_val, y_val)`` or a Dataset, evaluated after each epoch.
            shuffle: Shuffle arrays each epoch (same permutation on every rank).
            steps_per_epoch: Steps per epoch; the input is then read continuously across epochs.
            initial_epoch: Epoch to start from (resuming).
            seed: Base seed of the per-epoch shuffles.
            sample_weight: One weight per example of array inputs (a Dataset yields
                ``(x, y, w)`` instead): weights the loss and the ``weighted_metrics``; the
                plain compiled metrics stay unweighted, as Keras' ``metrics``.

        Raises:
            ValueError: ``batch_size`` is not a positive integer or None, or ``x`` has no
                examples (an empty array, or a Dataset with no batches).
        """
        self._require_compiled()
        check_input(x, batch_size, "fit")
        history = History()
        cbs = [history, *(callbacks or [])]
        if verbose in (1, "auto", True):
            cbs.append(ProgressBar())
        steps = steps_per_epoch_of(x, batch_size, steps_per_epoch)
        cb = CallbackList(cbs, self, {"epochs": epochs, "steps": steps, "verbose": verbose})
        self.stop_training = False
        self.history = history
        self._resume_epoch = None
        cb.on_train_begin()
        if self._resume_epoch is not None:  # a callback restored a backup (`resume_at_epoch`)
            initial_epoch = max(initial_epoch, self._resume_epoch)
        fit_args = (x, y, batch_size, shuffle, seed, steps_per_epoch, sample_weight)
        if isinstance(self.distribute_strategy, ParameterServerStrategy):
            ps_fit: ParameterServerFit | None = ParameterServerFit(self, *fit_args)
        else:
            ps_fit, epochs_data = None, EpochIterator(self.distribute_strategy, *fit_args)
        for epoch in range(initial_epoch, epochs):
            cb.on_epoch_begin(epoch)
            self._reset_metrics()
            t0 = time.perf_counter()
            if ps_fit is not None:
                ps_fit.run_epoch(cb.on_train_batch_end)
            else:
                self._train_epoch(epochs_data.enumerate_epoch(epoch), cb)
            logs = self._metric_results()
            logs["time_s"] = time.perf_counter() - t0
            if validation_data is not None:
                logs.update(self._validation_logs(validation_data, batch_size))
            cb.on_epoch_end(epoch, logs)
            if self.stop_training:
                break
        cb.on_train_end()
        return history

    def _train_epoch(self, batches: Iterator[tuple[int, Any]], cb: CallbackList) -> None:
        """Run a step per batch, each followed by the batch callbacks, until stopped."""
        for step, batch in batches:
            self.distribute_strategy.run(self.train_step, args=batch)
            cb.on_train_batch_end(step, self._metric_results() if cb.wants_batch_logs else None)
            if self.stop_training:
                break

    def _validation_logs(self, validation_data: Any, batch_size: int | None) -> dict[str, float]:
        """``val_<name>`` of every metric over ``validation_data`` (a Dataset or ``(x, y)``)."""
        vx, vy = (
            (validation_data, None) if isinstance(validation_data, Dataset) else validation_data
        )
        val = self.evaluate(vx, vy, batch_size=batch_size, verbose=0, return_dict=True)
        return {f"val_{k}": v for k, v in val.items()}

    def evaluate(
        self,
        x: Any = None,
        y: Any = None,
        batch_size: int | None = None,
        verbose: Any = 0,
        steps: int | None = None,
        return_dict: bool = False,
        sample_weight: Any = None,
    ) -> Any:
        """Loss and metrics over every example exactly once (all replicas together).

        Args:
            x: Inputs (numpy) or a `hpcdist.data.Dataset` of ``(x, y)`` or ``(x, y, w)``.
            y: Targets when ``x`` is an array.
            batch_size: Global batch size for arrays (default 32).
            verbose: Accepted (evaluation prints nothing).
            steps: Stop after this many batches.
            return_dict: Return ``{name: value}`` instead of a list.
            sample_weight: One weight per example of array inputs: weights the loss and the
                ``weighted_metrics`` (Keras' rule).

        Raises:
            ValueError: ``batch_size`` is not a positive integer or None, ``x`` is empty, or
                ``sample_weight`` does not match ``x``.
        """
        self._require_compiled()
        check_input(x, batch_size, "evaluate")
        strategy = self.distribute_strategy
        self._reset_metrics()
        data = array_batches(x, y, batch_size, False, 0, sample_weight)
        for i, (bx, by, _, *bw) in enumerate(strategy.experimental_distribute_dataset(data)):
            if steps is not None and i >= steps:
                break
            strategy.run(self.test_step, args=(bx, by, *bw))
        results = self._metric_results()
        if return_dict:
            return results
        values = list(results.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x: Any, batch_size: int | None = None, verbose: Any = 0) -> np.ndarray:
        """Outputs for every example, in order, on every rank (none for an empty ``x``).

        Raises:
            ValueError: ``batch_size`` is not a positive integer or None.
        """
        check_input(x, batch_size, "predict", allow_empty=True)
        strategy = self.distribute_strategy
        data = array_batches(x, None, batch_size, False, 0)
        outputs = []
        for bx, *_ in strategy.experimental_distribute_dataset(data):
            out = strategy.run(lambda b: self(b, training=False).value, args=(bx,))
            outputs.append(strategy.gather(out, axis=0))
        return np.concatenate(outputs) if outputs else np.zeros((0,))
