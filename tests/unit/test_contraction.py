"""`hpcdist.core.contraction`: two-operand einsum as one batched ``matmul``, equal to numpy's."""

from __future__ import annotations

import numpy as np
import pytest

from hpcdist.core.contraction import contract, plan

SIZES = {"a": 2, "b": 3, "c": 4, "d": 5, "e": 6, "n": 2, "h": 3, "s": 5, "t": 4}
# attention, EinsumDense projections and their gradients; outer and full contractions;
# batch axes in odd positions; a transposed result
EQUATIONS = [
    "btnh,bsnh->bnts",
    "bnts,bsnh->btnh",
    "bnts,btnh->bsnh",
    "bnts,bnts->bnt",
    "abc,cde->abde",
    "abde,cde->abc",
    "abde,abc->cde",
    "abcd,cde->abe",
    "ab,bc->ca",
    "ab,cd->abcd",
    "ab,ab->",
    "ab,ba->ab",
    "cab,bca->bc",
    "a,a->a",
]


@pytest.mark.parametrize("equation", EQUATIONS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_equals_numpy_einsum(equation, dtype):
    inputs, out = equation.split("->")
    spec_a, spec_b = inputs.split(",")
    rng = np.random.default_rng(len(equation))
    a = rng.standard_normal([SIZES[c] for c in spec_a]).astype(dtype)
    b = rng.standard_normal([SIZES[c] for c in spec_b]).astype(dtype)
    got = contract(spec_a, spec_b, out, a, b, np)
    want = np.einsum(equation, a.astype(np.float64), b.astype(np.float64))
    assert got.shape == want.shape
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


def test_strided_operands():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 6, 8))[:, ::2, 1::2]  # not contiguous
    b = rng.standard_normal((4, 8))[:, ::2].T
    np.testing.assert_allclose(
        contract("abc", "cd", "abd", a, b, np), np.einsum("abc,cd->abd", a, b)
    )


def test_planned_once_per_equation_and_shapes():
    plan.cache_clear()
    a, b = np.ones((2, 3)), np.ones((3, 4))
    for _ in range(3):
        contract("ab", "bc", "ac", a, b, np)
    contract("ab", "bc", "ac", np.ones((5, 3)), b, np)
    info = plan.cache_info()
    assert (info.misses, info.hits) == (2, 2)


def test_sizes_that_differ_are_an_error_naming_the_axis():
    with pytest.raises(ValueError, match=r"axis 'b' has size 3 in one operand and 4"):
        contract("ab", "bc", "ac", np.ones((2, 3)), np.ones((4, 5)), np)


@pytest.mark.parametrize("out", ["az", "aa"])
def test_bad_output_axes_are_an_error(out):
    with pytest.raises(ValueError, match="expected output axes that appear once"):
        contract("ab", "bc", out, np.ones((2, 3)), np.ones((3, 5)), np)
