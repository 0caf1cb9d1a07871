"""`BatchNormalization` (also synchronized across replicas) and `LayerNormalization`.

`BatchNormalization` is Keras 3's layer: in training (``training=True`` and the layer trainable)
the inputs are normalised with the batch's mean and variance over every axis but ``axis``, and
the moving statistics move towards them (``moving = moving * momentum + batch * (1 -
momentum)``); in inference, and always when ``trainable`` is False, with the moving statistics.
The output is TF's ``batch_normalization``: ``x * inv + (beta - mean * inv)`` with ``inv = gamma
/ sqrt(variance + epsilon)``.

With ``synchronized=True`` the batch statistics are those of the global batch: each replica sums
its inputs, their squares and its example count per channel, one all-reduce over every replica of
the current strategy (local replicas and ranks) adds them, and ``mean = sum / count``,
``variance = max(sum_sq / count - mean**2, 0)`` (Keras' own formula for TF). The backward pass
all-reduces the two per-channel sums of the gradient as well, so N replicas compute exactly the
gradient of one process on the global batch.

The moving statistics are non-trainable variables that every replica updates in its own copy
(TF's rule for a variable of aggregation NONE, which Keras 3 gives them): without
``synchronized`` the copies of different replicas drift apart, each following its own batches,
and a read in cross-replica context (``get_weights``, checkpoints) sees the first local
replica's copy; with ``synchronized`` every copy receives the same update.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hpcdist.core import context
from hpcdist.core import math_ops as ops
from hpcdist.core.autodiff import record
from hpcdist.core.per_channel import per_channel
from hpcdist.core.reductions import sum_columns, sum_rows, sum_rows_of_product
from hpcdist.core.tensors import Tensor, as_tensor
from hpcdist.nn.base_layer import Layer, float_input
from hpcdist.nn.layer_config import config_value, regularizer_config, regularizer_from_config
from hpcdist.utils.xp import array_module, as_array_like, to_numpy

__all__ = ["BatchNormalization", "LayerNormalization", "batch_normalization"]

_MASK_EPSILON = 1e-7  # Keras' backend.epsilon(), added to the mask's weight sums


def _replica_all_reduce() -> Callable[[Any], Any] | None:
    """A SUM all-reduce over every replica of the current strategy, or None outside a replica.

    In cross-replica context (inside ``strategy.scope()`` but not in ``strategy.run``) there is
    no replica to reduce with, and Keras computes local statistics: so does this.
    """
    ctx = context.get_replica_context()
    if ctx is None:
        return None
    if ctx.num_replicas_in_sync == 1:
        return lambda array: array
    return lambda array: as_array_like(ctx.all_reduce("sum", to_numpy(array)), array)


def batch_normalization(
    x: Any, mean: Any, variance: Any, offset: Any, scale: Any, variance_epsilon: float
) -> Tensor:
    """TF's ``tf.nn.batch_normalization``: ``x * inv + (offset - mean * inv)``.

    ``inv = scale / sqrt(variance + variance_epsilon)``; ``offset`` and ``scale`` may be None.
    All arguments broadcast against ``x``.
    """
    inv = ops.divide(1.0, ops.sqrt(ops.add(variance, variance_epsilon)))
    if scale is not None:
        inv = ops.multiply(inv, scale)
    scaled_mean = ops.multiply(mean, inv)
    shift = ops.negative(scaled_mean) if offset is None else ops.subtract(offset, scaled_mean)
    return ops.add(ops.multiply(x, inv), shift)


def _train_normalize(
    x: Tensor,
    gamma: Tensor | None,
    beta: Tensor | None,
    axis: int,
    epsilon: float,
    all_reduce: Callable[[Any], Any] | None,
) -> tuple[Tensor, Any, Any]:
    """Normalise ``x`` with its batch statistics; one fused operation with its own backward.

    The work is done on ``x`` as a ``(rows, channels)`` array (the channel axis moved last when
    it is not), so that every per-channel sum is one `sum_rows` and every elementwise step one
    pass over the rows.

    Args:
        x: The inputs.
        gamma: Scale (of ``channels`` elements, any shape) or None.
        beta: Offset (same) or None.
        axis: The channel axis (the others are reduced).
        epsilon: Added to the variance.
        all_reduce: None for this replica's statistics (``tf.nn.moments``: mean, then the mean
            of squared differences); else the SUM all-reduce across replicas, for the
            synchronized statistics and their gradient.

    Returns:
        The output, and the batch mean and variance (``(channels,)`` arrays).
    """
    xv = x.value
    xp = array_module(xv)
    moved = axis != xv.ndim - 1
    channels = xv.shape[axis]
    last = xv.shape[:axis] + xv.shape[axis + 1 :] + (channels,)  # the channels moved last

    def rows_of(a: Any) -> Any:
        return (xp.moveaxis(a, axis, -1) if moved else a).reshape(-1, channels)

    def from_rows(a2: Any) -> Any:
        return xp.moveaxis(a2.reshape(last), -1, axis) if moved else a2.reshape(xv.shape)

    x2 = rows_of(xv)
    rows = x2.shape[0]
    if all_reduce is None:
        count = float(rows)
        mean = sum_rows(x2) / rows
        d = per_channel(xp.subtract, x2, mean)
        variance = sum_rows_of_product(d, d) / rows
        del d
        clamped = None
    else:
        local = xp.stack(
            [sum_rows(x2), sum_rows_of_product(x2, x2), xp.full(channels, rows, x2.dtype)]
        )
        total, total_sq, counts = all_reduce(local)
        count = counts[0].item()
        if count > 0:
            mean = total / counts
            raw = total_sq / counts - mean * mean
        else:  # divide_no_nan: no example on any replica
            mean, raw = xp.zeros_like(total), xp.zeros_like(total)
        clamped = raw < 0
        variance = xp.maximum(raw, 0)
    rstd = 1 / xp.sqrt(variance + xv.dtype.type(epsilon))
    inv = rstd if gamma is None else rstd * gamma.value.reshape(-1)
    shift = -mean * inv if beta is None else beta.value.reshape(-1) - mean * inv
    out2 = per_channel(xp.multiply, x2, inv)
    per_channel(xp.add, out2, shift, out=out2)
    del x2  # a copy when the channels were moved: the backward pass takes the rows again
    out = from_rows(out2)
    parents = tuple(t for t in (x, gamma, beta) if t is not None)

    def backward(g: Any) -> tuple[Any, ...]:
        g2 = rows_of(g)
        d = per_channel(xp.subtract, rows_of(xv), mean)
        sum_g = sum_rows(g2)
        sum_gx = sum_rows_of_product(g2, d) * rstd  # the sum of g * xhat, xhat = d * rstd
        grads: list[Any] = []
        if x.trace:
            if all_reduce is None:
                total_g, total_gx = sum_g, sum_gx
            else:
                total_g, total_gx = all_reduce(xp.stack([sum_g, sum_gx]))
                total_gx = xp.where(clamped, xp.zeros_like(total_gx), total_gx)
            n = max(count, 1.0)
            # inv * (g - total_g / n - xhat * total_gx / n), as g * inv + d * a + b
            per_channel(xp.multiply, d, -(inv * rstd) * (total_gx / n), out=d)
            per_channel(xp.add, d, -inv * (total_g / n), out=d)
            gx2 = per_channel(xp.multiply, g2, inv)
            gx2 += d
            grads.append(from_rows(gx2))
        else:
            grads.append(None)
        if gamma is not None:
            grads.append(sum_gx.reshape(gamma.shape))
        if beta is not None:
            grads.append(sum_g.reshape(beta.shape))
        return tuple(grads)

    return record(out, parents, backward), mean, variance


def _weight_tensor(var: Any, dtype: np.dtype, shape: tuple[int, ...]) -> Tensor | None:
    """A weight as a tensor of ``dtype`` shaped to broadcast against the inputs (None: None)."""
    if var is None:
        return None
    t = as_tensor(var)
    if t.dtype != dtype:
        t = ops.cast(t, dtype)
    return t if t.shape == shape else ops.reshape(t, shape)


def _masked_moments(x: Tensor, mask: Any, axes: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """Keras' masked mean and variance (``mask`` lacks the channel axis: one weight per row)."""
    xp = array_module(x.value)
    m = as_array_like(mask.value if isinstance(mask, Tensor) else mask, x.value)
    weights = xp.broadcast_to(xp.expand_dims(m, -1), x.shape).astype(bool).astype(x.dtype)
    total_weight = weights.sum(axis=axes, keepdims=True) + x.dtype.type(_MASK_EPSILON)
    mean = ops.divide(
        ops.reduce_sum(ops.multiply(x, weights), axis=axes, keepdims=True), total_weight
    )
    diff = ops.multiply(ops.subtract(x, mean), weights)
    variance = ops.divide(ops.reduce_sum(ops.square(diff), axis=axes, keepdims=True), total_weight)
    return mean, variance


