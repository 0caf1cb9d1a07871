"""Symbolic tensors of the functional API (``tf.keras.Input`` and layers called on it).

A `KerasTensor` stands for a batch of inputs whose size is not known yet. Calling a layer on
one (or on a structure holding some) runs the layer once on a one-example placeholder, which
builds it and gives the output's shape, and returns a new `KerasTensor` that remembers the
layer and its inputs; `Model(inputs, outputs)` replays that graph on real batches.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core.tensors import Tensor
from hpcdist.utils.xp import to_numpy

__all__ = [
    "KerasTensor",
    "is_symbolic",
    "leaves",
    "map_nested",
    "placeholders",
    "symbolic_call",
]


def leaves(structure: Any) -> list[Any]:
    """The leaves of nested lists, tuples and dicts (dict values in insertion order)."""
    if isinstance(structure, dict):
        return [leaf for value in structure.values() for leaf in leaves(value)]
    if isinstance(structure, (list, tuple)):
        return [leaf for item in structure for leaf in leaves(item)]
    return [structure]


def map_nested(fn: Any, structure: Any) -> Any:
    """``structure`` with ``fn`` applied to each leaf (lists, tuples and dicts kept)."""
    if isinstance(structure, dict):
        return {key: map_nested(fn, value) for key, value in structure.items()}
    if isinstance(structure, (list, tuple)) and not hasattr(structure, "_fields"):
        return type(structure)(map_nested(fn, item) for item in structure)
    return fn(structure)


class KerasTensor:
    """A symbolic batch: ``shape`` starts with None (the batch axis).

    Args:
        shape: Shape with the batch axis (None).
        dtype: Dtype of the values.
        layer: The layer that produced it (an `InputLayer` for an input).
        inputs: What ``layer`` was called on (a structure of `KerasTensor` and constants).
        kwargs: Keyword arguments of that call.
        name: Name (the producing layer's).
    """

    def __init__(
        self,
        shape: tuple[Any, ...],
        dtype: Any,
        layer: Any,
        inputs: Any = None,
        kwargs: dict[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.layer = layer
        self.inputs = inputs
        self.kwargs = dict(kwargs or {})
        self.name = name or getattr(layer, "name", "keras_tensor")
        self.node: dict[str, Any] = {}  # shared by the outputs of one call
        self.index = 0  # position among those outputs

    @property
    def ndim(self) -> int:
        """Rank, batch axis included."""
        return len(self.shape)

    def placeholder(self) -> np.ndarray:
        """Zeros of one example (batch axis 1, unknown sizes 1)."""
        dims = [1 if d is None else int(d) for d in self.shape]
        if dims:
            dims[0] = 1
        return np.zeros(dims, self.dtype)

    def __repr__(self) -> str:
        return f"<KerasTensor shape={self.shape} dtype={self.dtype.name} name={self.name!r}>"


def is_symbolic(structure: Any) -> bool:
    """Whether ``structure`` holds a `KerasTensor`."""
    if isinstance(structure, KerasTensor):
        return True
    if isinstance(structure, (list, tuple, dict)):
        return any(isinstance(leaf, KerasTensor) for leaf in leaves(structure))
    return False


def placeholders(structure: Any) -> Any:
    """``structure`` with each `KerasTensor` replaced by its one-example zeros."""
    return map_nested(
        lambda leaf: leaf.placeholder() if isinstance(leaf, KerasTensor) else leaf, structure
    )


def symbolic_call(layer: Any, inputs: Any, kwargs: dict[str, Any]) -> Any:
    """Call ``layer`` on placeholders and return `KerasTensor` outputs that record the call."""
    out = layer(placeholders(inputs), **{**kwargs, "training": False})

    node: dict[str, Any] = {"layer": getattr(layer, "name", "")}
    made: list[KerasTensor] = []

    def wrap(value: Any) -> KerasTensor:
        array = to_numpy(value.value if isinstance(value, Tensor) else np.asarray(value))
        tensor = KerasTensor((None, *array.shape[1:]), array.dtype, layer, inputs, kwargs)
        tensor.node, tensor.index = node, len(made)
        made.append(tensor)
        return tensor

    return map_nested(wrap, out)
