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
from typing import Any

import numpy as np

from hpcdist.core import context
from hpcdist.core import math_ops as ops
from hpcdist.core.autodiff import GradientTape
from hpcdist.data.dataset import Dataset
from hpcdist.nn import compile_metrics, saving
from hpcdist.nn import losses as losses_mod
from hpcdist.nn import metrics as metrics_mod
from hpcdist.nn import optimizers as optimizers_mod
from hpcdist.nn.base_layer import Layer, get_registered_class, input_shapes
from hpcdist.nn.batches import array_batches, check_input
from hpcdist.nn.callbacks import Callback, CallbackList, History, ProgressBar
from hpcdist.nn.example_losses import penalty_sum, per_example_losses, replica_loss
from hpcdist.nn.input_layer import InputLayer
from hpcdist.nn.keras_tensor import KerasTensor, is_symbolic, symbolic_call
from hpcdist.nn.ps_training import ParameterServerFit
from hpcdist.nn.saving import load_model
from hpcdist.strategies.grad_buckets import overlapped_reduction

__all__ = ["Model", "Sequential", "load_model"]


class Model(Layer):
    """A layer made of layers; subclass it and implement ``call(inputs, training)``.

    Layers assigned as attributes (or in lists) are tracked. The strategy current at
    construction is the model's `distribute_strategy`. ``Model(inputs, outputs)`` with
    `KerasTensor` arguments makes a functional model (`hpcdist.nn.functional.Functional`).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Model:
        """``Model(inputs, outputs)`` is a `Functional` model, as in Keras."""
        functional = ("inputs" in kwargs and "outputs" in kwargs) or (
            len(args) >= 2 and is_symbolic(args[0])
        )
        if cls is Model and functional:
            return super().__new__(get_registered_class("Functional"))
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._layers: list[Layer] = []
        self.distribute_strategy = context.get_strategy()
        self.optimizer: Any = None
        self.loss: Any = None
        self.compiled_metrics: list[Any] = []
        self.compiled_weighted_metrics: list[Any] = []
        self.steps_per_execution = 1
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
        with self._scope():
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

    # -- data ----------------------------------------------------------------------------------

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
            ps_fit = ParameterServerFit(
                self, x, y, batch_size, shuffle, seed, steps_per_epoch, sample_weight
            )
        elif steps_per_epoch is not None:
            continuous = iter(
                strategy.experimental_distribute_dataset(
                    array_batches(x, y, batch_size, shuffle, seed, sample_weight).repeat()
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
                    data = array_batches(x, y, batch_size, shuffle, seed + epoch, sample_weight)
                    iterator = iter(strategy.experimental_distribute_dataset(data))
                self._train_epoch(iterator, steps_per_epoch, cb)
            with self._scope():
                logs = {m.name: float(m.result()) for m in self.metrics}
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
            return {m.name: float(m.result()) for m in self.metrics}

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
        with self._scope():
            for m in self.metrics:
                m.reset_state()
        data = array_batches(x, y, batch_size, False, 0, sample_weight)
        for i, (bx, by, _, *bw) in enumerate(strategy.experimental_distribute_dataset(data)):
            if steps is not None and i >= steps:
                break
            strategy.run(self.test_step, args=(bx, by, *bw))
        with self._scope():
            results = {m.name: float(m.result()) for m in self.metrics}
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

    def __call__(self, inputs: Any, training: bool | None = None, **kwargs: Any) -> Any:
        """Build on first use, then `call`.

        A subclassed model without its own ``build`` builds on the real input: its layers
        build as ``call`` reaches them (so dict and tuple inputs work, as in Keras).
        """
        if is_symbolic(inputs):
            return symbolic_call(self, inputs, kwargs)
        inputs = self._convert_inputs(inputs)
        if not self.built:
            if type(self).build is Model.build:
                self.built = True
            else:
                self._maybe_build(input_shapes(inputs))
        return self.call(inputs, training=training, **kwargs)

    # -- saving ----------------------------------------------------------------------------

    def save(self, filepath: str, overwrite: bool = True, **kwargs: Any) -> None:
        """Write the model (config, compile arguments, weights) to an HDF5 file.

        Collective: every rank calls it. Load it with `load_model`.
        """
        saving.save_model(self, str(filepath))

    def save_weights(self, filepath: str, overwrite: bool = True, **kwargs: Any) -> None:
        """Write every weight to an HDF5 file (collective: every rank calls it)."""
        saving.save_weights(self, str(filepath))

    def load_weights(self, filepath: str, **kwargs: Any) -> None:
        """Assign the weights of a `save_weights` / `save` file (or a checkpoint)."""
        saving.load_weights(self, str(filepath))

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

    def add(self, layer: Layer | KerasTensor) -> None:
        """Append a layer (built at once when the first layer has an ``input_shape``).

        An `Input` tensor or an `InputLayer` gives the input shape (first position only).
        """
        if isinstance(layer, KerasTensor) and isinstance(layer.layer, InputLayer):
            layer = layer.layer
        if isinstance(layer, InputLayer) and self._layers:
            raise ValueError(f"{self.name}: an InputLayer can only be the first layer")
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
        first = self._layers[0] if self._layers else None
        dtype = first.dtype if isinstance(first, InputLayer) else self.dtype
        self.call(np.zeros((1, *input_shape[1:]), dtype=dtype), training=False)

    @property
    def layers(self) -> list[Layer]:
        """The layers, without the `InputLayer` (as in Keras)."""
        return [layer for layer in self._layers if not isinstance(layer, InputLayer)]

    def get_config(self) -> dict[str, Any]:
        """The layers' classes and configs, in order (JSON-able)."""
        return {
            "name": self.name,
            "layers": [
                {"class_name": type(layer).__name__, "config": layer.get_config()}
                for layer in self._layers
            ],
        }

    @classmethod
    def from_config(
        cls, config: dict[str, Any], custom_objects: dict[str, Any] | None = None
    ) -> Sequential:
        """A new `Sequential` from `get_config`'s output."""
        return cls(
            [
                get_registered_class(entry["class_name"], custom_objects).from_config(
                    entry["config"]
                )
                for entry in config["layers"]
            ],
            name=config["name"],
        )
