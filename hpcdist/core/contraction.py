"""Two-operand ``einsum`` as one batched matrix product, as TF lowers it to ``BatchMatMul``.

``numpy.einsum(..., optimize=True)`` plans its path again on every call, and an equation with
batch axes (a letter in both operands and in the output, as attention's ``"btnh,bsnh->bnts"``)
is left to its own C loop, without BLAS. A `Contraction` is planned once per equation and
operand shapes (`plan`, cached): each operand is transposed to (batch, free, summed) or
(batch, summed, free) and its free and its summed axes merged into one each (the batch axes stay
apart: ``matmul`` broadcasts over them, so a transposed operand whose matrices BLAS can read as
they lie, attention's, is not copied), the two are multiplied with ``matmul``, and the product
is reshaped and transposed to the output's order. The same plan serves numpy and
CuPy arrays.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Contraction", "contract", "plan"]


@dataclass(frozen=True)
class Contraction:
    """How ``einsum(equation, a, b)`` runs as ``matmul`` for given operand shapes.

    Attributes:
        perm_a: Axes of ``a`` in (batch, free, summed) order.
        matrix_a: ``a`` as (batch axes..., rows, summed).
        perm_b: Axes of ``b`` in (batch, summed, free) order.
        matrix_b: ``b`` as (batch axes..., summed, columns).
        product: The product's shape with its axes unfolded (batch, free of a, free of b).
        perm_out: Axes of the unfolded product in the output's order.
    """

    perm_a: tuple[int, ...]
    matrix_a: tuple[int, ...]
    perm_b: tuple[int, ...]
    matrix_b: tuple[int, ...]
    product: tuple[int, ...]
    perm_out: tuple[int, ...]

    def __call__(self, a: Any, b: Any, xp: Any) -> Any:
        """``einsum`` of ``a`` and ``b`` (arrays of module ``xp``)."""
        am = xp.transpose(a, self.perm_a).reshape(self.matrix_a)
        bm = xp.transpose(b, self.perm_b).reshape(self.matrix_b)
        return xp.matmul(am, bm).reshape(self.product).transpose(self.perm_out)


@functools.lru_cache(maxsize=1024)
def plan(
    spec_a: str, spec_b: str, spec_out: str, shape_a: tuple[int, ...], shape_b: tuple[int, ...]
) -> Contraction:
    """The `Contraction` of ``"<spec_a>,<spec_b>-><spec_out>"`` for these operand shapes.

    Every letter appears at most once per operand and is in the other operand or the output
    (`hpcdist.nn.einsum_dense` checks the equation).

    Raises:
        ValueError: A letter's sizes differ between the operands, or an output letter is
            repeated or in neither operand.
    """
    size: dict[str, int] = {}
    for spec, shape in ((spec_a, shape_a), (spec_b, shape_b)):
        for letter, n in zip(spec, shape, strict=True):
            if size.setdefault(letter, n) != n:
                raise ValueError(
                    f"einsum {spec_a},{spec_b}->{spec_out}: axis {letter!r} has size "
                    f"{size[letter]} in one operand and {n} in the other (shapes {shape_a} and "
                    f"{shape_b})"
                )
    missing = [c for c in spec_out if c not in size]
    if missing or len(set(spec_out)) != len(spec_out):
        raise ValueError(
            f"einsum {spec_a},{spec_b}->{spec_out}: expected output axes that appear once and "
            f"are in an operand, received {spec_out!r}"
        )
    batch = [c for c in spec_a if c in spec_b and c in spec_out]
    summed = [c for c in spec_a if c in spec_b and c not in spec_out]
    free_a = [c for c in spec_a if c not in spec_b]
    free_b = [c for c in spec_b if c not in spec_a]

    def sizes(letters: list[str]) -> int:
        return math.prod(size[c] for c in letters)

    unfolded = batch + free_a + free_b
    kept = tuple(size[c] for c in batch)
    return Contraction(
        perm_a=tuple(spec_a.index(c) for c in batch + free_a + summed),
        matrix_a=(*kept, sizes(free_a), sizes(summed)),
        perm_b=tuple(spec_b.index(c) for c in batch + summed + free_b),
        matrix_b=(*kept, sizes(summed), sizes(free_b)),
        product=tuple(size[c] for c in unfolded),
        perm_out=tuple(unfolded.index(c) for c in spec_out),
    )


def contract(spec_a: str, spec_b: str, spec_out: str, a: Any, b: Any, xp: Any) -> Any:
    """``xp.einsum(f"{spec_a},{spec_b}->{spec_out}", a, b)`` through `plan`."""
    return plan(spec_a, spec_b, spec_out, tuple(a.shape), tuple(b.shape))(a, b, xp)
