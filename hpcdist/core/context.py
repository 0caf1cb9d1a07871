"""Which strategy and which context is current: TF's four-state rule.

1. No strategy entered: `get_strategy()` is the default strategy, `get_replica_context()` is
   the default replica context, `in_cross_replica_context()` is False.
2. Inside ``strategy.scope()``: cross-replica context; `get_replica_context()` is None.
3. Inside a function run by ``strategy.run``: that replica's context.
4. Inside ``merge_call``: cross-replica context again.

State is per thread, as in TF.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpcdist.strategies.replica_context import ReplicaContext
    from hpcdist.strategies.strategy import Strategy

__all__ = [
    "experimental_set_strategy",
    "get_replica_context",
    "get_strategy",
    "has_strategy",
    "in_cross_replica_context",
    "set_default_strategy_factory",
]


class _State(threading.local):
    def __init__(self) -> None:
        self.stack: list[tuple[Strategy, ReplicaContext | None]] = []
        self.global_strategy: Strategy | None = None


_state = _State()
_default: Any = None
_default_factory: Callable[[], Strategy] | None = None


def set_default_strategy_factory(factory: Callable[[], Strategy]) -> None:
    """Register how the default strategy is made (``hpcdist.strategies`` does, on import).

    The context sits below the strategies, so it cannot import the default strategy's class.
    """
    global _default_factory
    _default_factory = factory


def _default_strategy() -> Strategy:
    global _default
    if _default is None:
        if _default_factory is None:
            raise RuntimeError(
                "no default strategy is registered: import hpcdist.strategies (or hpcdist) first"
            )
        _default = _default_factory()
    return _default


def push(strategy: Strategy, replica_context: ReplicaContext | None) -> None:
    """Enter a (strategy, context) pair; a replica context of None means cross-replica."""
    _state.stack.append((strategy, replica_context))


def pop() -> None:
    """Leave the innermost (strategy, context) pair."""
    _state.stack.pop()


def current() -> tuple[Strategy, ReplicaContext | None] | None:
    """The innermost (strategy, context) pair, or None outside any strategy."""
    if _state.stack:
        return _state.stack[-1]
    if _state.global_strategy is not None:
        return (_state.global_strategy, None)
    return None


def get_strategy() -> Strategy:
    """The current strategy; the default strategy outside any scope."""
    top = current()
    return top[0] if top is not None else _default_strategy()


def has_strategy() -> bool:
    """Whether a strategy other than the default one is current."""
    top = current()
    return top is not None and top[0] is not _default


def in_cross_replica_context() -> bool:
    """True inside a scope or a ``merge_call``; False in a replica function or with no strategy."""
    top = current()
    return top is not None and top[1] is None


def get_replica_context() -> ReplicaContext | None:
    """The current replica context: None in cross-replica context, else a `ReplicaContext`."""
    top = current()
    if top is None:
        return _default_strategy().default_replica_context
    return top[1]


def experimental_set_strategy(strategy: Strategy | None) -> None:
    """Make ``strategy`` current for this thread outside any ``with`` block (None resets).

    Raises:
        RuntimeError: Called inside a ``scope()``.
    """
    if _state.stack:
        raise RuntimeError("experimental_set_strategy must be called outside any strategy scope")
    _state.global_strategy = strategy
