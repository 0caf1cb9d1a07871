"""``cupy.testing`` of the device simulator: numpy's assertions on host copies."""

from __future__ import annotations

import numpy as np

import cupy


def assert_allclose(actual, desired, rtol=1e-7, atol=0, err_msg="", verbose=True):
    np.testing.assert_allclose(
        cupy.asnumpy(actual), cupy.asnumpy(desired), rtol, atol, True, err_msg, verbose
    )


def assert_array_equal(x, y, err_msg="", verbose=True):
    np.testing.assert_array_equal(cupy.asnumpy(x), cupy.asnumpy(y), err_msg, verbose)
