"""The functional API: ``Model(inputs, outputs)`` over layers called on `Input` tensors.

The `KerasTensor` outputs remember which layer produced them from which inputs; a
`Functional` model walks that graph back from its outputs once (the layers in dependency
order) and replays it on real batches: each layer call once per batch, shared layers reused.
Its config (layers and calls) saves without code (`hpcdist.nn.saving`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core import array_ops
from hpcdist.core import math_ops as ops
from hpcdist.nn.base_layer import Layer, get_registered_class
from hpcdist.nn.input_layer import InputLayer
from hpcdist.nn.keras_tensor import KerasTensor, leaves, map_nested
from hpcdist.nn.models import Model

__all__ = ["Functional"]


def _check_tensors(what: str, structure: Any) -> list[KerasTensor]:
    found = leaves(structure)
    bad = [type(t).__name__ for t in found if not isinstance(t, KerasTensor)]
    if bad or not found:
        raise TypeError(
            f"Model({what}=...) expects KerasTensors (from Input() and layers called on it), "
            f"got {bad or 'nothing'}"
        )
    return found


class Functional(Model):
    """A model defined by symbolic ``inputs`` and ``outputs`` (``tf.keras.Model(inputs, ...)``).

    Args:
        inputs: A `KerasTensor` from `Input`, or a list/tuple/dict of them.
        outputs: `KerasTensor` results of layers called on ``inputs`` (same nesting rules).
        name: Model name.
        **kwargs: `Layer` arguments.

    Raises:
        TypeError: ``inputs`` or ``outputs`` hold something else.
        ValueError: An output depends on an `Input` that is not among ``inputs``.
    """

    def __init__(self, inputs: Any, outputs: Any, name: str | None = None, **kwargs: Any):
        super().__init__(name=name, **kwargs)
        self._inputs = inputs
        self._outputs = outputs
        self._input_tensors = _check_tensors("inputs", inputs)
        self._output_tensors = _check_tensors("outputs", outputs)
        self._nodes: list[KerasTensor] = []  # one tensor per call, in dependency order
        given = {id(t) for t in self._input_tensors}
        seen: set[int] = set()
        for tensor in self._output_tensors:
            self._visit(tensor, given, seen)
        for tensor in self._input_tensors:
            if tensor.layer not in self._layers:
                self._layers.insert(0, tensor.layer)
        self.built = True

    def _visit(self, tensor: KerasTensor, given: set[int], seen: set[int]) -> None:
        if id(tensor) in given or id(tensor.node) in seen:
            return
        if isinstance(tensor.layer, InputLayer) and not tensor.node:
            raise ValueError(
                f"output depends on input {tensor.name!r}, which is not among the model's inputs"
            )
        seen.add(id(tensor.node))
        for parent in leaves(tensor.inputs):
            if isinstance(parent, KerasTensor):
                self._visit(parent, given, seen)
        self._nodes.append(tensor)
        if tensor.layer not in self._layers:
            self._layers.append(tensor.layer)

    @property
    def inputs(self) -> list[KerasTensor]:
        """The input tensors."""
        return list(self._input_tensors)

    @property
    def outputs(self) -> list[KerasTensor]:
        """The output tensors."""
        return list(self._output_tensors)

    def _bind_inputs(self, inputs: Any) -> dict[int, Any]:
        if isinstance(self._inputs, dict) and isinstance(inputs, dict):
            missing = sorted(set(self._inputs) - set(inputs))
            if missing:
                raise ValueError(f"{self.name}: inputs lack keys {missing}; got {sorted(inputs)}")
            return {
                id(t): self._standardize(i, t, inputs[key])
                for i, (key, t) in enumerate(self._inputs.items())
            }
        values = [inputs] if isinstance(self._inputs, KerasTensor) else leaves(inputs)
        if len(values) != len(self._input_tensors):
            raise ValueError(
                f"{self.name} expects {len(self._input_tensors)} inputs, got {len(values)}"
            )
        return {
            id(t): self._standardize(i, t, v)
            for i, (t, v) in enumerate(zip(self._input_tensors, values, strict=True))
        }

    def _standardize(self, index: int, ref: KerasTensor, value: Any) -> Any:
        """``value`` checked against input ``ref``'s shape, as Keras 3's functional models do.

        A rank one short of the input's, whose last axis is 1, gets that axis; a rank one
        over, whose last axis is 1, loses it; the other dimensions must match where the input
        fixes them (the batch axis, None, matches any size).

        Raises:
            ValueError: Another rank, or a dimension that differs (both shapes named).
        """
        if value is None:
            return value
        shape = tuple(getattr(value, "shape", None) or np.shape(value))
        expected = ref.shape
        if len(shape) == len(expected) + 1 and shape and shape[-1] == 1:
            value, shape = ops.reshape(value, shape[:-1]), shape[:-1]
        elif len(shape) == len(expected) - 1 and expected and expected[-1] == 1:
            value, shape = array_ops.expand_dims(value, -1), (*shape, 1)
        if len(shape) != len(expected):
            raise ValueError(
                f"Invalid input shape for input {index} ({ref.name!r}) of {self.name}: expected "
                f"shape {expected}, but the input has incompatible shape {shape} (a batch axis "
                "first: call the model on a batch, e.g. x[None] for one example)"
            )
        if any(e is not None and e != d for e, d in zip(expected, shape, strict=True)):
            raise ValueError(
                f"Input {index} with name {ref.name!r} of layer {self.name!r} is incompatible "
                f"with the layer: expected shape={expected}, found shape={shape}"
            )
        return value

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        """Replay the graph on ``inputs`` (structured like the model's inputs)."""
        values = self._bind_inputs(inputs)
        outputs_of: dict[int, list[Any]] = {}
        for tensor in self._nodes:
            args = map_nested(lambda leaf: self._value(leaf, values, outputs_of), tensor.inputs)
            outputs_of[id(tensor.node)] = leaves(
                tensor.layer(args, training=training, **tensor.kwargs)
            )
        return map_nested(lambda t: self._value(t, values, outputs_of), self._outputs)

    @staticmethod
    def _value(leaf: Any, values: dict[int, Any], outputs_of: dict[int, list[Any]]) -> Any:
        if not isinstance(leaf, KerasTensor):
            return leaf
        if id(leaf) in values:
            return values[id(leaf)]
        return outputs_of[id(leaf.node)][leaf.index]

    # -- config ----------------------------------------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        """Layers (class and config) and the calls between them, JSON-able."""
        node_ids = {id(t.node): i for i, t in enumerate(self._nodes)}
        inputs = {id(t): i for i, t in enumerate(self._input_tensors)}

        def ref(leaf: Any) -> Any:
            if not isinstance(leaf, KerasTensor):
                return {"constant": leaf}
            if id(leaf) in inputs:
                return {"input": inputs[id(leaf)]}
            return {"node": node_ids[id(leaf.node)], "index": leaf.index}

        return {
            "name": self.name,
            "layers": [
                {"class_name": type(layer).__name__, "config": layer.get_config()}
                for layer in self._layers
            ],
            "nodes": [
                {
                    "layer": t.layer.name,
                    "inputs": map_nested(ref, t.inputs),
                    "kwargs": t.kwargs,
                }
                for t in self._nodes
            ],
            "inputs": [t.layer.name for t in self._input_tensors],
            "input_structure": map_nested(ref, self._inputs),
            "outputs": map_nested(ref, self._outputs),
        }

    @classmethod
    def from_config(
        cls, config: dict[str, Any], custom_objects: dict[str, Any] | None = None
    ) -> Functional:
        """Rebuild the layers and replay the calls symbolically."""
        layers: dict[str, Layer] = {}
        for entry in config["layers"]:
            layer_cls = get_registered_class(entry["class_name"], custom_objects)
            layers[entry["config"]["name"]] = layer_cls.from_config(entry["config"])
        input_tensors = [layers[name].output for name in config["inputs"]]
        produced: list[list[Any]] = []

        def resolve(ref: Any) -> Any:
            if "constant" in ref:
                return ref["constant"]
            if "input" in ref:
                return input_tensors[ref["input"]]
            return produced[ref["node"]][ref["index"]]

        def unref(structure: Any) -> Any:
            if isinstance(structure, dict) and set(structure) & {"constant", "input", "node"}:
                return resolve(structure)
            if isinstance(structure, dict):
                return {k: unref(v) for k, v in structure.items()}
            if isinstance(structure, (list, tuple)):
                return [unref(v) for v in structure]
            return structure

        for node in config["nodes"]:
            out = layers[node["layer"]](unref(node["inputs"]), **node["kwargs"])
            produced.append(leaves(out))
        return cls(unref(config["input_structure"]), unref(config["outputs"]), name=config["name"])
