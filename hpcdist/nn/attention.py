"""`MultiHeadAttention` (``tf.keras.layers.MultiHeadAttention``): Keras 3's weights and numbers.

The query, key and value are projected by `EinsumDense` layers named ``query``, ``key`` and
``value`` (kernels ``(dim, num_heads, key_dim)`` / ``(dim, num_heads, value_dim)``, biases
``(num_heads, key_dim)``), the scaled dot products are normalised by a softmax over the key
positions, the values are combined with them and projected back by ``attention_output``
(kernel ``(num_heads, value_dim, output dim)``). As Keras 3 on TF: without dropout, without
returned scores and for inputs of rank 3, masked logits are replaced by ``-0.7 * 3.38953e38``
before the softmax (TF's ``dot_product_attention``: a row masked entirely attends uniformly);
otherwise the query is scaled first and Keras' masked `Softmax` runs (masked logits -1e9, a
row masked entirely gives zeros), followed by the attention dropout.
"""

from __future__ import annotations

import math
import string
from typing import Any

import numpy as np

from hpcdist.core import math_ops as ops
from hpcdist.core.autodiff import record
from hpcdist.core.tensors import Tensor, as_tensor
from hpcdist.nn import activations, initializers
from hpcdist.nn.activation_layers import Softmax
from hpcdist.nn.base_layer import Layer
from hpcdist.nn.einsum_dense import EinsumDense, einsum
from hpcdist.nn.layer_config import config_value, regularizer_config, regularizer_from_config
from hpcdist.utils.xp import array_module, as_array_like, to_numpy

__all__ = ["MultiHeadAttention"]

_LARGE_NEGATIVE = -0.7 * 3.38953e38  # TF's dot_product_attention fill (float32)


def _letters(i: int) -> str:
    return string.ascii_lowercase[i]


def _projection_equation(free_dims: int, bound_dims: int, output_dims: int) -> tuple[str, str, int]:
    """Keras' ``_build_proj_equation``: the equation, the bias axes and the output rank."""
    inputs = "".join(_letters(i) for i in range(free_dims))
    output = inputs
    kernel = "".join(_letters(free_dims + i) for i in range(bound_dims))
    inputs += kernel
    bias = "".join(_letters(free_dims + bound_dims + i) for i in range(output_dims))
    kernel += bias
    output += bias
    return f"{inputs},{kernel}->{output}", bias, len(output)


def _attention_equations(rank: int, attn_axes: tuple[int, ...]) -> tuple[str, str, int]:
    """Keras' ``_build_attention_equation``: dot product and combine equations, scores rank."""
    target = "".join(_letters(i) for i in range(rank))
    batch_dims = tuple(i for i in range(rank) if i not in (*attn_axes, rank - 1))
    offset = rank
    source = ""
    for i in range(rank):
        if i in batch_dims or i == rank - 1:
            source += target[i]
        else:
            source += _letters(offset)
            offset += 1
    product = "".join(
        [target[i] for i in batch_dims]
        + [target[i] for i in attn_axes]
        + [source[i] for i in attn_axes]
    )
    return f"{source},{target}->{product}", f"{product},{source}->{target}", len(product)


def _where(mask: Any, x: Tensor, fill: float) -> Tensor:
    """``where(mask, x, fill)`` (``mask`` broadcast to ``x``); the gradient flows where kept."""
    xp = array_module(x.value)
    keep = xp.broadcast_to(as_array_like(mask, x.value), x.shape)
    out = xp.where(keep, x.value, x.value.dtype.type(fill))
    return record(out, (x,), lambda g: (xp.where(keep, g, xp.zeros_like(g)),))


def _causal_mask(query_len: int, key_len: int) -> np.ndarray:
    """``(1, T, S)``: query position i attends to key positions j <= i."""
    return np.tril(np.ones((query_len, key_len), bool))[None]


