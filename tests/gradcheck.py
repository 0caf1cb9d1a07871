"""Finite-difference gradient checks for hpcdist.nn (float64, central differences)."""

import numpy as np

import hpcdist as hd


def numeric_grad(f, x, eps=1e-6):
    grad = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = x[i]
        x[i] = old + eps
        up = float(np.sum(f()))
        x[i] = old - eps
        down = float(np.sum(f()))
        x[i] = old
        grad[i] = (up - down) / (2 * eps)
    return grad


def check_variables(loss_fn, variables, rtol=1e-5, atol=1e-7):
    """Compare tape gradients of ``loss_fn()`` wrt ``variables`` with finite differences."""
    with hd.nn.GradientTape() as tape:
        loss = loss_fn()
    grads = tape.gradient(loss, list(variables))
    for var, grad in zip(variables, grads, strict=True):
        assert grad is not None, f"no gradient for {var.name}"
        array = var.values[0] if hasattr(var, "values") else var.storage.read()
        expected = numeric_grad(lambda: np.asarray(loss_fn()), array)
        np.testing.assert_allclose(grad, expected, rtol=rtol, atol=atol, err_msg=var.name)
