"""hpcdist's one seed system: the global seed, TF's operation seeds, and every generator.

Lives below every layer that draws random numbers (datasets, ``hd.random``, initializers and
dropout), so one call seeds them all, as in TF (``tf.random.set_seed``) and Keras
(``keras.utils.set_random_seed``):

* `set_global_seed` is what ``hd.random.set_seed`` and ``hd.nn.set_random_seed`` call. It
  records the global seed, restarts the sequence of operation seeds (`get_seed`, TF's numbers),
  and reseeds the generators below.
* `random_generator` is ``hd.random``'s generator for draws without an operation seed, and
  `operation_generator` the one of each operation seed (its draws continue call after call).
* `initializer_generator` draws initial weights and dropout seeds (`hpcdist.nn.initializers`).
  It starts as ``default_rng(0)`` (model construction is reproducible even without a seed, as
  it always was) and becomes ``default_rng(seed)`` after `set_global_seed`.

``set_global_seed(None)`` unsets the global seed and puts every generator back as it was at
import: unseeded draws are nondeterministic again, initializers start from ``default_rng(0)``.
"""

from __future__ import annotations

import random

import numpy as np

__all__ = [
    "DEFAULT_GRAPH_SEED",
    "MAXINT32",
    "get_seed",
    "global_seed",
    "initializer_generator",
    "operation_generator",
    "random_generator",
    "set_global_seed",
]

#: TF's DEFAULT_GRAPH_SEED: an operation seed without a global seed pairs with it.
DEFAULT_GRAPH_SEED = 87654321
MAXINT32 = 2**31 - 1
#: The initializers' seed when no global seed is set.
_INITIALIZER_DEFAULT_SEED = 0


class _Seeds:
    """All random state of the process (one instance, `_seeds`)."""

    def __init__(self) -> None:
        self.seed: int | None = None
        self.ops: random.Random | None = None  # the sequence of operation seeds
        self.draws = np.random.default_rng()
        self.per_operation: dict[int, np.random.Generator] = {}
        self.initializers = np.random.default_rng(_INITIALIZER_DEFAULT_SEED)


_seeds = _Seeds()


def set_global_seed(seed: int | None) -> None:
    """Seed everything (``tf.random.set_seed``); None unsets the seed.

    Records the global seed, restarts the sequence of operation seeds, and reseeds
    ``hd.random``'s generators and the initializers' generator (see the module's docstring).
    """
    if seed is None:
        _seeds.seed, _seeds.ops = None, None
        _seeds.draws = np.random.default_rng()
        _seeds.initializers = np.random.default_rng(_INITIALIZER_DEFAULT_SEED)
    else:
        _seeds.seed = int(seed)
        # TF's eager context draws the seeds of unseeded operations from Python's generator
        _seeds.ops = random.Random(int(seed))
        _seeds.draws = np.random.default_rng([int(seed)])
        _seeds.initializers = np.random.default_rng(int(seed))
    _seeds.per_operation.clear()


def global_seed() -> int | None:
    """The global seed, or None."""
    return _seeds.seed


def random_generator() -> np.random.Generator:
    """The generator of ``hd.random`` draws without an operation seed."""
    return _seeds.draws


def operation_generator(op_seed: int) -> np.random.Generator:
    """The generator of operation seed ``op_seed`` (its draws continue call after call).

    Made on first use from (global seed, ``op_seed``), or (`DEFAULT_GRAPH_SEED`, ``op_seed``)
    without a global seed; `set_global_seed` forgets them all.
    """
    op_seed = int(op_seed)
    generator = _seeds.per_operation.get(op_seed)
    if generator is None:
        base = DEFAULT_GRAPH_SEED if _seeds.seed is None else _seeds.seed
        generator = _seeds.per_operation[op_seed] = np.random.default_rng([base, op_seed])
    return generator


def initializer_generator() -> np.random.Generator:
    """The generator of initial weights and dropout seeds."""
    return _seeds.initializers


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
    seed = _seeds.seed
    if seed is not None:
        if op_seed is None:
            op_seed = _seeds.ops.randint(0, MAXINT32)  # type: ignore[union-attr]
        seeds = (seed % MAXINT32, int(op_seed) % MAXINT32)
    elif op_seed is not None:
        seeds = (DEFAULT_GRAPH_SEED, int(op_seed) % MAXINT32)
    else:
        return None, None
    return (0, MAXINT32) if seeds == (0, 0) else seeds
