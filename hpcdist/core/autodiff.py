"""Reverse-mode automatic differentiation on numpy arrays: `GradientTape`.

While a `GradientTape` is active, every operation on a `Tensor` that depends on a watched
source (a trainable variable read under the tape, or a tensor passed to `tape.watch`) records
its inputs and a backward function on the result. `tape.gradient(target, sources)` walks that
graph once in reverse topological order. Without an active tape nothing is recorded, so
inference costs plain numpy. The tensor types themselves live in `hpcdist.core.tensors`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hpcdist.core.reductions import sum_rows
from hpcdist.core.tensors import (
    IndexedSlices,
    Node,
    Operators,
    RowsOf,
    Tensor,
    as_tensor,
    register_operator,
    register_tensor_conversion,
)
from hpcdist.utils.xp import array_module, as_array_like

# `Tensor`, `IndexedSlices`, `Operators`, `RowsOf`, `as_tensor` and the two registration
# functions are defined in `hpcdist.core.tensors`; they stay importable from here.
__all__ = [
    "GradientTape",
    "IndexedSlices",
    "Operators",
    "RowsOf",
    "Tensor",
    "as_tensor",
    "record",
    "recording",
    "register_operator",
    "register_tensor_conversion",
    "unbroadcast",
    "variable_accessed",
]


class _TapeState(threading.local):
    def __init__(self) -> None:
        self.tapes: list[GradientTape] = []


_state = _TapeState()


def recording() -> bool:
    """Whether any tape records in this thread."""
    return bool(_state.tapes)


def variable_accessed(variable: Any, value: Any, rows: Any = None) -> Tensor:
    """The tensor of a variable read: a traced leaf when a recording tape watches ``variable``.

    The hook through which tapes learn about variable reads (TF's ``tape.variable_accessed``):
    a variable's tensor conversion calls it with the value it read.

    Args:
        variable: The variable read.
        value: What was read.
        rows: For a sparse read, the row ids ``value`` holds (its gradient is `IndexedSlices`).
    """
    if _state.tapes and any(t.watches(variable) for t in _state.tapes):
        return Tensor(value, source=variable if rows is None else RowsOf(variable, rows))
    return Tensor(value)


def record(
    value: np.ndarray,
    inputs: Sequence[Tensor],
    backward: Callable[[np.ndarray], Sequence[np.ndarray | None]],
) -> Tensor:
    """The result of an operation: traced when a tape records and an input is traced."""
    if _state.tapes and any(t.trace for t in inputs):
        return Tensor(value, tuple(t.graph_node() for t in inputs), backward)
    return Tensor(value)


def unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` over the axes along which an operand of ``shape`` was broadcast."""
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    if lead > 0 and grad.shape[lead:] == shape and grad.size:  # over leading axes (a bias)
        return sum_rows(grad.reshape(-1, math.prod(shape))).reshape(shape)
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    for axis, size in enumerate(shape):
        if size == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis=axis, keepdims=True)
    return grad.reshape(shape)


class GradientTape:
    """Records operations for reverse-mode differentiation (``tf.GradientTape``).

    Args:
        persistent: Allow several `gradient` calls.
        watch_accessed_variables: Trace every trainable variable read under the tape.
    """

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True) -> None:
        self.persistent = persistent
        self.watch_accessed_variables = watch_accessed_variables
        self._watched: set[int] = set()
        self._used = False

    def __enter__(self) -> GradientTape:
        _state.tapes.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _state.tapes.remove(self)

    def watches(self, variable: Any) -> bool:
        """Whether a read of ``variable`` under this tape is traced.

        True for a variable passed to `watch`, and for any trainable variable when the tape
        watches accessed variables (the default).
        """
        return id(variable) in self._watched or (
            self.watch_accessed_variables and getattr(variable, "trainable", False)
        )

    def watch(self, x: Any) -> None:
        """Trace a variable (even non-trainable) or a tensor from now on."""
        for item in x if isinstance(x, (list, tuple)) else [x]:
            if isinstance(item, Tensor):
                item.trace = True
                if item.node is not None:  # recorded already: later uses are traced
                    item.node.trace = True
                self._watched.add(id(item))
            else:
                self._watched.add(id(item))

    def gradient(
        self, target: Any, sources: Any, output_gradients: Any = None, on_final: Any = None
    ) -> Any:
        """Gradients of ``target`` with respect to ``sources`` (None where unconnected).

        Args:
            target: A `Tensor` (non-scalar targets are summed, as in TF).
            sources: A variable or tensor, or a list/tuple of them.
            output_gradients: Gradient of ``target`` (default ones).
            on_final: ``on_final(i, grad)`` is called in the backward pass once the dense
                gradient of ``sources[i]`` is final (the last layer's first); ``grad`` is the
                array returned for it. Sparse and None gradients are not reported (not in TF).

        Raises:
            RuntimeError: A non-persistent tape was already used.
        """
        if self._used and not self.persistent:
            raise RuntimeError(
                "A non-persistent GradientTape can only be used to compute one set of gradients"
            )
        self._used = True
        single = not isinstance(sources, (list, tuple))
        source_list = [sources] if single else list(sources)
        if not isinstance(target, Tensor):
            grads = [None] * len(source_list)
            return grads[0] if single else grads
        seed = (
            array_module(target.value).ones_like(target.value)
            if output_gradients is None
            else as_array_like(output_gradients, target.value, target.value.dtype)
        )
        keys = [  # a variable leaf's gradient is its variable's; a tensor's, its node's
            id(_key_of(s)) for s in source_list
        ]
        by_tensor, sparse = _backpropagate(target, seed, keys, on_final)
        out = []
        for s, key in zip(source_list, keys, strict=True):
            grad = by_tensor.get(key)
            pieces = sparse.get(id(s))
            if pieces:
                xp = array_module(pieces[0][1])
                rows = IndexedSlices(
                    xp.concatenate([g for _, g in pieces]),
                    xp.concatenate([as_array_like(i, pieces[0][1]) for i, _ in pieces]),
                    tuple(s.shape),
                )
                grad = rows if grad is None else grad + rows.dense()
            out.append(grad)
        return out[0] if single else out


