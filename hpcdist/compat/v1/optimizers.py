"""TF1 optimizers: ``minimize(loss, global_step)`` returns a train op a session runs.

Each worker runs its own step against the shared variables (between-graph replication): it
reads the variables (``Get`` from the ps windows), differentiates ``loss`` with a tape, and
pushes each update with ``Accumulate(SUM)``, slots included, so concurrent workers' updates
all land (element-wise atomic). Slots are created when the train op is built, colocated with
their variable under TF's names (``w/Adagrad``, ``w/Momentum``, ``w/Adam``, ``w/Adam_1``,
``w/RMSProp``, ``w/RMSProp_1``).

With ``global_step``, the train op first reserves its step with a compare-and-swap on the
global step: below the session's step bound (the last step of a `StopAtStepHook`) it advances
the step and applies the update; at the bound it applies nothing. The final global step is
then exactly the last step, however many workers run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hpcdist.compat.v1.atomics import atomic_read, compare_and_swap, fetch_add
from hpcdist.compat.v1.graph import Deferred, GraphKeys, Operation, get_default_graph
from hpcdist.compat.v1.variables import Placeholder, Variable
from hpcdist.core.autodiff import GradientTape, IndexedSlices, Tensor
from hpcdist.strategies.ps.store import RmaStorage
from hpcdist.utils.xp import to_numpy

__all__ = [
    "AdagradOptimizer",
    "AdamOptimizer",
    "GradientDescentOptimizer",
    "MomentumOptimizer",
    "Optimizer",
    "RMSPropOptimizer",
    "gradients_of",
    "reserve_step",
]


def gradients_of(state: Any, loss: Callable[[], Any], var_list: list[Variable]) -> list[Any]:
    """Gradients of ``loss`` for ``var_list`` in run ``state`` (one tape per run and loss).

    The loss value is remembered for the run: fetching ``loss`` beside the train op gives the
    value the gradients came from.
    """

    def compute() -> tuple[Callable[[], Any], list[Any]]:
        with GradientTape() as tape:
            value = loss()
        grads = tape.gradient(value, list(var_list))
        state.remember(loss, value)
        return loss, grads  # holding ``loss`` keeps its id, part of the key, unique

    key = ("grads", id(loss), tuple(id(v) for v in var_list))
    return state.once(key, compute)[1]


class _Gradient(Deferred):
    """A deferred gradient: ``d loss / d var_list[index]``, computed when a run needs it.

    ``session.run`` of it gives the gradient's value in that run: a numpy array, or
    `IndexedSlices` for the gradient of a row read (``tf.gather``, ``embedding_lookup``).
    """

    def __init__(self, loss: Callable[[], Any], var_list: list[Variable], index: int) -> None:
        self.loss, self.var_list, self.index = loss, var_list, index

    def value(self, state: Any) -> Any:
        """The gradient in run ``state``."""
        return gradients_of(state, self.loss, self.var_list)[self.index]


def evaluate_gradient(state: Any, grad: Any) -> Any:
    """A gradient as numpy or `IndexedSlices` (None stays None)."""
    if grad is None:
        return None
    if isinstance(grad, _Gradient):
        grad = grad.value(state)
    elif callable(grad) and not isinstance(grad, Variable):
        grad = state.evaluate(grad)
    if grad is None:  # the loss does not reach the variable
        return None
    if isinstance(grad, IndexedSlices):
        return grad
    if isinstance(grad, Tensor):
        return to_numpy(grad.value)
    if isinstance(grad, Variable):
        return grad.numpy()
    return np.asarray(grad)


def reserve_step(global_step: Variable, bound: int | None) -> int | None:
    """Advance ``global_step`` by one unless it reached ``bound``.

    Returns:
        The global step this reservation left (the step reserved plus one), or None when the
        step had reached ``bound`` (nothing may be applied).
    """
    if bound is None:
        return fetch_add(global_step, 1) + 1
    step = atomic_read(global_step)
    while step < bound:
        found = compare_and_swap(global_step, step, step + 1)
        if found == step:
            return step + 1
        step = found
    return None


# -- rows of a variable, wherever it lives --------------------------------------------------


def read_rows(var: Variable, ids: np.ndarray) -> np.ndarray:
    """Rows ``ids`` (sorted, unique) of ``var``."""
    return var.sparse_read(ids)


def add_rows(var: Variable, ids: np.ndarray, rows: np.ndarray) -> None:
    """Add ``rows`` into rows ``ids`` (sorted, unique) of ``var``.

    Raises:
        TypeError: ``var``'s memory is neither an RMA window nor this process's.
    """
    storage = var.storage
    if isinstance(storage, RmaStorage):
        storage.add_rows(ids, rows.astype(var.dtype, copy=False))
        return
    array = storage.local_array()
    if array is None:
        raise TypeError(
            f"cannot update rows of variable {var.name!r} in place: its storage "
            f"{type(storage).__name__} is neither an RMA window nor memory of this process"
        )
    array[ids] += rows.astype(var.dtype, copy=False)


class _Target:
    """A variable, or some rows of it, as the update rules see it: read and add."""

    def __init__(self, var: Variable, ids: np.ndarray | None) -> None:
        self.var, self.ids = var, ids

    def read(self) -> np.ndarray:
        return self.var.numpy() if self.ids is None else read_rows(self.var, self.ids)

    def add(self, delta: np.ndarray) -> None:
        if self.ids is None:
            self.var.assign_add(delta.astype(self.var.dtype, copy=False), read_value=False)
        else:
            add_rows(self.var, self.ids, delta)


class Optimizer:
    """Base class of the TF1 optimizers.

    Args:
        use_locking: Accepted (updates are element-wise atomic anyway).
        name: Name; slot variables are named ``<var>/<name>`` (``_1`` for a second slot).
    """

    #: ``(slot name, initial value)`` of each slot, in TF's order.
    _slot_specs: tuple[tuple[str, float], ...] = ()

    def __init__(self, use_locking: bool = False, name: str = "Optimizer") -> None:
        self._use_locking = use_locking
        self._name = name
        self._slots: dict[str, dict[int, Variable]] = {}
        self._non_slots: dict[str, Variable] = {}

    def get_name(self) -> str:
        """The name."""
        return self._name

    # -- slots ----------------------------------------------------------------------------------

    def create_slots(self, var_list: list[Variable]) -> None:
        """Create the slot and non-slot variables of ``var_list`` (once per variable).

        `apply_gradients` calls it; so does a wrapper applying this optimizer's updates itself
        (`SyncReplicasOptimizer`). Subclasses extend TF's hooks `_create_slots` and
        `_create_non_slots`.
        """
        self._create_non_slots(var_list)  # TF's order: Adam's beta powers, then the slots
        self._create_slots(var_list)

    def _create_slots(self, var_list: list[Variable]) -> None:
        """Create this optimizer's slots (``_slot_specs``) of each variable."""
        graph = get_default_graph()
        for var in var_list:
            for i, (slot, initial) in enumerate(self._slot_specs):
                table = self._slots.setdefault(slot, {})
                if id(var) in table:
                    continue
                suffix = self._name if i == 0 else f"{self._name}_{i}"
                with graph.colocate_with(var), graph.name_scope(None):
                    table[id(var)] = Variable(
                        np.full(var.shape, initial, var.dtype),
                        trainable=False,
                        name=f"{var.name}/{suffix}",
                    )

    def get_slot(self, var: Variable, name: str) -> Variable | None:
        """The slot ``name`` of ``var`` (TF's names: ``accumulator``, ``momentum``, ``m``...)."""
        return self._slots.get(name, {}).get(id(var))

    def get_slot_names(self) -> list[str]:
        """The slot names, sorted."""
        return sorted(self._slots)

    def variables(self) -> list[Variable]:
        """Slot and non-slot variables of this optimizer, in creation order."""
        mine = {id(v) for table in self._slots.values() for v in table.values()}
        mine |= {id(v) for v in self._non_slots.values()}
        return [v for v in get_default_graph().variables if id(v) in mine]

    def _create_non_slots(self, var_list: list[Variable]) -> None:
        """Create variables shared by every slot (Adam's beta powers)."""

    # -- building -------------------------------------------------------------------------------

    def compute_gradients(
        self, loss: Callable[[], Any], var_list: list[Variable] | None = None, **kwargs: Any
    ) -> list[tuple[Any, Variable]]:
        """``[(gradient, variable)]`` with deferred gradients of ``loss`` (a function).

        Raises:
            TypeError: ``loss`` is not callable (TF1 tensors are functions here).
            ValueError: No variables to optimize.
        """
        del kwargs
        if not callable(loss):
            raise TypeError(
                "loss must be a function returning the loss (write `def loss(): ...` where TF1 "
                f"code writes `loss = ...`), got {type(loss).__name__}"
            )
        if var_list is None:
            var_list = get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES)
        var_list = list(var_list)
        if not var_list:
            raise ValueError("No variables to optimize.")
        return [(_Gradient(loss, var_list, i), v) for i, v in enumerate(var_list)]

    def apply_gradients(
        self, grads_and_vars: Any, global_step: Variable | None = None, name: str | None = None
    ) -> Operation:
        """An operation applying the gradients (and advancing ``global_step``).

        Raises:
            ValueError: No pairs, or no gradient at all.
        """
        pairs = list(grads_and_vars)
        if not pairs:
            raise ValueError("No variables provided.")
        if all(g is None for g, _ in pairs):
            raise ValueError(
                f"No gradients provided for any variable: {[v.name for _, v in pairs]}"
            )
        self.create_slots([v for g, v in pairs if g is not None])

        def apply(state: Any) -> None:
            grads = [evaluate_gradient(state, g) for g, _ in pairs]
            if all(g is None for g in grads):  # TF finds it when building: here, when run
                raise ValueError(
                    f"No gradients provided for any variable: {[v.name for _, v in pairs]}"
                )
            if global_step is not None:
                bound = state.session.step_bound
                reached = reserve_step(global_step, bound)
                # What this process knows of the global step now (StopAtStepHook reads it: a
                # step fetched before the run is stale by the other workers' steps).
                state.session.known_step = reached if reached is not None else bound
                if reached is None:
                    return
            self.apply_values(state, grads, [v for _, v in pairs])

        return Operation(apply, name or self._name)

    def apply_values(self, state: Any, grads: list[Any], variables: list[Variable]) -> None:
        """Apply computed gradients (numpy or `IndexedSlices`) to ``variables`` now."""
        lr = self._learning_rate_value(state)
        for grad, var in zip(grads, variables, strict=True):
            if grad is None:
                continue
            if isinstance(grad, IndexedSlices):
                grad = grad.deduplicate()
                ids = np.asarray(grad.indices, np.int64)
                self._apply(grad.values.astype(var.dtype, copy=False), var, ids, lr)
            else:
                self._apply(np.asarray(grad, var.dtype), var, None, lr)
        self._finish()

    def minimize(
        self,
        loss: Callable[[], Any],
        global_step: Variable | None = None,
        var_list: list[Variable] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> Operation:
        """``apply_gradients(compute_gradients(loss, var_list), global_step)``."""
        del kwargs
        grads_and_vars = self.compute_gradients(loss, var_list)
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    # -- update rules ---------------------------------------------------------------------------

    def _learning_rate_value(self, state: Any) -> float:
        lr = self._learning_rate
        if callable(lr) or isinstance(lr, Variable | Placeholder):
            return float(np.asarray(state.evaluate(lr)))
        return float(lr)

    def _slot(self, var: Variable, name: str, ids: np.ndarray | None) -> _Target:
        return _Target(self._slots[name][id(var)], ids)

    def _apply(self, grad: np.ndarray, var: Variable, ids: np.ndarray | None, lr: float) -> None:
        raise NotImplementedError

    def _finish(self) -> None:
        """After every variable of a step was updated (Adam's beta powers)."""


class GradientDescentOptimizer(Optimizer):
    """``var -= learning_rate * grad``."""

    def __init__(
        self, learning_rate: Any, use_locking: bool = False, name: str = "GradientDescent"
    ) -> None:
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate

    def _apply(self, grad: np.ndarray, var: Variable, ids: np.ndarray | None, lr: float) -> None:
        _Target(var, ids).add(-lr * grad)


class AdagradOptimizer(Optimizer):
    """``accumulator += grad**2; var -= lr * grad / sqrt(accumulator)`` (slot ``accumulator``).

    Raises:
        ValueError: ``initial_accumulator_value`` is not positive.
    """

    def __init__(
        self,
        learning_rate: Any,
        initial_accumulator_value: float = 0.1,
        use_locking: bool = False,
        name: str = "Adagrad",
    ) -> None:
        if initial_accumulator_value <= 0.0:
            raise ValueError(
                f"initial_accumulator_value must be positive: {initial_accumulator_value}"
            )
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._slot_specs = (("accumulator", initial_accumulator_value),)

    def _apply(self, grad: np.ndarray, var: Variable, ids: np.ndarray | None, lr: float) -> None:
        acc = self._slot(var, "accumulator", ids)
        acc.add(grad * grad)
        _Target(var, ids).add(-lr * grad / np.sqrt(acc.read()))


class MomentumOptimizer(Optimizer):
    """``accumulation = momentum * accumulation + grad; var -= lr * accumulation``.

    With ``use_nesterov``: ``var -= lr * (grad + momentum * accumulation)``. Slot ``momentum``.
    """

    def __init__(
        self,
        learning_rate: Any,
        momentum: float,
        use_locking: bool = False,
        name: str = "Momentum",
        use_nesterov: bool = False,
    ) -> None:
        super().__init__(use_locking, name)
        self._learning_rate, self._momentum, self._nesterov = learning_rate, momentum, use_nesterov
        self._slot_specs = (("momentum", 0.0),)

    def _apply(self, grad: np.ndarray, var: Variable, ids: np.ndarray | None, lr: float) -> None:
        accum = self._slot(var, "momentum", ids)
        old = accum.read()
        new = self._momentum * old + grad
        accum.add(new - old)
        step = grad + self._momentum * new if self._nesterov else new
        _Target(var, ids).add(-lr * step)


class AdamOptimizer(Optimizer):
    """TF1 Adam: slots ``m`` and ``v``, non-slot ``beta1_power`` and ``beta2_power``.

    As TF's, a sparse gradient (`IndexedSlices`) still decays ``m`` and ``v`` on every row and
    moves every row of the variable; the other optimizers update only the gradient's rows.
    """

    def __init__(
        self,
        learning_rate: Any = 0.001,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
        use_locking: bool = False,
        name: str = "Adam",
    ) -> None:
        super().__init__(use_locking, name)
        self._learning_rate, self._beta1, self._beta2, self._epsilon = (
            learning_rate,
            beta1,
            beta2,
            epsilon,
        )
        self._slot_specs = (("m", 0.0), ("v", 0.0))

    def _create_non_slots(self, var_list: list[Variable]) -> None:
        if self._non_slots:
            return
        first = min(var_list, key=lambda v: v.name)
        graph = get_default_graph()
        with graph.colocate_with(first), graph.name_scope(None):
            for name, beta in (("beta1_power", self._beta1), ("beta2_power", self._beta2)):
                self._non_slots[name] = Variable(
                    np.float32(beta), trainable=False, name=name, dtype=first.dtype
                )

    def _apply(self, grad: np.ndarray, var: Variable, ids: np.ndarray | None, lr: float) -> None:
        # TF's kernel, in the variable's dtype: m += (g - m) * (1 - beta1), the same for v
        # with g * g, var -= alpha * m / (sqrt(v) + epsilon).
        dt = var.dtype.type
        b1p = dt(self._non_slots["beta1_power"].numpy())
        b2p = dt(self._non_slots["beta2_power"].numpy())
        alpha = dt(lr) * np.sqrt(dt(1) - b2p) / (dt(1) - b1p)
        # A sparse gradient (TF's _apply_sparse) decays every row of m and v, adds the
        # gradient's rows, and moves every row of the variable: all three are whole updates.
        m, v = self._slot(var, "m", None), self._slot(var, "v", None)
        m_old, v_old = m.read(), v.read()
        b1, b2 = dt(self._beta1), dt(self._beta2)
        if ids is None:
            m_new = m_old + (grad - m_old) * (dt(1) - b1)
            v_new = v_old + (grad * grad - v_old) * (dt(1) - b2)
        else:
            m_new, v_new = m_old * b1, v_old * b2
            m_new[ids] += grad * (dt(1) - b1)
            v_new[ids] += (grad * grad) * (dt(1) - b2)
        m.add(m_new - m_old)
        v.add(v_new - v_old)
        _Target(var, None).add(-(alpha * m_new) / (np.sqrt(v_new) + dt(self._epsilon)))

    def _finish(self) -> None:
        for name, beta in (("beta1_power", self._beta1), ("beta2_power", self._beta2)):
            var = self._non_slots[name]
            var.assign(var.numpy() * beta, read_value=False)


class RMSPropOptimizer(Optimizer):
    """TF1 RMSProp: slots ``rms`` (starts at 1) and ``momentum`` (centered adds ``mg``)."""

    def __init__(
        self,
        learning_rate: Any,
        decay: float = 0.9,
        momentum: float = 0.0,
        epsilon: float = 1e-10,
        use_locking: bool = False,
        centered: bool = False,
        name: str = "RMSProp",
    ) -> None:
        super().__init__(use_locking, name)
        self._learning_rate, self._decay, self._momentum, self._epsilon = (
            learning_rate,
            decay,
            momentum,
            epsilon,
        )
        self._centered = centered
        # TF's order: rms (``w/RMSProp``), mg when centered, then momentum.
        self._slot_specs = (
            (("rms", 1.0),) + ((("mg", 0.0),) if centered else ()) + (("momentum", 0.0),)
        )

    def _apply(self, grad: np.ndarray, var: Variable, ids: np.ndarray | None, lr: float) -> None:
        rms, mom = self._slot(var, "rms", ids), self._slot(var, "momentum", ids)
        rms_old = rms.read()
        rms_new = self._decay * rms_old + (1 - self._decay) * grad * grad
        rms.add(rms_new - rms_old)
        denom = rms_new
        if self._centered:
            mg = self._slot(var, "mg", ids)
            mg_old = mg.read()
            mg_new = self._decay * mg_old + (1 - self._decay) * grad
            mg.add(mg_new - mg_old)
            denom = rms_new - mg_new * mg_new
        mom_old = mom.read()
        mom_new = self._momentum * mom_old + lr * grad / np.sqrt(denom + self._epsilon)
        mom.add(mom_new - mom_old)
        _Target(var, ids).add(-mom_new)
