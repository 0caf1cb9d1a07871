"""Optimizers (Keras update rules) that all-reduce gradients across replicas.

`Optimizer.apply_gradients` called in replica context (inside ``strategy.run``) sums the
gradients over all replicas once per step, fused into few collectives
(`StrategyExtended.batch_reduce_to` -> `Communicator.grouped_allreduce`), then applies the
update once in cross-replica context to every copy of each variable. Slot variables (momenta,
moments) are variables of the same strategy.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.core import context
from hpcdist.core.autodiff import GradientTape
from hpcdist.core.tensors import IndexedSlices, Tensor
from hpcdist.core.variables import Variable, variable_key
from hpcdist.nn import schedules
from hpcdist.nn.clipping import check_clip_options, clip_gradients
from hpcdist.nn.layer_config import constructor_parameters
from hpcdist.nn.scalars import ScalarValue
from hpcdist.nn.schedules import ExponentialDecay, LearningRateSchedule, PiecewiseConstantDecay
from hpcdist.strategies.values import PerReplica
from hpcdist.utils.xp import array_module, as_array

__all__ = [
    "SGD",
    "Adam",
    "AdamW",
    "ExponentialDecay",
    "LearningRateSchedule",
    "Optimizer",
    "PiecewiseConstantDecay",
    "RMSprop",
    "get",
    "schedules",
]


class Optimizer:
    """Base class.

    Args:
        learning_rate: A float or a `LearningRateSchedule` of the iteration count.
        name: Name.
        clipnorm: Clip each gradient to this L2 norm (after the sum over replicas).
        clipvalue: Clip each gradient element to ``[-clipvalue, clipvalue]``.
        global_clipnorm: Clip all gradients together to this global L2 norm.

    Raises:
        ValueError: More than one clipping option.
    """

    def __init__(
        self,
        learning_rate: float | LearningRateSchedule = 0.01,
        name: str | None = None,
        clipnorm: float | None = None,
        clipvalue: float | None = None,
        global_clipnorm: float | None = None,
    ):
        check_clip_options(clipnorm, clipvalue, global_clipnorm)
        self.clipnorm, self.clipvalue, self.global_clipnorm = clipnorm, clipvalue, global_clipnorm
        self._learning_rate = learning_rate
        self.name = name or type(self).__name__
        self._slots: dict[tuple[Any, str], Any] = {}
        self._primaries: dict[Any, Any] = {}  # variable_key -> the variable the slots belong to
        self.iterations: Any = None
        self._strategy = context.get_strategy()  # slots live where the optimizer was created

    # -- learning rate -------------------------------------------------------------------------

    @property
    def learning_rate(self) -> ScalarValue:
        """The current learning rate (schedules evaluated at `iterations`).

        A float that also has ``numpy()``, and ``assign(value)`` as Keras' variable has.
        """
        lr = self._learning_rate
        if isinstance(lr, LearningRateSchedule):
            step = int(self.iterations.numpy()) if self.iterations is not None else 0
            return ScalarValue(lr(step), self._set_learning_rate)
        return ScalarValue(lr, self._set_learning_rate)

    def _set_learning_rate(self, value: float) -> None:
        self._learning_rate = value

    @learning_rate.setter
    def learning_rate(self, value: float | LearningRateSchedule) -> None:
        self._learning_rate = value if isinstance(value, LearningRateSchedule) else float(value)

    lr = learning_rate

    # -- config --------------------------------------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        """Keras' optimizer config: ``name``, ``learning_rate`` and the hyperparameters.

        ``learning_rate`` is a plain float, as in Keras, or for a schedule Keras' serialized
        form ``{"class_name": ..., "config": ...}``. The other keys are the constructor's
        arguments this optimizer keeps (``beta_1``, ``clipnorm``, ...).
        """
        params = constructor_parameters(self)
        config: dict[str, Any] = {"name": self.name}
        lr = self._learning_rate
        if isinstance(lr, LearningRateSchedule):
            config["learning_rate"] = {"class_name": type(lr).__name__, "config": lr.get_config()}
        else:
            config["learning_rate"] = float(lr)
        for key, value in vars(self).items():
            if key in params and key not in config and isinstance(value, bool | int | float):
                config[key] = value
            elif key in params and value is None:
                config[key] = None
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Optimizer:
        """An optimizer from `get_config`'s output."""
        config = dict(config)
        lr = config.get("learning_rate")
        if isinstance(lr, dict):
            schedule = getattr(schedules, lr["class_name"], None)
            if not (isinstance(schedule, type) and issubclass(schedule, LearningRateSchedule)):
                raise ValueError(
                    f"unknown learning-rate schedule {lr['class_name']!r}: expected one of "
                    f"{schedules.__all__}"
                )
            config["learning_rate"] = schedule.from_config(lr["config"])
        return cls(**config)

    # -- slots -------------------------------------------------------------------------------------

    def _build(self, variables: list[Any]) -> None:
        strategy = context.get_strategy() if context.has_strategy() else self._strategy
        if self.iterations is None:
            self.iterations = strategy.Variable(
                np.int64(0), name=f"{self.name}/iterations", trainable=False
            )
        for var in variables:
            self._primaries.setdefault(variable_key(var), var)
            for slot in self._slot_names():
                key = (variable_key(var), slot)
                if key not in self._slots:
                    self._slots[key] = _slot_variable(strategy, var, f"{var.name}/{slot}")

    def build(self, var_list: list[Any]) -> None:
        """Create the iteration counter and the slot variables of ``var_list`` now.

        Needed before scheduling training functions under `ParameterServerStrategy`, where
        variables can only be created on the coordinator.
        """
        self._build(list(var_list))

    def _slot_names(self) -> tuple[str, ...]:
        return ()

    def slot(self, var: Any, name: str) -> Any:
        """The slot variable ``name`` of ``var`` (rows of it, for a sparse update)."""
        if isinstance(var, _Rows):
            return _Rows(self._slots[(variable_key(var.variable), name)], var.ids)
        return self._slots[(variable_key(var), name)]

    @property
    def variables(self) -> list[Any]:
        """The iteration counter and every slot variable."""
        return ([self.iterations] if self.iterations is not None else []) + list(
            self._slots.values()
        )

    # -- checkpoint protocol (`hpcdist.core.trackable.SlotTrackable`) -------------------------

    def checkpoint_children(self) -> dict[str, Any]:
        """The iteration counter as ``iterations`` (once built)."""
        return {"iterations": self.iterations} if self.iterations is not None else {}

    def checkpoint_slots(self) -> list[tuple[str, Any, Any]]:
        """Every slot variable as ``(slot_name, primary_variable, slot_variable)``."""
        return [
            (slot, self._primaries[key], variable) for (key, slot), variable in self._slots.items()
        ]

    def build_checkpoint_slots(self, primaries: list[Any]) -> None:
        """Create the iteration counter and the slots of ``primaries`` before a restore."""
        self._build(list(primaries))

    # -- applying -------------------------------------------------------------------------------

    def apply_gradients(
        self,
        grads_and_vars: Iterable[tuple[Any, Any]],
        name: str | None = None,
        skip_gradients_aggregation: bool = False,
    ) -> None:
        """Apply one update. In replica context gradients are first summed over all replicas.

        Pairs whose gradient is None are skipped (as in Keras).

        Args:
            grads_and_vars: ``(gradient, variable)`` pairs.
            name: Ignored (Keras' argument).
            skip_gradients_aggregation: The gradients are already summed over the replicas
                (Keras' argument; ``Model.fit`` passes it after an overlapped all-reduce): the
                update is applied once, in cross-replica context, without reducing them again.
        """
        del name
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if not pairs:
            return
        ctx = context.get_replica_context()
        if context.has_strategy() and ctx is not None and ctx.num_replicas_in_sync > 1:
            grads = [_dense(g) for g, _ in pairs]
            apply = self._apply_reduced if skip_gradients_aggregation else self._distributed_apply
            ctx.merge_call(apply, args=(grads, [v for _, v in pairs]))
        else:  # one replica: nothing to combine (sparse gradients stay sparse)
            self._apply([(g if isinstance(g, IndexedSlices) else _dense(g), v) for g, v in pairs])

    def minimize(self, loss_fn: Any, var_list: list[Any]) -> None:
        """Compute gradients of ``loss_fn()`` with a tape and apply them."""
        with GradientTape() as tape:
            loss = loss_fn()
        self.apply_gradients(zip(tape.gradient(loss, var_list), var_list, strict=True))

    def _distributed_apply(self, strategy: Any, grads: Any, variables: Any) -> None:
        """Cross-replica half of apply_gradients: one fused SUM all-reduce, then the update."""
        variables = (
            list(variables) if not isinstance(variables, PerReplica) else list(variables.values[0])
        )
        if isinstance(grads, PerReplica):  # several local replicas: a PerReplica of lists
            columns = list(zip(*grads.values, strict=True))
            partials = [PerReplica(list(col)) for col in columns]
        else:
            partials = list(grads)
        reduced = strategy.extended.batch_reduce_to(ReduceOp.SUM, [(p, None) for p in partials])
        self._apply(list(zip([as_array(r) for r in reduced], variables, strict=True)))

    def _apply_reduced(self, strategy: Any, grads: Any, variables: Any) -> None:
        """Cross-replica half of apply_gradients for gradients already summed over replicas.

        Every local replica holds the same sums; the first replica's are applied.
        """
        del strategy
        if isinstance(variables, PerReplica):
            variables = variables.values[0]
        if isinstance(grads, PerReplica):
            grads = grads.values[0]
        self._apply(list(zip([as_array(g) for g in grads], variables, strict=True)))

    def _apply(self, pairs: list[tuple[Any, Any]]) -> None:
        self._build([v for _, v in pairs])
        pairs = clip_gradients(pairs, self.clipnorm, self.clipvalue, self.global_clipnorm)
        lr = float(self.learning_rate)
        step = int(self.iterations.numpy()) + 1
        for grad, var in pairs:
            if isinstance(grad, IndexedSlices) and hasattr(var, "scatter_add"):
                # Only the rows touched: their slots are read and written as rows too.
                grad = grad.deduplicate()
                rows = _Rows(var, grad.indices)
                update = self._update(grad.values.astype(var.dtype, copy=False), rows, lr, step)
                var.scatter_add(grad.indices, update.astype(var.dtype, copy=False))
                continue
            grad = _dense(grad)
            update = self._update(grad.astype(var.dtype, copy=False), var, lr, step)
            var.assign_add(update.astype(var.dtype, copy=False), read_value=False)
        self.iterations.assign_add(1, read_value=False)

    def _update(self, grad: np.ndarray, var: Any, lr: float, step: int) -> np.ndarray:
        """The delta to add to ``var`` (override); slots are updated here."""
        raise NotImplementedError


