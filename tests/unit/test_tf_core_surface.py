"""TF's core names at the root (``hd.function``, ``hd.constant``, ``hd.cast``, ...).

Expected values are TensorFlow 2.21's (CPU), printed by the same calls on ``tf.``; the
comments give the TF call.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.core.variables import Variable as BaseVariable

# -- dtypes ---------------------------------------------------------------------------------------


def test_dtype_names_are_numpy_dtypes():
    assert hd.float32 == np.float32 and hd.float32.name == "float32"
    assert hd.dtypes.float32 is hd.float32 and hd.dtypes.int64 is hd.int64
    assert [hd.float16, hd.float64, hd.int32, hd.bool] == [
        np.float16,
        np.float64,
        np.int32,
        np.bool_,
    ]
    assert hd.string == np.dtype(object)


@pytest.mark.parametrize(
    ("given", "expected"),
    # tf.as_dtype(float) -> float32, tf.as_dtype(bool) -> bool, tf.as_dtype("int64") -> int64
    [(float, "float32"), (bool, "bool"), ("float32", "float32"), (np.float64, "float64")],
)
def test_as_dtype_follows_tf(given, expected):
    assert hd.as_dtype(given) == np.dtype(expected)


def test_as_dtype_refuses_python_int_as_tf_does():
    with pytest.raises(TypeError, match="int"):  # tf.as_dtype(int): TypeError
        hd.as_dtype(int)
    with pytest.raises(TypeError, match="'floatx'"):
        hd.as_dtype("floatx")


# -- constant ---------------------------------------------------------------------------------


def test_constant_dtypes_follow_tf():
    # tf.constant(1.5) float32, (3) int32, ([1, 2**40]) int64, (True) bool,
    # (np.float64(1)) float64, ([1.0, 2]) float32
    assert hd.constant(1.5).dtype == np.float32
    assert hd.constant(3).dtype == np.int32
    assert hd.constant([1, 2**40]).dtype == np.int64
    assert hd.constant(True).dtype == np.bool_
    assert hd.constant(np.float64(1)).dtype == np.float64
    assert hd.constant([1.0, 2]).dtype == np.float32
    # tf.constant("ab").numpy() -> b'ab'; tf.constant(["a", "bc"]) -> [b'a' b'bc']
    assert hd.constant("ab").numpy().item() == b"ab"
    assert hd.constant(["a", "bc"]).numpy().tolist() == [b"a", b"bc"]


def test_constant_shape_fills_or_reshapes():
    # tf.constant(2.0, shape=(2, 3)); tf.constant([1, 2, 3, 4], shape=(2, 2))
    np.testing.assert_array_equal(hd.constant(2.0, shape=(2, 3)).numpy(), np.full((2, 3), 2.0))
    np.testing.assert_array_equal(hd.constant([1, 2, 3, 4], shape=(2, 2)).numpy(), [[1, 2], [3, 4]])
    with pytest.raises(TypeError, match=r"shape \(2, 2\) needs 1 or 4 values, got 3"):
        hd.constant([1, 2, 3], shape=(2, 2))  # TF: TypeError (unsupported shape)
    with pytest.raises(TypeError, match="fraction"):
        hd.constant([1.5], dtype=hd.int32)  # TF: TypeError


def test_python_scalars_take_the_tensor_dtype():
    # (tf.constant([1., 2.]) * 0.5).dtype float32; (tf.constant([1, 2]) * 3).dtype int32
    assert (hd.constant([1.0, 2.0]) * 0.5).dtype == np.float32
    assert (hd.constant([1, 2]) * 3).dtype == np.int32
    assert (0.5 + hd.constant(np.ones(2, np.float16))).dtype == np.float16


# -- cast, add_n, reductions, comparisons -------------------------------------------------


def test_cast_with_dtype_names():
    # tf.cast([1.7, -1.7, 2.5], tf.int64) -> [1 -1 2]; tf.cast([1.7, -0.2], "bool") -> [True True]
    np.testing.assert_array_equal(hd.cast([1.7, -1.7, 2.5], hd.int64).numpy(), [1, -1, 2])
    assert hd.cast([1.7, -1.7], hd.int64).dtype == np.int64
    np.testing.assert_array_equal(hd.cast([1.7, -0.2], "bool").numpy(), [True, True])
    assert hd.cast(True, hd.float32).numpy() == 1.0
    assert hd.cast([1, 2], np.float64).dtype == np.float64  # tf: float64
    np.testing.assert_array_equal(hd.cast(np.array([1, 0, 2]), hd.bool).numpy(), [1, 0, 1])


def test_add_n_sums_and_differentiates():
    # tf.add_n([tf.constant([1., 2.]), np.float32 [3., 4.]]) -> [4. 6.]
    out = hd.add_n([hd.constant([1.0, 2.0]), np.array([3.0, 4.0], np.float32)])
    np.testing.assert_array_equal(out.numpy(), [4.0, 6.0])
    x = hd.Variable([1.0, 2.0])
    with hd.GradientTape() as tape:
        y = hd.add_n([x, x * 3, hd.constant([1.0, 1.0])])
        s = hd.reduce_sum(y * y)
    # TF: t.gradient(s, x) -> [40. 72.]
    np.testing.assert_allclose(np.asarray(tape.gradient(s, x)), [40.0, 72.0])


def test_add_n_refuses_mixed_shapes():
    with pytest.raises(ValueError, match=r"one shape and dtype.*\(2,\).*\(3,\)"):
        hd.add_n([hd.constant([1.0, 2.0]), hd.constant([1.0, 2.0, 3.0])])
    with pytest.raises(ValueError, match="at least one"):
        hd.add_n([])


def test_reductions_follow_tf():
    # tf.reduce_mean([1, 2]) -> 1; ([1., 2.]) -> 1.5; ([-1, -2]) -> -1
    assert hd.reduce_mean([1, 2]).numpy() == 1 and hd.reduce_mean([1, 2]).dtype == np.int32
    assert hd.reduce_mean([1.0, 2.0]).numpy() == 1.5
    assert hd.reduce_mean([1.0, 2.0]).dtype == np.float32
    assert hd.reduce_mean([-1, -2]).numpy() == -1
    # tf.reduce_mean([[1, 2], [4, 8]], axis=1) -> [1 6]; int64 [-3, -3, -2] -> -2
    np.testing.assert_array_equal(hd.reduce_mean([[1, 2], [4, 8]], axis=1).numpy(), [1, 6])
    assert hd.reduce_mean(hd.constant([-3, -3, -2], hd.int64)).numpy() == -2
    # tf.reduce_sum([[1, 2], [3, 4]], axis=1) -> [3 7]; reduce_mean(axis=0, keepdims) [[2. 3.]]
    np.testing.assert_array_equal(hd.reduce_sum([[1, 2], [3, 4]], axis=1).numpy(), [3, 7])
    np.testing.assert_array_equal(
        hd.reduce_mean([[1.0, 2.0], [3.0, 4.0]], axis=0, keepdims=True).numpy(), [[2.0, 3.0]]
    )


def test_greater_and_friends():
    # tf.greater([1, 2, 3], 2) -> [F F T]; tf.greater([1., 5.], [[2.], [0.]]) -> [[F T] [T T]]
    np.testing.assert_array_equal(hd.greater([1, 2, 3], 2).numpy(), [False, False, True])
    np.testing.assert_array_equal(
        hd.greater(hd.constant([1.0, 5.0]), [[2.0], [0.0]]).numpy(), [[False, True], [True, True]]
    )
    assert hd.greater([1], 0).dtype == np.bool_
    np.testing.assert_array_equal(hd.less_equal([1, 2, 3], 2).numpy(), [True, True, False])
    np.testing.assert_array_equal(hd.not_equal([1, 2], [1, 3]).numpy(), [False, True])


def test_a_tf_training_expression_matches_tf():
    # x = tf.Variable([[1., 2.], [3., 4.]]); l = reduce_mean(add_n([x*x, 2.0*x]), axis=1)
    # s = reduce_sum(l * cast(greater(l, 4.0), float32)): l [5.5 19.5], s 25.0, grad [[2 3] [4 5]]
    x = hd.Variable([[1.0, 2.0], [3.0, 4.0]])
    with hd.GradientTape() as tape:
        loss = hd.reduce_mean(hd.add_n([x * x, 2.0 * x]), axis=1)
        s = hd.reduce_sum(loss * hd.cast(hd.greater(loss, 4.0), hd.float32))
    np.testing.assert_allclose(loss.numpy(), [5.5, 19.5])
    assert s.numpy() == 25.0 and s.dtype == np.float32
    np.testing.assert_allclose(np.asarray(tape.gradient(s, x)), [[2.0, 3.0], [4.0, 5.0]])


# -- function -----------------------------------------------------------------------------------


def test_function_decorates_with_and_without_arguments():
    @hd.function
    def f(a):
        return a + 1

    @hd.function(jit_compile=False, reduce_retracing=True, input_signature=None)
    def g(a):
        return a * 2

    assert f(1) == 2 and g(hd.constant(2)).numpy() == 4  # TF: 2, 4
    assert f.python_function.__name__ == "f" and f.__name__ == "f"
    assert hd.function(f) is f
    assert hd.function(lambda: 3, autograph=False)() == 3
    with pytest.raises(TypeError, match="bogus"):  # TF: TypeError, unexpected keyword
        hd.function(lambda: 1, bogus=1)


def test_function_on_methods_binds_the_instance():
    class Trainer:
        def __init__(self):
            self.calls = 0

        @hd.function
        def step(self, x):
            self.calls += 1
            return x * 3

    t = Trainer()
    assert t.step(2) == 6 and t.calls == 1
    assert isinstance(Trainer.step, hd.Function)


# -- Variable -------------------------------------------------------------------------------------


def test_variable_follows_tf_dtypes_and_the_current_strategy():
    # tf.Variable(1.5).dtype float32, (3) int32, trainable True, (trainable=False) False
    v = hd.Variable(1.5)
    assert v.dtype == np.float32 and hd.Variable(3).dtype == np.int32
    assert v.trainable and not hd.Variable(1.0, trainable=False).trainable
    assert isinstance(v, hd.Variable) and not isinstance(np.ones(1), hd.Variable)
    assert hd.Variable(np.zeros(2), dtype="float32").dtype == np.float32
    strategy = hd.MirroredStrategy(["cpu:0", "cpu:1"])
    with strategy.scope():
        mirrored = hd.Variable([1.0, 2.0], name="w")
    assert isinstance(mirrored, hd.MirroredVariable) and isinstance(mirrored, hd.Variable)
    assert issubclass(hd.MirroredVariable, hd.Variable)
    with pytest.raises(ValueError, match="initial_value"):
        hd.Variable()


# -- random ---------------------------------------------------------------------------------------


def test_random_follows_tf_arguments():
    # tf.random.uniform((2, 3)).dtype float32; int64 with maxval; normal float32
    u = hd.random.uniform((2, 3))
    assert u.shape == (2, 3) and u.dtype == np.float32
    assert np.all((u.numpy() >= 0) & (u.numpy() < 1))
    ints = hd.random.uniform((1000,), minval=-2, maxval=3, dtype=hd.int64).numpy()
    assert ints.dtype == np.int64 and set(ints.tolist()) == {-2, -1, 0, 1, 2}
    assert hd.random.normal((2,)).dtype == np.float32
    with pytest.raises(ValueError, match="maxval"):  # TF: ValueError, must specify maxval
        hd.random.uniform((2,), dtype=hd.int32)


def test_random_seeds_reproduce():
    hd.random.set_seed(7)
    a = [hd.random.uniform((3,), seed=1).numpy(), hd.random.normal((3,)).numpy()]
    hd.random.set_seed(7)
    b = [hd.random.uniform((3,), seed=1).numpy(), hd.random.normal((3,)).numpy()]
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], hd.random.uniform((3,), seed=1).numpy())  # draws go on
    hd.random.set_seed(None)


# -- config ---------------------------------------------------------------------------------------


def test_list_physical_devices(monkeypatch):
    # TF CPU build: [PhysicalDevice(name='/physical_device:CPU:0', device_type='CPU')], GPU []
    cpus = hd.config.list_physical_devices("CPU")
    assert [tuple(d) for d in cpus] == [("/physical_device:CPU:0", "CPU")]
    assert repr(cpus[0]) == "PhysicalDevice(name='/physical_device:CPU:0', device_type='CPU')"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert hd.config.list_physical_devices("GPU") == []
    assert [d.device_type for d in hd.config.list_physical_devices()] == ["CPU"]
    assert hd.config.list_logical_devices("CPU")[0].name == "/device:CPU:0"


# -- the root stays lazy --------------------------------------------------------------------------


def test_root_names_load_lazily():
    code = (
        "import sys, hpcdist as hd; before = set(sys.modules); hd.float32; hd.constant(1.0); "
        "hd.cast; hd.add_n; hd.function; hd.random.uniform; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_"))}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    loaded = set(out.stdout.split())
    assert "hpcdist.core.dtypes" in loaded
    assert not loaded & {"mpi4py", "h5py", "hpcdist.nn", "hpcdist.strategies", "hpcdist.comm"}
    names = set(dir(hd))
    assert {"function", "Variable", "constant", "latest_checkpoint", "random", "config"} <= names
    assert hd.Variable.__module__ == "hpcdist.tf_toplevel.variable"
    assert issubclass(BaseVariable, hd.Variable)