class BatchNormalization(Layer):
    """Normalise with batch statistics in training and moving statistics in inference.

    Args:
        axis: The features axis (the others are reduced).
        momentum: Momentum of the moving averages.
        epsilon: Added to the variance.
        center: Add the offset ``beta``.
        scale: Multiply by ``gamma``.
        beta_initializer: Initializer of ``beta``.
        gamma_initializer: Initializer of ``gamma``.
        moving_mean_initializer: Initializer of ``moving_mean``.
        moving_variance_initializer: Initializer of ``moving_variance``.
        beta_regularizer: Penalty on ``beta``.
        gamma_regularizer: Penalty on ``gamma``.
        synchronized: Batch statistics over every replica of the current strategy (the global
            batch) instead of this replica's.
        **kwargs: `Layer` arguments (``name``, ``trainable``, ``dtype``, ``input_shape``).

    Raises:
        ValueError: ``momentum`` or ``epsilon`` out of range.
    """

    def __init__(
        self,
        axis: int = -1,
        momentum: float = 0.99,
        epsilon: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        beta_initializer: Any = "zeros",
        gamma_initializer: Any = "ones",
        moving_mean_initializer: Any = "zeros",
        moving_variance_initializer: Any = "ones",
        beta_regularizer: Any = None,
        gamma_regularizer: Any = None,
        synchronized: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise ValueError(f"BatchNormalization: axis must be an integer, received {axis!r}")
        if float(epsilon) <= 0:
            raise ValueError(f"BatchNormalization: epsilon must be positive, received {epsilon}")
        self.axis = int(axis)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.center, self.scale = bool(center), bool(scale)
        self.synchronized = bool(synchronized)
        self.beta_initializer, self.gamma_initializer = beta_initializer, gamma_initializer
        self.moving_mean_initializer = moving_mean_initializer
        self.moving_variance_initializer = moving_variance_initializer
        self.beta_regularizer = regularizer_from_config(beta_regularizer)
        self.gamma_regularizer = regularizer_from_config(gamma_regularizer)
        self.gamma: Any = None
        self.beta: Any = None
        self.moving_mean: Any = None
        self.moving_variance: Any = None
        self._rank: int | None = None

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        n = self.name
        return {
            **super().get_config(),
            "axis": self.axis,
            "momentum": self.momentum,
            "epsilon": self.epsilon,
            "center": self.center,
            "scale": self.scale,
            "beta_initializer": config_value(n, "initializer", self.beta_initializer),
            "gamma_initializer": config_value(n, "initializer", self.gamma_initializer),
            "moving_mean_initializer": config_value(n, "initializer", self.moving_mean_initializer),
            "moving_variance_initializer": config_value(
                n, "initializer", self.moving_variance_initializer
            ),
            "beta_regularizer": regularizer_config(n, self.beta_regularizer),
            "gamma_regularizer": regularizer_config(n, self.gamma_regularizer),
            "synchronized": self.synchronized,
        }

    def _channel_axis(self, shape: tuple[int, ...]) -> int:
        """``axis`` as a non-negative index into ``shape``.

        Raises:
            ValueError: ``axis`` is outside ``[-rank, rank)``.
        """
        rank = len(shape)
        if not -rank <= self.axis < rank:
            raise ValueError(
                f"{self.name}: axis {self.axis} is out of bounds for an input of shape "
                f"{tuple(shape)}: expected an axis in [{-rank}, {rank})"
            )
        return self.axis % rank

    def build(self, input_shape: tuple[int, ...]) -> None:
        """``gamma``, ``beta``, ``moving_mean`` and ``moving_variance`` (Keras' order)."""
        channels = (int(input_shape[self._channel_axis(input_shape)]),)
        if self.scale:
            self.gamma = self.add_weight(
                "gamma", channels, self.gamma_initializer, self.gamma_regularizer
            )
        if self.center:
            self.beta = self.add_weight(
                "beta", channels, self.beta_initializer, self.beta_regularizer
            )
        self.moving_mean = self.add_weight(
            "moving_mean", channels, self.moving_mean_initializer, trainable=False
        )
        self.moving_variance = self.add_weight(
            "moving_variance", channels, self.moving_variance_initializer, trainable=False
        )
        self._rank = len(input_shape)
        self.built = True

    def _check_input(self, x: Tensor) -> int:
        """The channel axis of ``x``.

        Raises:
            ValueError: ``x`` has another rank or channel count than the layer was built for.
        """
        channels = self.moving_mean.shape[0]
        if x.ndim != self._rank or x.shape[self.axis % self._rank] != channels:
            raise ValueError(
                f"{self.name}: expected an input of rank {self._rank} with {channels} features "
                f"on axis {self.axis}, received an input of shape {tuple(x.shape)}"
            )
        return self.axis % x.ndim

    def call(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Tensor:
        """Normalise ``inputs``; in training, update the moving statistics.

        Args:
            inputs: A floating-point tensor of the rank the layer was built for.
            training: Normalise with the batch's statistics (when the layer is trainable).
            mask: Of the inputs' shape without the last axis: only the rows where it is true
                count towards the batch statistics (Keras 3; not synchronized).

        Raises:
            ValueError: A wrong input shape, or a mask whose rank is not one less than the
                inputs'.
        """
        x, _ = ops.same_device(as_tensor(inputs), as_tensor(self.moving_mean))
        axis = self._check_input(x)
        compute = np.result_type(x.dtype, np.float32)
        if x.dtype != compute:
            x = ops.cast(x, compute)
        if mask is not None and np.ndim(getattr(mask, "value", mask)) != x.ndim - 1:
            raise ValueError(
                f"{self.name}: the mask must have one dimension less than the inputs: received "
                f"mask.shape={np.shape(getattr(mask, 'value', mask))}, inputs.shape={x.shape}"
            )
        axes = tuple(a for a in range(x.ndim) if a != axis)
        shape = tuple(x.shape[a] if a == axis else 1 for a in range(x.ndim))
        gamma = _weight_tensor(self.gamma, compute, shape)
        beta = _weight_tensor(self.beta, compute, shape)
        if not (training and self.trainable):
            moving_mean = _weight_tensor(self.moving_mean, compute, shape)
            moving_variance = _weight_tensor(self.moving_variance, compute, shape)
            out = batch_normalization(x, moving_mean, moving_variance, beta, gamma, self.epsilon)
        elif mask is not None:
            mean_t, var_t = _masked_moments(x, mask, axes)
            out = batch_normalization(x, mean_t, var_t, beta, gamma, self.epsilon)
            self._update_moving(mean_t.value, var_t.value)
        else:
            reduce = _replica_all_reduce() if self.synchronized else None
            out, mean, variance = _train_normalize(x, gamma, beta, axis, self.epsilon, reduce)
            self._update_moving(mean, variance)
        return out if out.dtype == self.dtype else ops.cast(out, self.dtype)

    def _update_moving(self, mean: Any, variance: Any) -> None:
        """Keras' update of both moving statistics, in this replica's copies."""
        momentum = self.momentum
        for var, batch in ((self.moving_mean, mean), (self.moving_variance, variance)):
            old = var.local_value()
            batch = as_array_like(batch, old).reshape(old.shape).astype(old.dtype, copy=False)
            new = old * old.dtype.type(momentum) + batch * old.dtype.type(1.0 - momentum)
            _assign_in_replica(var, new)


def _assign_in_replica(var: Any, value: Any) -> None:
    """Assign ``value`` to the current replica's copy of ``var`` only (TF's aggregation NONE).

    In cross-replica context, or with one replica in sync, this is a plain ``assign``; in a
    replica of a strategy with a copy per replica, only that replica's copy changes.
    """
    ctx = context.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        var.assign(value, read_value=False)
        return
    strategy = ctx.strategy
    copies = strategy.extended.local_components(var, copies=True)
    if copies is None:  # one shared copy (central storage): TF's aggregation rules apply
        var.assign(value, read_value=False)
        return
    index = ctx.replica_id_in_sync_group - strategy.extended.local_replica_ids[0]
    copies[index].assign(value, read_value=False)


class LayerNormalization(Layer):
    """Normalise over the last axis, then scale (``gamma``) and shift (``beta``).

    Args:
        epsilon: Added to the variance.
        **kwargs: `Layer` arguments.
    """

    def __init__(self, epsilon: float = 1e-3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.epsilon = float(epsilon)

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        return {**super().get_config(), "epsilon": self.epsilon}

    def build(self, input_shape: tuple[int, ...]) -> None:
        """``gamma`` (ones) and ``beta`` (zeros) of the last axis' size."""
        self.gamma = self.add_weight("gamma", (input_shape[-1],), "ones")
        self.beta = self.add_weight("beta", (input_shape[-1],), "zeros")
        self.built = True

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """``(x - mean) / sqrt(var + eps) * gamma + beta`` over the last axis."""
        x = float_input(inputs, self.dtype)
        shape = (x.shape[-1],)
        gamma = _weight_tensor(self.gamma, x.dtype, shape)
        beta = _weight_tensor(self.beta, x.dtype, shape)
        return _layer_normalize(x, gamma, beta, self.epsilon)


def _layer_normalize(x: Tensor, gamma: Tensor, beta: Tensor, epsilon: float) -> Tensor:
    """Normalise each row of ``x`` over its last axis; one fused operation with its own backward.

    ``xhat = (x - mean) * rstd`` with ``rstd = 1 / sqrt(variance + epsilon)`` (the moments of
    ``tf.nn.moments``), ``out = xhat * gamma + beta``; the backward pass is ``rstd * (g gamma -
    mean(g gamma) - xhat * mean(g gamma xhat))`` per row, and the per-channel sums of ``g`` and
    ``g * xhat`` for ``beta`` and ``gamma``. Every row sum is one `sum_columns`.
    """
    xv = x.value
    xp = array_module(xv)
    channels = xv.shape[-1]
    x2 = xv.reshape(-1, channels)
    scale = xv.dtype.type(1.0 / channels) if channels else xv.dtype.type(0)
    d = x2 - (sum_columns(x2) * scale)[:, None]
    rstd = 1 / xp.sqrt(sum_columns(d * d) * scale + xv.dtype.type(epsilon))
    d *= rstd[:, None]  # xhat, kept for the backward pass
    xhat = d
    out = xhat * gamma.value
    out += beta.value

    def backward(g: Any) -> tuple[Any, Any, Any]:
        g2 = g.reshape(-1, channels)
        gx = None
        if x.trace:
            gx = g2 * gamma.value
            a = sum_columns(gx) * scale
            b = sum_columns(gx * xhat) * scale
            gx -= a[:, None]
            gx -= xhat * b[:, None]
            gx *= rstd[:, None]
            gx = gx.reshape(xv.shape)
        return gx, sum_rows_of_product(g2, xhat), sum_rows(g2)

    return record(out.reshape(xv.shape), (x, gamma, beta), backward)
