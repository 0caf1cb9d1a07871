"""MultiHeadAttention and EinsumDense: gradients, masks, weights, configs, a small encoder.

Keras 3's numbers are in tests/conformance/test_layers_bn_mha.py; these tests check the layers
against central differences and a plain numpy attention.
"""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.core.variables import Variable
from hpcdist.nn import layers, ops
from hpcdist.nn.einsum_dense import einsum
from tests.gradcheck import check_variables

RNG = np.random.default_rng(0)
Q = RNG.standard_normal((2, 4, 6))
V = RNG.standard_normal((2, 5, 6))
MASK = RNG.random((2, 4, 5)) > 0.4
MASK[:, :, 0] = True  # no row masked entirely


def mha64(**kwargs):
    layer = layers.MultiHeadAttention(dtype="float64", **kwargs)
    layer(Q, V)
    for i, w in enumerate(layer.weights):
        w.assign(np.random.default_rng(i).standard_normal(w.shape) * 0.5)
    return layer


def numpy_attention(layer, q, v, mask=None):
    """Attention written out in numpy from the layer's weights (the reference)."""
    wq, bq, wk, bk, wv, bv, wo, bo = (w.numpy() for w in layer.weights)
    qp = np.einsum("btd,dnh->btnh", q, wq) + bq
    kp = np.einsum("bsd,dnh->bsnh", v, wk) + bk
    vp = np.einsum("bsd,dnh->bsnh", v, wv) + bv
    logits = np.einsum("btnh,bsnh->bnts", qp, kp) / np.sqrt(layer.key_dim)
    if mask is not None:
        logits = np.where(mask[:, None], logits, -np.inf)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bnts,bsnh->btnh", probs, vp).reshape(*q.shape[:2], -1) @ wo.reshape(
        -1, wo.shape[-1]
    ) + bo, probs