class MultiHeadAttention(Layer):
    """Multi-head attention (Vaswani et al., 2017) as ``keras.layers.MultiHeadAttention``.

    Args:
        num_heads: Number of heads.
        key_dim: Size of each head for query and key.
        value_dim: Size of each head for value (default ``key_dim``).
        dropout: Dropout rate on the attention probabilities (in training).
        use_bias: Whether the projections have biases.
        output_shape: The output's shape without batch and positions (default: the query's
            last axis).
        attention_axes: Axes attention runs over (default: all but batch, heads, features).
        kernel_initializer: Initializer of the projection kernels.
        bias_initializer: Initializer of the biases.
        kernel_regularizer: Penalty on the kernels.
        bias_regularizer: Penalty on the biases.
        seed: Seed of the dropout.
        **kwargs: `Layer` arguments.

    Call arguments:
        query: ``(B, T, dim)``.
        value: ``(B, S, dim)``.
        key: ``(B, S, dim)`` (default ``value``).
        attention_mask: Boolean ``(B, T, S)`` (broadcast over missing batch and head axes):
            true where a query position may attend to a key position.
        return_attention_scores: Also return the ``(B, num_heads, T, S)`` probabilities.
        training: Apply the dropout.
        use_causal_mask: Each query position attends only to key positions up to its own.

    Raises:
        ValueError: ``num_heads``, ``key_dim`` or ``value_dim`` not positive integers, or a
            ``dropout`` outside ``[0, 1)``.
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        value_dim: int | None = None,
        dropout: float = 0.0,
        use_bias: bool = True,
        output_shape: Any = None,
        attention_axes: Any = None,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        for what, value in (("num_heads", num_heads), ("key_dim", key_dim)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(
                    f"Received an invalid value for argument `{what}`, expected a positive "
                    f"integer. Received: {what}={value!r}"
                )
        if value_dim is not None and (
            isinstance(value_dim, bool)
            or not isinstance(value_dim, (int, np.integer))
            or value_dim <= 0
        ):
            raise ValueError(
                "Received an invalid value for argument `value_dim`, expected a positive "
                f"integer or `None`. Received: value_dim={value_dim!r}"
            )
        if not 0 <= float(dropout) < 1:
            raise ValueError(f"MultiHeadAttention: dropout must be in [0, 1), received {dropout}")
        super().__init__(**kwargs)
        self.num_heads, self.key_dim = int(num_heads), int(key_dim)
        self.value_dim = int(value_dim) if value_dim else self.key_dim
        self.dropout, self.use_bias = float(dropout), bool(use_bias)
        if isinstance(output_shape, (int, np.integer)):
            output_shape = (int(output_shape),)
        self._output_shape = tuple(int(d) for d in output_shape) if output_shape else None
        if isinstance(attention_axes, (int, np.integer)):
            attention_axes = (int(attention_axes),)
        self.attention_axes = None if attention_axes is None else tuple(attention_axes)
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer
        self.kernel_regularizer = regularizer_from_config(kernel_regularizer)
        self.bias_regularizer = regularizer_from_config(bias_regularizer)
        self.seed = seed
        seed = seed if seed is not None else int(initializers.generator().integers(2**31))
        self._rng = np.random.default_rng(seed)
        self._projections: list[EinsumDense] = []

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        n = self.name
        axes = self.attention_axes
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "dropout": self.dropout,
            "use_bias": self.use_bias,
            "output_shape": None if self._output_shape is None else list(self._output_shape),
            "attention_axes": None if axes is None else list(axes),
            "kernel_initializer": config_value(n, "initializer", self.kernel_initializer),
            "bias_initializer": config_value(n, "initializer", self.bias_initializer),
            "kernel_regularizer": regularizer_config(n, self.kernel_regularizer),
            "bias_regularizer": regularizer_config(n, self.bias_regularizer),
            "seed": self.seed,
        }

    # -- sublayers -------------------------------------------------------------------------

    def _sublayers(self) -> list[Layer]:
        return list(self._projections)

    @property
    def query_dense(self) -> EinsumDense:
        """The query projection (``query``)."""
        return self._projections[0]

    @property
    def key_dense(self) -> EinsumDense:
        """The key projection (``key``)."""
        return self._projections[1]

    @property
    def value_dense(self) -> EinsumDense:
        """The value projection (``value``)."""
        return self._projections[2]

    @property
    def output_dense(self) -> EinsumDense:
        """The output projection (``attention_output``)."""
        return self._projections[3]

    def _projection(
        self, name: str, input_shape: tuple[int, ...], bound: int, last: list[int]
    ) -> EinsumDense:
        equation, bias_axes, rank = _projection_equation(len(input_shape) - bound, bound, len(last))
        dense = EinsumDense(
            equation,
            [None] * (rank - 1 - len(last)) + list(last),
            bias_axes=bias_axes if self.use_bias else None,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            kernel_regularizer=self.kernel_regularizer,
            bias_regularizer=self.bias_regularizer,
            name=name,
            trainable=self.trainable,
            dtype=self.dtype,
        )
        dense.build(tuple(input_shape))
        for weight in dense.weights:  # Keras' path: "<attention layer>/query/kernel"
            weight.name = f"{self.name}/{weight.name}"
        return dense

    def build(self, input_shape: dict[str, tuple[int, ...]]) -> None:
        """The four projections, the softmax and the dropout (Keras' order).

        Raises:
            ValueError: Inputs of rank below 3, or key and value that differ in more than
                their last axis.
        """
        query_shape, value_shape = tuple(input_shape["query"]), tuple(input_shape["value"])
        key_shape = tuple(input_shape.get("key", value_shape))
        for what, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            if len(shape) < 3:
                raise ValueError(
                    f"{self.name}: expected {what} of rank >= 3 (batch, positions, features), "
                    f"received {what}.shape={shape}"
                )
        if value_shape[1:-1] != key_shape[1:-1]:
            raise ValueError(
                "All dimensions of `value` and `key`, except the last one, must be equal. "
                f"Received: value_shape={value_shape} and key_shape={key_shape}"
            )
        heads = self.num_heads
        query = self._projection("query", query_shape, 1, [heads, self.key_dim])
        key = self._projection("key", key_shape, 1, [heads, self.key_dim])
        value = self._projection("value", value_shape, 1, [heads, self.value_dim])
        rank = len(query_shape) + 1
        if self.attention_axes is None:
            self.attention_axes = tuple(range(1, rank - 2))
        else:
            self.attention_axes = tuple(
                a if a >= 0 else (rank - 1) + a for a in self.attention_axes
            )
        self._dot_equation, self._combine_equation, scores_rank = _attention_equations(
            rank, self.attention_axes
        )
        norm_axes = list(range(scores_rank - len(self.attention_axes), scores_rank))
        self._softmax = Softmax(axis=norm_axes, dtype=self.dtype)
        out_shape = list(self._output_shape or [query_shape[-1]])
        output_input = (*query_shape[:-1], heads, self.value_dim)
        output = self._projection("attention_output", output_input, 2, out_shape)
        self._projections = [query, key, value, output]
        self.built = True

    # -- calling ---------------------------------------------------------------------------

    def __call__(
        self,
        query: Any,
        value: Any = None,
        key: Any = None,
        attention_mask: Any = None,
        return_attention_scores: bool = False,
        training: bool | None = None,
        use_causal_mask: bool = False,
        **kwargs: Any,
    ) -> Any:
        """``layer(query, value, key=None, attention_mask=None, ...)``, as Keras.

        The tensors travel as one dict (``query``, ``value``, ``key``, ``attention_mask``), so
        that the functional API records and replays them; a dict as ``query`` is such a call.

        Raises:
            ValueError: No ``value``.
        """
        if isinstance(query, dict) and value is None:
            inputs = dict(query)
        else:
            if value is None:
                raise ValueError(f"{self.name}: called without `value` (query, value[, key])")
            inputs = {"query": query, "value": value}
            if key is not None:
                inputs["key"] = key
            if attention_mask is not None:
                inputs["attention_mask"] = attention_mask
        return super().__call__(
            inputs,
            training=training,
            return_attention_scores=bool(return_attention_scores),
            use_causal_mask=bool(use_causal_mask),
            **kwargs,
        )

    def _mask(self, inputs: dict[str, Any], query: Any, value: Any, causal: bool) -> Any:
        """The boolean ``(B, T, S)`` mask (None if none): ``attention_mask`` and causality.

        Raises:
            ValueError: A mask that does not broadcast to ``(B, T, S)``.
        """
        mask = inputs.get("attention_mask")
        q_len, v_len = np.shape(query)[1], np.shape(value)[1]
        if mask is not None:
            m = to_numpy(mask.value if isinstance(mask, Tensor) else mask)
            expected = (np.shape(query)[0], *np.shape(query)[1:-1], *np.shape(value)[1:-1])
            try:
                np.broadcast_shapes(m.shape, expected)
            except ValueError:
                raise ValueError(
                    f"{self.name}: attention_mask must broadcast to (batch, query positions, "
                    f"key positions) = {expected}, received attention_mask.shape={m.shape}"
                ) from None
            if m.ndim > len(expected):
                raise ValueError(
                    f"{self.name}: attention_mask must have at most {len(expected)} axes "
                    f"{expected}, received attention_mask.shape={m.shape}"
                )
            mask = m.astype(bool)
        if causal:
            c = _causal_mask(q_len, v_len)
            mask = c if mask is None else np.logical_and(mask, c)
        return mask

    def call(
        self,
        inputs: dict[str, Any],
        training: bool | None = None,
        return_attention_scores: bool = False,
        use_causal_mask: bool = False,
    ) -> Any:
        """Project, attend, combine and project back.

        Returns:
            The output, and with ``return_attention_scores`` also the attention probabilities.
        """
        query, value = as_tensor(inputs["query"]), as_tensor(inputs["value"])
        key = as_tensor(inputs["key"]) if "key" in inputs else value
        mask = self._mask(inputs, query, value, use_causal_mask)
        q = self.query_dense(query)
        k = self.key_dense(key)
        v = self.value_dense(value)
        fused = not (self.dropout > 0 or return_attention_scores or q.ndim != 4)
        if fused:
            output, scores = self._fused_attention(q, k, v, mask), None
        else:
            output, scores = self._attention(q, k, v, mask, training)
        output = self.output_dense(output)
        return (output, scores) if return_attention_scores else output

    def _expand_mask(self, mask: Any, rank: int) -> Any:
        """``mask`` with axes inserted before its attention axes up to ``rank`` (the heads)."""
        axis = -len(self.attention_axes) * 2 - 1
        for _ in range(rank - mask.ndim):
            mask = np.expand_dims(mask, axis)
        return mask

    def _fused_attention(self, q: Tensor, k: Tensor, v: Tensor, mask: Any) -> Tensor:
        """TF's ``dot_product_attention`` (inputs of rank 3, no dropout, no scores)."""
        logits = ops.multiply(einsum("btnh,bsnh->bnts", q, k), 1.0 / math.sqrt(self.key_dim))
        if mask is not None:
            logits = _where(self._expand_mask(mask, 4), logits, _LARGE_NEGATIVE)
        probs = activations.softmax(logits, axis=-1)
        return einsum("bnts,bsnh->btnh", probs, v)

    def _attention(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Any, training: bool | None
    ) -> tuple[Tensor, Tensor]:
        """Keras' explicit path: scaled query, masked `Softmax`, dropout, combination."""
        q = ops.multiply(q, 1.0 / math.sqrt(self.key_dim))
        scores = einsum(self._dot_equation, k, q)
        if mask is not None:
            mask = self._expand_mask(mask, scores.ndim)
        scores = self._softmax(scores, mask=mask)
        dropped = scores
        if training and self.dropout > 0:  # as `Dropout`: keep with 1 - rate, scaled up
            keep = self._rng.random(scores.shape) >= self.dropout
            scale = as_array_like(keep, scores.value, scores.dtype) / (1 - self.dropout)
            dropped = ops.multiply(scores, scale)
        return einsum(self._combine_equation, dropped, v), scores
