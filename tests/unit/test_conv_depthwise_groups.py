"""DepthwiseConv2D and grouped Conv2D: values of a direct loop, central-difference gradients,
configs and errors (equality with Keras 3 is in tests/conformance/test_layers_merge_pool.py)."""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.core import conv_ops, windows
from hpcdist.nn import layers
from tests.gradcheck import check_variables


def direct_depthwise(x, kernel, stride, padding):
    """The definition, one output at a time (TF's padding rule)."""
    n, h, w, c = x.shape
    kh, kw, _, m = kernel.shape
    if padding == "same":
        ph = windows.same_padding(h, kh, stride)
        pw = windows.same_padding(w, kw, stride)
        x = np.pad(x, ((0, 0), ph, pw, (0, 0)))
    oh = (x.shape[1] - kh) // stride + 1
    ow = (x.shape[2] - kw) // stride + 1
    out = np.zeros((n, oh, ow, c * m))
    for b, i, j, ch, k in np.ndindex(n, oh, ow, c, m):
        window = x[b, i * stride : i * stride + kh, j * stride : j * stride + kw, ch]
        out[b, i, j, ch * m + k] = (window * kernel[:, :, ch, k]).sum()
    return out


@pytest.mark.parametrize(("stride", "padding", "m"), [(1, "valid", 1), (2, "same", 3)])
def test_depthwise_equals_its_definition(stride, padding, m):
    rng = np.random.default_rng(0)
    x, kernel = rng.standard_normal((2, 6, 5, 3)), rng.standard_normal((3, 2, 3, m))
    out = conv_ops.depthwise_conv2d(x, kernel, stride, padding).numpy()
    np.testing.assert_allclose(out, direct_depthwise(x, kernel, stride, padding), rtol=1e-12)


@pytest.mark.parametrize(("stride", "padding", "m"), [(1, "valid", 1), (2, "same", 2)])
def test_depthwise_gradients_match_central_differences(stride, padding, m):
    rng = np.random.default_rng(1)
    conv = layers.DepthwiseConv2D((3, 2), stride, padding, depth_multiplier=m, activation="tanh")
    conv.dtype = np.dtype(np.float64)
    x = hd.get_strategy().Variable(rng.standard_normal((2, 5, 4, 3)))
    weights = rng.standard_normal(conv(x).shape)
    check_variables(lambda: (conv(x) * weights).sum(), [*conv.trainable_variables, x])


def test_grouped_conv_is_one_conv_per_group():
    rng = np.random.default_rng(2)
    conv = layers.Conv2D(6, 3, padding="same", groups=3)
    x = rng.standard_normal((2, 5, 5, 6)).astype(np.float32)
    out = conv(x).numpy()
    kernel, bias = (w.numpy() for w in conv.weights)
    assert kernel.shape == (3, 3, 2, 6)
    for g in range(3):
        alone = conv_ops.conv2d(
            x[..., 2 * g : 2 * g + 2], kernel[..., 2 * g : 2 * g + 2], 1, "same"
        )
        expected = alone.numpy() + bias[2 * g : 2 * g + 2]
        np.testing.assert_allclose(out[..., 2 * g : 2 * g + 2], expected, rtol=1e-6, atol=1e-6)


def test_grouped_conv_gradients_match_central_differences():
    rng = np.random.default_rng(3)
    conv = layers.Conv2D(4, 2, strides=2, groups=2, activation="tanh")
    conv.dtype = np.dtype(np.float64)
    x = hd.get_strategy().Variable(rng.standard_normal((2, 4, 4, 4)))
    weights = rng.standard_normal(conv(x).shape)
    check_variables(lambda: (conv(x) * weights).sum(), [*conv.trainable_variables, x])


def test_configs_rebuild_the_same_layers():
    for layer in (
        layers.DepthwiseConv2D(3, 2, "same", depth_multiplier=2, use_bias=False),
        layers.Conv2D(4, 3, groups=2),
    ):
        config = layer.get_config()
        again = type(layer).from_config(config)
        assert again.get_config() == config
    config = layers.DepthwiseConv2D(3).get_config()
    assert (
        config["depthwise_initializer"] == "glorot_uniform" and "kernel_initializer" not in config
    )


def test_bad_groups_multipliers_and_dilations_are_errors():
    with pytest.raises(ValueError, match="filters must be evenly divisible"):
        layers.Conv2D(6, 3, groups=4)
    with pytest.raises(ValueError, match="input channels must be evenly divisible"):
        layers.Conv2D(6, 3, groups=3)(np.zeros((1, 5, 5, 4), np.float32))
    with pytest.raises(ValueError, match="depth_multiplier must be positive"):
        layers.DepthwiseConv2D(3, depth_multiplier=0)
    with pytest.raises(ValueError, match="dilation_rate=1"):
        layers.DepthwiseConv2D(3, dilation_rate=2)
    with pytest.raises(ValueError, match="kernel expects 2"):
        conv_ops.depthwise_conv2d(np.zeros((1, 4, 4, 3)), np.zeros((2, 2, 2, 1)))