def _dense(grad: Any) -> np.ndarray:
    if isinstance(grad, Tensor):
        return as_array(grad.value)
    return as_array(grad)


def _slot_variable(strategy: Any, var: Any, name: str) -> Any:
    """A zero slot for ``var``, colocated with it (TF's rule).

    A single-copy variable on a GPU keeps its slots on that GPU even when the optimizer builds
    them outside the variable's strategy scope; otherwise the slot is a variable of
    ``strategy`` (which places it where the strategy places variables).
    """
    zeros = np.zeros(var.shape, var.dtype)
    device = getattr(var, "device", None)
    if type(var) is Variable and isinstance(device, str) and device.startswith("gpu:"):
        return Variable(zeros, name=name, trainable=False, device=device)
    return strategy.Variable(zeros, name=name, trainable=False)


def _read(var: Any) -> Any:
    """A variable's or slot's value where it lives (a CuPy array stays on its GPU).

    The update rules compute new arrays from it before assigning, so no copy is needed.
    """
    read = getattr(var, "local_value", None)
    return read() if read is not None else var.numpy()


class _Rows:
    """Rows ``ids`` of a variable, seen as a variable by the update rules (sparse updates)."""

    def __init__(self, variable: Any, ids: np.ndarray) -> None:
        self.variable, self.ids = variable, ids
        self.shape = (len(ids), *variable.shape[1:])
        self.dtype = variable.dtype

    def numpy(self) -> np.ndarray:
        return self.variable.sparse_read(self.ids)

    def assign(self, value: Any, read_value: bool = True) -> None:
        del read_value
        self.variable.scatter_update(self.ids, value)