def _key_of(source: Any) -> Any:
    """What ``source``'s gradient is keyed by: its variable, its graph node, or itself."""
    if not isinstance(source, Tensor):
        return source
    return source.source if source.source is not None else source.graph_node()


def _final_positions(order: list[Node], keys: Sequence[int]) -> dict[int, list[tuple]]:
    """Per walk step, the ``(key, nodes, indices in keys)`` final there (leaves: after use)."""
    wanted: dict[int, list[int]] = {}
    for index, key in enumerate(keys):
        wanted.setdefault(key, []).append(index)
    last_use: dict[int, int] = {}
    final: dict[int, tuple[int, list[int]]] = {}
    sparse = {id(n.source.variable) for n in order if isinstance(n.source, RowsOf)}
    for position, node in enumerate(order):
        last_use.update((id(parent), position) for parent in node.parents)
        key = id(node.source) if node.source is not None else id(node)
        if key in wanted:
            at = position if node.parents else last_use.get(id(node), position)
            before, nodes = final.get(key, (at, []))
            final[key] = (max(before, at), [*nodes, id(node)])
    out: dict[int, list[tuple]] = {}
    for key, (position, nodes) in final.items():
        if key not in sparse:
            out.setdefault(position, []).append((key, nodes, wanted[key]))
    return out


def _backpropagate(
    target: Tensor, seed: np.ndarray, keys: Sequence[int] = (), on_final: Any = None
) -> tuple[dict[int, np.ndarray], dict[int, list[tuple[np.ndarray, np.ndarray]]]]:
    """Gradients of every traced tensor and variable leaf, and of every sparse read.

    Returns:
        Dense gradients keyed by ``id`` of the tensor or variable (those of ``keys`` only),
        and the ``(ids, rows)`` gradients of sparse reads keyed by ``id`` of the variable read.
    """
    order: list[Node] = []
    seen: set[int] = set()
    start = target.graph_node()
    stack: list[tuple[Node, bool]] = [(start, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for parent in node.parents:
            if parent.trace and id(parent) not in seen:
                stack.append((parent, False))
    order.reverse()
    final_at = _final_positions(order, keys) if on_final is not None else {}
    grads: dict[int, np.ndarray] = {id(start): seed}
    results: dict[int, np.ndarray] = {}
    sparse: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    wanted = set(keys)  # only these gradients are kept; the others are freed once passed on
    for position, node in enumerate(order):
        grad = grads.pop(id(node), None)
        if grad is not None and isinstance(node.source, RowsOf):
            sparse.setdefault(id(node.source.variable), []).append((node.source.ids, grad))
        elif grad is not None:
            key = id(node.source) if node.source is not None else id(node)
            if key in wanted:
                results[key] = results[key] + grad if key in results else grad
            parent_grads = node.backward(grad) if node.backward else ()
            for parent, g in zip(node.parents, parent_grads, strict=True):
                if g is not None and parent.trace:
                    pid = id(parent)
                    grads[pid] = grads[pid] + g if pid in grads else g
        for key, nodes, indices in final_at.get(position, ()):
            for leaf in nodes:  # final leaves not reached yet: added in walk order all the same
                g = grads.pop(leaf, None)
                if g is not None:
                    results[key] = results[key] + g if key in results else g
            for index in indices if key in results else ():
                on_final(index, results[key])
    return results, sparse
