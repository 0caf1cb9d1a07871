"""`Model` and `Sequential` with Keras' `compile` / `fit` / `evaluate` / `predict`.

A model created under ``strategy.scope()`` belongs to that strategy and trains distributed: each
global batch is split across all replicas, each replica's loss is divided by the *global* batch
size (so the SUM all-reduce of gradients gives the gradient of the global mean, exactly, even
for uneven splits), the optimizer all-reduces gradients once per step, and metrics count every
example once. Numpy inputs are shuffled with the same permutation on every rank.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from hpcdist.core import context
from hpcdist.core import math_ops as ops
from hpcdist.core.autodiff import GradientTape, Tensor
from hpcdist.data.dataset import Dataset
from hpcdist.nn import losses as losses_mod
from hpcdist.nn import metrics as metrics_mod
from hpcdist.nn import optimizers as optimizers_mod
from hpcdist.nn.batches import with_batch_rows
from hpcdist.nn.callbacks import Callback, CallbackList, History, ProgressBar
from hpcdist.nn.layers import Layer
from hpcdist.nn.ps_training import ParameterServerFit
from hpcdist.utils.xp import to_numpy

__all__ = ["Model", "Sequential"]


class Model(Layer):
    """A layer made of layers; subclass it and implement ``call(inputs, training)``.

    Layers assigned as attributes (or in lists) are tracked. The strategy current at
    construction is the model's `distribute_strategy`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._layers: list[Layer] = []
        self.distribute_strategy = context.get_strategy()
        self.optimizer: Any = None
        self.loss: Any = None
        self.compiled_metrics: list[Any] = []
        self.stop_training = False
        self.history: History | None = None
        self._resume_epoch: int | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        if "_layers" in self.__dict__:
            candidates = value if isinstance(value, (list, tuple)) else [value]
            for item in candidates:
                if isinstance(item, Layer) and item is not self and item not in self._layers:
                    self._layers.append(item)
        super().__setattr__(name, value)

    def _sublayers(self) -> list[Layer]:
        return list(self._layers)

    @property
    def layers(self) -> list[Layer]:
        """The tracked layers, in order."""
        return list(self._layers)

    def build(self, input_shape: tuple[int, ...]) -> None:
        """Build by calling the model once on zeros of ``input_shape`` (batch axis included)."""
        self.built = True
        self.call(np.zeros((1, *input_shape[1:]), dtype=self.dtype), training=False)

    def _scope(self) -> Any:
        strategy = self.distribute_strategy
        return (
            strategy.scope()
            if type(strategy).__name__ != "DefaultStrategy"
            else contextlib.nullcontext()
        )

    # -- compile ---------------------------------------------------------------------------

    def compile(
        self, optimizer: Any = "rmsprop", loss: Any = None, metrics: list[Any] | None = None
    ) -> None:
        """Choose the optimizer, the loss and the metrics (strings or instances)."""
        with self._scope():
            self.optimizer = optimizers_mod.get(optimizer)
            self.loss = losses_mod.get(loss) if loss is not None else None
            self._loss_tracker = metrics_mod.Mean(name="loss")
            self.compiled_metrics = [metrics_mod.get(m, self.loss) for m in (metrics or [])]

    @property
    def metrics(self) -> list[Any]:
        """The loss tracker and the compiled metrics."""
        return [self._loss_tracker, *self.compiled_metrics] if self.loss is not None else []

    def _require_compiled(self) -> None:
        if self.optimizer is None or self.loss is None:
            raise RuntimeError("call model.compile(optimizer, loss) before fit/evaluate")

    # -- steps (run per replica) -------------------------------------------------------------

    def _per_example_loss(self, y: Any, y_pred: Tensor) -> Tensor:
        reduction = self.loss.reduction
        self.loss.reduction = "none"
        try:
            return self.loss(y, y_pred)
        finally:
            self.loss.reduction = reduction

    def train_step(self, x: Any, y: Any, global_rows: np.ndarray) -> None:
        """One replica's step: forward, loss over the global batch, gradients, update, metrics."""
        n = float(global_rows[0]) if len(global_rows) else 1.0
        replicas = self.distribute_strategy.num_replicas_in_sync
        variables = self.trainable_variables
        with GradientTape() as tape:
            y_pred = self(x, training=True)
            per_example = self._per_example_loss(y, y_pred)
            loss = ops.divide(ops.reduce_sum(per_example), n)
            reg = self._regularization()
            if reg is not None:
                loss = ops.add(loss, ops.divide(reg, replicas))
        grads = tape.gradient(loss, variables)
        self.optimizer.apply_gradients(zip(grads, variables, strict=True))
        self._update_metrics(y, y_pred, per_example, reg)

    def test_step(self, x: Any, y: Any) -> None:
        """One replica's evaluation step."""
        y_pred = self(x, training=False)
        self._update_metrics(y, y_pred, self._per_example_loss(y, y_pred), self._regularization())

    def _regularization(self) -> Tensor | None:
        """Sum of ``self.losses`` (recorded under a tape), or None without penalties."""
        penalties = self.losses
        if not penalties:
            return None
        total = penalties[0]
        for p in penalties[1:]:
            total = ops.add(total, p)
        return total

    def _update_metrics(self, y: Any, y_pred: Tensor, per_example: Tensor, reg: Any) -> None:
        values = per_example.value.astype(np.float64)
        if reg is not None:
            values = values + float(to_numpy(reg.value if isinstance(reg, Tensor) else reg))
        self._loss_tracker.update_state(values)
        for metric in self.compiled_metrics:
            metric.update_state(y, y_pred)

    # -- data ----------------------------------------------------------------------------------

    @staticmethod
    def _check_input(x: Any, batch_size: Any, what: str, allow_empty: bool = False) -> None:
        """Reject a ``batch_size`` that is not a positive int, and (unless allowed) empty ``x``.

        Raises:
            ValueError: The message names the argument and quotes the value (as Keras does).
        """
        if batch_size is not None and (
            not isinstance(batch_size, (int, np.integer))
            or isinstance(batch_size, bool)
            or batch_size < 1
        ):
            raise ValueError(
                f"{what}: batch_size must be a positive integer or None, got {batch_size!r}"
            )
        if allow_empty:
            return
        if isinstance(x, Dataset):
            if x.cardinality() == 0:
                raise ValueError(f"{what}: x is a Dataset with no batches")
        elif x is None or np.ndim(x) == 0 or len(x) == 0:
            raise ValueError(
                f"{what}: x has no examples (shape {np.shape(x)}); pass at least one example"
            )

    def _batches(
        self,
        x: Any,
        y: Any,
        batch_size: int | None,
        shuffle: bool,
        seed: int,
        with_rows: bool = True,
    ) -> Dataset:
        """A dataset of global batches ``(x, y, global_rows)``."""
        if isinstance(x, Dataset):
            return with_batch_rows(x, y)
        x = np.asarray(x)
        y = None if y is None else np.asarray(y)
        if y is not None and len(y) != len(x):
            raise ValueError(f"x and y have different numbers of examples: {len(x)} and {len(y)}")
        batch_size = batch_size or 32
        n = len(x)

        def make() -> Iterator[Any]:
            order = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
            for lo in range(0, n, batch_size):
                idx = order[lo : lo + batch_size]
                yield x[idx], (None if y is None else y[idx]), np.full(len(idx), len(idx), np.int64)

        return Dataset(make, -(-n // batch_size))

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

        Raises:
            ValueError: ``batch_size`` is not a positive integer or None, or ``x`` has no
                examples (an empty array, or a Dataset with no batches).
        """
        self._require_compiled()
        self._check_input(x, batch_size, "fit")
        strategy = self.distribute_strategy
        history = History()
        cbs = [history, *(callbacks or [])]
        if verbose in (1, "auto", True):
            cbs.append(ProgressBar())
        steps = steps_per_epoch
        if steps is None and not isinstance(x, Dataset):
            steps = -(-len(np.asarray(x)) // (batch_size or 32))
        elif steps is None and x.cardinality() >= 0:
            steps = x.cardinality()
        cb = CallbackList(cbs, self, {"epochs": epochs, "steps": steps, "verbose": verbose})
        self.stop_training = False
        self.history = history
        self._resume_epoch = None
        cb.on_train_begin()
        if self._resume_epoch is not None:  # BackupAndRestore found a backup
            initial_epoch = max(initial_epoch, self._resume_epoch)
        continuous = ps_fit = None
        if getattr(strategy, "_is_parameter_server", False):
            ps_fit = ParameterServerFit(self, x, y, batch_size, shuffle, seed, steps_per_epoch)
        elif steps_per_epoch is not None:
            continuous = iter(
                strategy.experimental_distribute_dataset(
                    self._batches(x, y, batch_size, shuffle, seed).repeat()
                )
            )
        for epoch in range(initial_epoch, epochs):
            cb.on_epoch_begin(epoch)
            with self._scope():
                for m in self.metrics:
                    m.reset_state()
            t0 = time.perf_counter()
            if ps_fit is not None:
                ps_fit.run_epoch(cb.on_train_batch_end)
            else:
                if continuous is not None:
                    iterator = continuous
                else:
                    data = self._batches(x, y, batch_size, shuffle, seed + epoch)
                    iterator = iter(strategy.experimental_distribute_dataset(data))
                self._train_epoch(iterator, steps_per_epoch, cb)
            with self._scope():
                logs = {m.name: m.result() for m in self.metrics}
            logs["time_s"] = time.perf_counter() - t0
            if validation_data is not None:
                vx, vy = (
                    (validation_data, None)
                    if isinstance(validation_data, Dataset)
                    else validation_data
                )
                val = self.evaluate(vx, vy, batch_size=batch_size, verbose=0, return_dict=True)
                logs.update({f"val_{k}": v for k, v in val.items()})
            cb.on_epoch_end(epoch, logs)
            if self.stop_training:
                break
        cb.on_train_end()
        return history

    def _train_epoch(self, iterator: Any, steps_per_epoch: int | None, cb: Any) -> None:
        step = 0
        while steps_per_epoch is None or step < steps_per_epoch:
            try:
                batch = next(iterator)
            except StopIteration:
                break
            self.distribute_strategy.run(self.train_step, args=batch)
            cb.on_train_batch_end(step, self._batch_logs() if cb.wants_batch_logs else None)
            step += 1
            if self.stop_training:
                break

    def _batch_logs(self) -> dict[str, float]:
        """The epoch's running loss and metrics over all replicas (collective under MPI)."""
        with self._scope():
            return {m.name: m.result() for m in self.metrics}

    def evaluate(
        self,
        x: Any = None,
        y: Any = None,
        batch_size: int | None = None,
        verbose: Any = 0,
        steps: int | None = None,
        return_dict: bool = False,
    ) -> Any:
        """Loss and metrics over every example exactly once (all replicas together).

        Raises:
            ValueError: ``batch_size`` is not a positive integer or None, or ``x`` is empty.
        """
        self._require_compiled()
        self._check_input(x, batch_size, "evaluate")
        strategy = self.distribute_strategy
        with self._scope():
            for m in self.metrics:
                m.reset_state()
        data = self._batches(x, y, batch_size, False, 0)
        for i, (bx, by, _) in enumerate(strategy.experimental_distribute_dataset(data)):
            if steps is not None and i >= steps:
                break
            strategy.run(self.test_step, args=(bx, by))
        with self._scope():
            results = {m.name: m.result() for m in self.metrics}
        if return_dict:
            return results
        values = list(results.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x: Any, batch_size: int | None = None, verbose: Any = 0) -> np.ndarray:
        """Outputs for every example, in order, on every rank (none for an empty ``x``).

        Raises:
            ValueError: ``batch_size`` is not a positive integer or None.
        """
        self._check_input(x, batch_size, "predict", allow_empty=True)
        strategy = self.distribute_strategy
        data = self._batches(x, None, batch_size, False, 0)
        outputs = []
        for bx, _, _ in strategy.experimental_distribute_dataset(data):
            out = strategy.run(lambda b: self(b, training=False).value, args=(bx,))
            outputs.append(strategy.gather(out, axis=0))
        return np.concatenate(outputs) if outputs else np.zeros((0,))

    def __call__(self, inputs: Any, training: bool | None = None) -> Any:
        """Build on first use, then `call`."""
        if not self.built:
            self._maybe_build(
                tuple(np.shape(inputs.value if isinstance(inputs, Tensor) else inputs))
            )
        return self.call(inputs, training=training)

    def summary(self, print_fn: Any = print) -> None:
        """Print the layers, their output shapes and parameter counts."""
        lines = [f'Model: "{self.name}"', f"{'Layer (type)':<40}{'Params':>12}"]
        for layer in self._layers:
            lines.append(
                f"{layer.name + ' (' + type(layer).__name__ + ')':<40}{layer.count_params():>12,}"
            )
        lines.append(f"Total params: {self.count_params():,}")
        lines.append(
            f"Trainable params: {sum(int(np.prod(w.shape)) for w in self.trainable_variables):,}"
        )
        print_fn("\n".join(lines))


class Sequential(Model):
    """A stack of layers; ``input_shape=`` on the first layer builds the model at once.

    Args:
        layers: The layers.
        name: Model name.
    """

    def __init__(self, layers: list[Layer] | None = None, name: str | None = None) -> None:
        super().__init__(name=name)
        for layer in layers or []:
            self.add(layer)

    def add(self, layer: Layer) -> None:
        """Append a layer (built at once when the first layer has an ``input_shape``)."""
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential takes layers, got {type(layer).__name__}")
        self._layers.append(layer)
        first = self._layers[0]
        if first.input_shape is not None:  # build the new layer now (built ones are skipped)
            with self._scope():
                self.build((None, *first.input_shape))

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        """Apply the layers in order."""
        out = inputs
        for layer in self._layers:
            out = layer(out, training=training)
        return out

    def build(self, input_shape: tuple[Any, ...]) -> None:
        """Build every layer with a zero batch of one example."""
        self.built = True
        self.call(np.zeros((1, *input_shape[1:]), dtype=self.dtype), training=False)