class SGD(Optimizer):
    """Gradient descent with optional (Nesterov) momentum (Keras' rule).

    ``velocity = momentum * velocity - lr * g``; ``var += velocity`` (Nesterov:
    ``var += momentum * velocity - lr * g``).
    """

    def __init__(
        self,
        learning_rate: Any = 0.01,
        momentum: float = 0.0,
        nesterov: bool = False,
        **kwargs: Any,
    ):
        super().__init__(learning_rate, **kwargs)
        if not 0 <= momentum <= 1:
            raise ValueError(f"momentum must be in [0, 1], got {momentum}")
        self.momentum, self.nesterov = float(momentum), nesterov

    def _slot_names(self) -> tuple[str, ...]:
        return ("momentum",) if self.momentum else ()

    def _update(self, grad: np.ndarray, var: Any, lr: float, step: int) -> np.ndarray:
        if not self.momentum:
            return -lr * grad
        velocity = self.slot(var, "momentum")
        new_v = self.momentum * _read(velocity) - lr * grad
        velocity.assign(new_v, read_value=False)
        return self.momentum * new_v - lr * grad if self.nesterov else new_v


class Adam(Optimizer):
    """Adam (Keras' rule, bias correction folded into the step size)."""

    def __init__(
        self,
        learning_rate: Any = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(learning_rate, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)
        self.amsgrad = bool(amsgrad)

    def _slot_names(self) -> tuple[str, ...]:
        return ("m", "v", "vhat") if self.amsgrad else ("m", "v")

    def _update(self, grad: np.ndarray, var: Any, lr: float, step: int) -> np.ndarray:
        m, v = self.slot(var, "m"), self.slot(var, "v")
        # Read each slot once: under asynchronous training (parameter servers) two reads can
        # see two values, and v_1 + (g^2 - v_2)(1 - beta_2) can be negative.
        old_m, old_v = _read(m), _read(v)
        xp = array_module(grad)
        # m + (g - m)(1 - beta_1) and v + (g^2 - v)(1 - beta_2), each in one fresh buffer.
        new_m = grad - old_m
        new_m *= 1 - self.beta_1
        new_m += old_m
        new_v = xp.multiply(grad, grad)
        new_v -= old_v
        new_v *= 1 - self.beta_2
        new_v += old_v
        m.assign(new_m, read_value=False)
        v.assign(new_v, read_value=False)
        alpha = lr * np.sqrt(1 - self.beta_2**step) / (1 - self.beta_1**step)
        if self.amsgrad:  # the largest v so far (Keras' velocity_hat)
            vhat = self.slot(var, "vhat")
            new_v = xp.maximum(_read(vhat), new_v)
            vhat.assign(new_v, read_value=False)
        denom = xp.sqrt(new_v)
        denom += self.epsilon
        delta = new_m * -alpha
        delta /= denom
        return delta


class AdamW(Adam):
    """Adam with decoupled weight decay: ``var -= lr * weight_decay * var`` before the Adam step."""

    def __init__(
        self, learning_rate: Any = 0.001, weight_decay: float = 0.004, **kwargs: Any
    ) -> None:
        super().__init__(learning_rate, **kwargs)
        self.weight_decay = float(weight_decay)

    def _update(self, grad: np.ndarray, var: Any, lr: float, step: int) -> np.ndarray:
        decay = -lr * self.weight_decay * _read(var)
        return decay + super()._update(grad, var, lr, step)


class RMSprop(Optimizer):
    """RMSprop (Keras' rule), optionally centered and with momentum."""

    def __init__(
        self,
        learning_rate: Any = 0.001,
        rho: float = 0.9,
        momentum: float = 0.0,
        epsilon: float = 1e-7,
        centered: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(learning_rate, **kwargs)
        self.rho, self.momentum, self.epsilon, self.centered = (
            float(rho),
            float(momentum),
            float(epsilon),
            centered,
        )

    def _slot_names(self) -> tuple[str, ...]:
        return ("velocity", "average_gradient", "momentum")

    def _update(self, grad: np.ndarray, var: Any, lr: float, step: int) -> np.ndarray:
        vel = self.slot(var, "velocity")
        new_vel = self.rho * _read(vel) + (1 - self.rho) * grad * grad
        vel.assign(new_vel, read_value=False)
        denom = new_vel
        if self.centered:
            avg = self.slot(var, "average_gradient")
            new_avg = self.rho * _read(avg) + (1 - self.rho) * grad
            avg.assign(new_avg, read_value=False)
            denom = new_vel - new_avg * new_avg
        increment = lr * grad / array_module(denom).sqrt(denom + self.epsilon)
        if self.momentum:
            mom = self.slot(var, "momentum")
            new_mom = self.momentum * _read(mom) + increment
            mom.assign(new_mom, read_value=False)
            return -new_mom
        return -increment


_BY_NAME = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop}


def get(identifier: Any) -> Optimizer:
    """An optimizer from an instance or a name (``"sgd"``, ``"adam"``, ...).

    Raises:
        ValueError: Unknown name.
    """
    if isinstance(identifier, Optimizer):
        return identifier
    try:
        return _BY_NAME[str(identifier).lower()]()
    except KeyError:
        raise ValueError(f"unknown optimizer {identifier!r}; known: {sorted(_BY_NAME)}") from None