CALLS = {
    "plain": {},
    "mask": {"attention_mask": MASK},
    "causal": {"use_causal_mask": True},
    "causal-and-mask": {"use_causal_mask": True, "attention_mask": MASK},
    "scores": {"return_attention_scores": True},
    "scores-mask": {"return_attention_scores": True, "attention_mask": MASK},
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_gradients_match_central_differences(name):
    layer = mha64(num_heads=2, key_dim=3)
    q, v = Variable(Q.copy(), dtype=np.float64), Variable(V.copy(), dtype=np.float64)
    w = RNG.standard_normal((2, 4, 6))

    def loss():
        out = layer(q, v, **CALLS[name])
        out = out[0] if isinstance(out, tuple) else out
        return ops.reduce_sum(ops.multiply(out, w))

    check_variables(loss, [q, v, *layer.trainable_variables])


@pytest.mark.parametrize("name", sorted(CALLS))
def test_outputs_match_numpy_attention(name):
    layer = mha64(num_heads=2, key_dim=3)
    call = CALLS[name]
    mask = call.get("attention_mask")
    if call.get("use_causal_mask"):
        causal = np.tril(np.ones((4, 5), bool))[None]
        mask = causal if mask is None else mask & causal
    expected, probs = numpy_attention(layer, Q, V, mask)
    out = layer(Q, V, **call)
    if call.get("return_attention_scores"):
        out, scores = out
        assert scores.shape == (2, 2, 4, 5)
        np.testing.assert_allclose(scores.numpy(), probs, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-9, atol=1e-12)


def test_causal_mask_hides_later_positions():
    layer = mha64(num_heads=2, key_dim=3)
    x = RNG.standard_normal((1, 5, 6))
    _, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    assert np.all(np.triu(scores.numpy()[0, 0], 1) == 0)
    changed = x.copy()
    changed[0, 3:] += 10.0  # later positions cannot move earlier outputs
    before, after = layer(x, x, use_causal_mask=True), layer(changed, changed, use_causal_mask=True)
    np.testing.assert_allclose(after.numpy()[0, :3], before.numpy()[0, :3], rtol=1e-12)


def test_key_value_dims_output_shape_and_weights():
    layer = layers.MultiHeadAttention(3, 2, value_dim=4, output_shape=7, name="att")
    key = RNG.standard_normal((2, 5, 3)).astype(np.float32)
    out = layer(Q.astype(np.float32), V.astype(np.float32), key)
    assert out.shape == (2, 4, 7) and out.dtype == np.float32
    assert [(w.name, w.shape) for w in layer.weights] == [
        ("att/query/kernel", (6, 3, 2)),
        ("att/query/bias", (3, 2)),
        ("att/key/kernel", (3, 3, 2)),
        ("att/key/bias", (3, 2)),
        ("att/value/kernel", (6, 3, 4)),
        ("att/value/bias", (3, 4)),
        ("att/attention_output/kernel", (3, 4, 7)),
        ("att/attention_output/bias", (7,)),
    ]
    assert layer.query_dense.name == "query" and layer.output_dense.name == "attention_output"
    no_bias = layers.MultiHeadAttention(2, 3, use_bias=False)
    no_bias(Q, V)
    assert [w.shape for w in no_bias.weights] == [(6, 2, 3)] * 3 + [(2, 3, 6)]
    frozen = layers.MultiHeadAttention(2, 3, trainable=False)
    frozen(Q, V)
    assert frozen.trainable_variables == [] and len(frozen.non_trainable_variables) == 8


def test_dropout_only_in_training():
    layer = layers.MultiHeadAttention(2, 3, dropout=0.5, seed=3, dtype="float64")
    first, again = layer(Q, V), layer(Q, V, training=False)
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    _, scores = layer(Q, V, training=True, return_attention_scores=True)
    np.testing.assert_allclose(scores.numpy().sum(-1), 1.0)  # the scores before the dropout
    assert not np.allclose(layer(Q, V, training=True).numpy(), first.numpy())


def test_config_round_trip():
    layer = layers.MultiHeadAttention(
        4, 8, value_dim=2, dropout=0.1, use_bias=False, output_shape=(5,), seed=1, name="m"
    )
    config = layer.get_config()
    assert config["output_shape"] == [5] and config["value_dim"] == 2
    assert layers.MultiHeadAttention.from_config(config).get_config() == config
    dense = layers.EinsumDense("abc,cd->abd", (None, 3), bias_axes="d", activation="relu")
    assert layers.EinsumDense.from_config(dense.get_config()).get_config() == dense.get_config()


def test_bad_arguments_and_inputs_name_expected_and_received():
    with pytest.raises(ValueError, match=r"expected a positive integer\. Received: num_heads=0"):
        layers.MultiHeadAttention(0, 2)
    with pytest.raises(ValueError, match=r"Received: key_dim=2\.5"):
        layers.MultiHeadAttention(2, 2.5)
    with pytest.raises(ValueError, match="Received: value_dim=-1"):
        layers.MultiHeadAttention(2, 2, value_dim=-1)
    layer = layers.MultiHeadAttention(2, 3)
    with pytest.raises(ValueError, match=r"value_shape=\(2, 5, 6\) and key_shape=\(2, 3, 6\)"):
        layer(Q, V, RNG.standard_normal((2, 3, 6)))
    with pytest.raises(ValueError, match=r"rank >= 3 .* received query.shape=\(2, 6\)"):
        layers.MultiHeadAttention(2, 3)(Q[:, 0], V)
    layer(Q, V)
    with pytest.raises(
        ValueError,
        match=r"attention_mask must broadcast to .*\(2, 4, 5\), "
        r"received attention_mask.shape=\(2, 4, 3\)",
    ):
        layer(Q, V, attention_mask=np.ones((2, 4, 3), bool))
    with pytest.raises(ValueError, match=r"size 6 on axis 2, received an input of shape"):
        layer(Q[..., :5], V)
    with pytest.raises(ValueError, match="called without `value`"):
        layer(Q)


def test_einsum_gradients_and_bad_equations():
    a = Variable(RNG.standard_normal((2, 3, 4)), dtype=np.float64)
    b = Variable(RNG.standard_normal((4, 5)), dtype=np.float64)
    check_variables(lambda: ops.reduce_sum(ops.square(einsum("abc,cd->abd", a, b))), [a, b])
    for bad in ("abc,cd", "...c,cd->...d", "aab,bc->ac", "abc,cd->ad"):
        with pytest.raises(ValueError, match="einsum"):
            einsum(bad, a, b)


def test_transformer_encoder_in_the_functional_api_trains_and_saves(tmp_path):
    hd.nn.set_random_seed(0)
    inputs = hd.nn.Input((6,), dtype="int64")
    x = layers.Embedding(20, 8)(inputs)
    attention = layers.MultiHeadAttention(2, 4)
    x = layers.LayerNormalization()(layers.Add()([x, attention(x, x, use_causal_mask=True)]))
    h = layers.Dense(16, activation="gelu")(x)
    x = layers.LayerNormalization()(layers.Add()([x, layers.Dense(8)(h)]))
    outputs = layers.Dense(3)(layers.GlobalAveragePooling1D()(x))
    model = hd.nn.Model(inputs, outputs)
    model.compile(hd.nn.optimizers.Adam(0.01), hd.nn.losses.SparseCategoricalCrossentropy(True))
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 20, (64, 6))
    labels = tokens[:, 0] % 3
    history = model.fit(tokens, labels, batch_size=16, epochs=8, verbose=0)
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]
    model.save(str(tmp_path / "encoder.h5"))
    again = hd.nn.models.load_model(str(tmp_path / "encoder.h5"))
    np.testing.assert_allclose(again.predict(tokens), model.predict(tokens), rtol=1e-5, atol=1e-6)
