"""The global seed and TF's rule for the seeds of each random operation (``random.get_seed``).

Lives below every layer that draws random numbers (datasets, ``hd.random``, initializers):
`set_global_seed` is what ``hd.random.set_seed`` records, and `get_seed` gives an operation its
(global, operation) seed pair with TF's numbers.
"""

from __future__ import annotations

import random

__all__ = ["DEFAULT_GRAPH_SEED", "MAXINT32", "get_seed", "global_seed", "set_global_seed"]

#: TF's DEFAULT_GRAPH_SEED: an operation seed without a global seed pairs with it.
DEFAULT_GRAPH_SEED = 87654321
MAXINT32 = 2**31 - 1

_state: dict[str, object] = {"seed": None, "ops": None}


def set_global_seed(seed: int | None) -> None:
    """Record the global seed and restart the sequence of operation seeds (None unsets it)."""
    _state["seed"] = None if seed is None else int(seed)
    # TF's eager context draws the seeds of unseeded operations from Python's generator
    _state["ops"] = None if seed is None else random.Random(int(seed))


def global_seed() -> int | None:
    """The global seed, or None."""
    return _state["seed"]  # type: ignore[return-value]


def get_seed(op_seed: int | None) -> tuple[int | None, int | None]:
    """The (global, operation) seed pair an operation uses (TF's ``random.get_seed``).

    TF's rules, with its numbers: with a global seed, an operation without a seed gets the
    next of a sequence that `set_global_seed` restarts (so a program that creates its
    operations in the same order gets the same seeds in every run and on every rank); an
    operation seed without a global seed pairs with `DEFAULT_GRAPH_SEED`; neither gives
    ``(None, None)`` (nondeterministic). Seeds are truncated to 31 bits, and ``(0, 0)``
    becomes ``(0, 2**31 - 1)``.

    Args:
        op_seed: The operation's ``seed`` argument.

    Returns:
        ``(global seed, operation seed)``, or ``(None, None)``.
    """
    seed = global_seed()
    if seed is not None:
        if op_seed is None:
            op_seed = _state["ops"].randint(0, MAXINT32)  # type: ignore[union-attr]
        seeds = (seed % MAXINT32, int(op_seed) % MAXINT32)
    elif op_seed is not None:
        seeds = (DEFAULT_GRAPH_SEED, int(op_seed) % MAXINT32)
    else:
        return None, None
    return (0, MAXINT32) if seeds == (0, 0) else seeds
