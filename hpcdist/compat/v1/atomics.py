"""Atomic operations on integer variables, wherever they live.

Each operation is the element atomics of the variable's `hpcdist.core.variables.Storage`
(``var.storage``): a variable placed on a parameter server is a word in an RMA window, whose
storage updates it with MPI's ``Fetch_and_op`` and ``Compare_and_swap`` (`hpcdist.comm.rma`),
atomically with respect to every other rank's atomic operations on it; a variable in this
process is updated in place under a lock. The global step's reservation, the token queue and
the gradient accumulators of synchronous training are built on these two operations.
"""

from __future__ import annotations

from typing import Any

from hpcdist.core.variables import Storage

__all__ = ["atomic_read", "compare_and_swap", "fetch_add"]


def _counter(var: Any) -> Storage:
    """The storage of integer variable ``var`` (anything with ``storage``, ``dtype``, ``name``).

    Raises:
        TypeError: The variable is not of an integer dtype.
    """
    if var.dtype.kind not in "iu":
        name = getattr(var, "name", "?")
        raise TypeError(f"atomic counter {name!r} must have an integer dtype, not {var.dtype}")
    return var.storage


def fetch_add(var: Any, delta: int, index: int = 0) -> int:
    """Add ``delta`` to element ``index`` of integer ``var``; the value before."""
    return _counter(var).fetch_add(index, delta)


def compare_and_swap(var: Any, expected: int, new: int, index: int = 0) -> int:
    """Set element ``index`` of integer ``var`` to ``new`` if it equals ``expected``.

    Returns:
        The value found (equal to ``expected`` when the swap happened).
    """
    return _counter(var).compare_and_swap(index, expected, new)


def atomic_read(var: Any, index: int = 0) -> int:
    """Element ``index`` of integer ``var``, read atomically (``Fetch_and_op(NO_OP)``)."""
    return _counter(var).atomic_read(index)
