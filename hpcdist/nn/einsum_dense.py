"""`EinsumDense` (``tf.keras.layers.EinsumDense``) and the differentiable two-operand `einsum`.

An `EinsumDense` computes ``einsum(equation, inputs, kernel) + bias``: the projections of
`hpcdist.nn.attention.MultiHeadAttention` are such layers (``"abc,cde->abde"``). The kernel's
shape comes from the equation, the input's shape and ``output_shape`` as in Keras 3; the bias
covers the output axes from the first of ``bias_axes`` on (size 1 on the axes between them that
are not bias axes). Equations with ``...`` are not supported.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from hpcdist.core import math_ops as ops
from hpcdist.core.autodiff import record
from hpcdist.core.contraction import contract
from hpcdist.core.tensors import Tensor, as_tensor
from hpcdist.nn import initializers
from hpcdist.nn.base_layer import float_input
from hpcdist.nn.kernel_bias import KernelBiasLayer
from hpcdist.utils.xp import array_module

__all__ = ["EinsumDense", "einsum"]

_EQUATION = re.compile(r"^([a-zA-Z]+),([a-zA-Z]+)->([a-zA-Z]*)$")


def _parse(equation: str) -> tuple[str, str, str]:
    """The three subscripts of ``"<a>,<b>-><out>"``.

    Raises:
        ValueError: Another form (``...``, one or three operands, a letter repeated within one
            operand, or a letter of one operand in neither the other nor the output).
    """
    match = _EQUATION.match(equation.replace(" ", ""))
    if match is None:
        raise ValueError(
            f"einsum: expected an equation of the form 'ab,bc->ac' (two operands, no '...'), "
            f"received {equation!r}"
        )
    a, b, out = match.groups()
    for spec, other in ((a, b), (b, a)):
        if len(set(spec)) != len(spec) or any(c not in other and c not in out for c in spec):
            raise ValueError(
                f"einsum: every letter of an operand must appear once in it and also in the "
                f"other operand or the output; received {equation!r}"
            )
    return a, b, out


def einsum(equation: str, a: Any, b: Any) -> Tensor:
    """``einsum(equation, a, b)`` for two operands, with its gradient (``tf.einsum``).

    Raises:
        ValueError: An equation `einsum` does not take (see `_parse`), or operands whose
            shapes do not fit it.
    """
    spec_a, spec_b, spec_out = _parse(equation)
    a, b = ops.same_device(as_tensor(a), as_tensor(b))
    if a.ndim != len(spec_a) or b.ndim != len(spec_b):
        raise ValueError(
            f"einsum {equation!r}: expected operands of rank {len(spec_a)} and {len(spec_b)}, "
            f"received shapes {tuple(a.shape)} and {tuple(b.shape)}"
        )
    xp = array_module(a.value, b.value)
    value = contract(spec_a, spec_b, spec_out, a.value, b.value, xp)

    def backward(g: Any) -> tuple[Any, Any]:
        ga = contract(spec_out, spec_b, spec_a, g, b.value, xp) if a.trace else None
        gb = contract(spec_out, spec_a, spec_b, g, a.value, xp) if b.trace else None
        return ga, gb

    return record(value, (a, b), backward)


class EinsumDense(KernelBiasLayer):
    """``activation(einsum(equation, inputs, kernel) + bias)``.

    Args:
        equation: ``"<input>,<kernel>-><output>"``, e.g. ``"ab,bc->ac"`` (a `Dense`).
        output_shape: The output's shape without the batch axis; None where an axis has the
            input's size (an int for a single axis).
        activation: Name or callable (None = linear).
        bias_axes: Letters of the output axes that get a bias (None = no bias).
        kernel_initializer: Initializer of the kernel (fans: the input axes against the
            output axes, as Keras).
        bias_initializer: Initializer of the bias.
        kernel_regularizer: Penalty on the kernel.
        bias_regularizer: Penalty on the bias.
        **kwargs: `Layer` arguments.
    """

    def __init__(
        self,
        equation: str,
        output_shape: Any,
        activation: Any = None,
        bias_axes: str | None = None,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.equation = equation
        _parse(equation)
        if isinstance(output_shape, (int, np.integer)) or output_shape is None:
            output_shape = [output_shape]
        self.partial_output_shape = [None if d is None else int(d) for d in output_shape]
        self.bias_axes = bias_axes
        self._init_kernel_bias(
            activation,
            bias_axes is not None,
            kernel_initializer,
            bias_initializer,
            kernel_regularizer,
            bias_regularizer,
        )
        self.full_output_shape: tuple[Any, ...] | None = None

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        config = {**super().get_config(), **self._kernel_bias_config()}
        del config["use_bias"]
        return {
            **config,
            "equation": self.equation,
            "output_shape": list(self.partial_output_shape),
            "bias_axes": self.bias_axes,
        }

    def _shapes(self, input_shape: tuple[int, ...]) -> tuple[tuple, tuple | None, tuple]:
        """The kernel's, the bias' and the full output's shapes (Keras' analysis).

        Raises:
            ValueError: The input's rank does not match the equation, ``output_shape`` has
                the wrong length, or a bias axis is not an output axis.
        """
        spec_in, spec_kernel, spec_out = _parse(self.equation)
        if len(input_shape) != len(spec_in):
            raise ValueError(
                f"{self.name}: equation {self.equation!r} expects an input of rank "
                f"{len(spec_in)}, received shape {tuple(input_shape)}"
            )
        if len(self.partial_output_shape) != len(spec_out) - 1:
            raise ValueError(
                f"{self.name}: output_shape must have {len(spec_out) - 1} entries for "
                f"{self.equation!r} (the batch axis excluded), received "
                f"{self.partial_output_shape}"
            )
        out: list[Any] = [input_shape[0]]
        for letter, size in zip(spec_out[1:], self.partial_output_shape, strict=True):
            if size is None and letter in spec_in:
                size = input_shape[spec_in.index(letter)]
            out.append(size)
        sizes = {c: out[i] for i, c in enumerate(spec_out)}
        sizes.update({c: input_shape[i] for i, c in enumerate(spec_in)})
        kernel = tuple(int(sizes[c]) for c in spec_kernel)
        bias = None
        if self.bias_axes:
            missing = [c for c in self.bias_axes if c not in spec_out]
            if missing:
                raise ValueError(
                    f"{self.name}: bias axes {self.bias_axes!r} must be output axes of "
                    f"{self.equation!r}, received {missing}"
                )
            first = min(spec_out.index(c) for c in self.bias_axes)
            bias = tuple(
                int(out[i]) if c in self.bias_axes else 1
                for i, c in enumerate(spec_out)
                if i >= first
            )
        return kernel, bias, tuple(out)

    def _kernel_init(self, spec_in: str, spec_kernel: str) -> Any:
        """The kernel initializer with Keras' fans: input axes in, the others out."""
        init = initializers.get(self.kernel_initializer)
        n_in = sum(1 for c in spec_kernel if c in spec_in)
        ordered = all(c in spec_in for c in spec_kernel[:n_in])  # input axes first
        if not (
            isinstance(self.kernel_initializer, str) and 0 < n_in < len(spec_kernel) and ordered
        ):
            return init

        def with_fans(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
            fans = (int(np.prod(shape[:n_in])), int(np.prod(shape[n_in:])))
            return np.asarray(init(fans, dtype)).reshape(shape)

        return with_fans

    def build(self, input_shape: tuple[int, ...]) -> None:
        """The kernel and (with ``bias_axes``) the bias."""
        kernel, bias, self.full_output_shape = self._shapes(tuple(input_shape))
        spec_in, spec_kernel, _ = _parse(self.equation)
        self.kernel = self.add_weight(
            "kernel", kernel, self._kernel_init(spec_in, spec_kernel), self.kernel_regularizer
        )
        self.bias = None
        if bias is not None:
            self.bias = self.add_weight("bias", bias, self.bias_initializer, self.bias_regularizer)
        self.built = True

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """The einsum, then the bias and the activation.

        Raises:
            ValueError: The input's shape does not fit the kernel.
        """
        x = float_input(inputs, self.dtype)
        spec_in, spec_kernel, _ = _parse(self.equation)
        for i, c in enumerate(spec_in):
            if c in spec_kernel and (
                x.ndim != len(spec_in) or x.shape[i] != self.kernel.shape[spec_kernel.index(c)]
            ):
                raise ValueError(
                    f"{self.name}: expected an input of rank {len(spec_in)} with size "
                    f"{self.kernel.shape[spec_kernel.index(c)]} on axis {i}, received an "
                    f"input of shape {tuple(x.shape)}"
                )
        return self._bias_and_activation(einsum(self.equation, x, self.kernel))
