"""`Model` and `Sequential`: layers made of layers, trained by Keras' ``compile`` / ``fit``.

`Model` tracks its layers, builds and calls them, saves itself (`hpcdist.nn.saving`) and
prints its summary; its training half (``compile``, ``fit``, ``evaluate``, ``predict``, the
steps and the strategy scope) is `hpcdist.nn.trainer.Trainer`, as in Keras 3.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.nn import saving
from hpcdist.nn.base_layer import Layer, get_registered_class, input_shapes
from hpcdist.nn.input_layer import InputLayer
from hpcdist.nn.keras_tensor import KerasTensor, is_symbolic, symbolic_call
from hpcdist.nn.saving import load_model
from hpcdist.nn.trainer import Trainer

__all__ = ["Model", "Sequential", "load_model"]


class Model(Trainer, Layer):
    """A layer made of layers; subclass it and implement ``call(inputs, training)``.

    Layers assigned as attributes (or in lists) are tracked. Training (``compile``, ``fit``,
    ``evaluate``, ``predict``) comes from `hpcdist.nn.trainer.Trainer`; the strategy current
    at construction is the model's `distribute_strategy`. ``Model(inputs, outputs)`` with
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

    def save(self, filepath: str, overwrite: bool = True, save_format: str | None = None) -> None:
        """Write the model (config, compile arguments, weights) to an HDF5 file.

        Collective: every rank calls it. Load it with `load_model`.

        Args:
            filepath: The file.
            overwrite: Replace an existing file (Keras' default). With False and an existing
                file Keras asks on the terminal; the ranks of a job have none, so hpcdist
                raises instead (on every rank) and leaves the file as it was.
            save_format: ``"h5"`` or None: the one format (Keras 2's argument).

        Raises:
            CheckpointWriteError: ``overwrite`` is False and ``filepath`` exists (errno
                ``EEXIST``), or the file could not be written; on every rank.
            ValueError: ``save_format`` names another format.
            TypeError: Another keyword argument (Keras 3 rejects unknown ones too).
        """
        saving.check_save_format(save_format, "Model.save")
        saving.save_model(self, str(filepath), overwrite=overwrite)

    def save_weights(
        self, filepath: str, overwrite: bool = True, save_format: str | None = None
    ) -> None:
        """Write every weight to an HDF5 file (collective: every rank calls it).

        ``overwrite`` and ``save_format`` and the errors are those of `save`.
        """
        saving.check_save_format(save_format, "Model.save_weights")
        saving.save_weights(self, str(filepath), overwrite=overwrite)

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
            with self.strategy_scope():
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
