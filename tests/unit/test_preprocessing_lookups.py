"""StringLookup, IntegerLookup, Hashing and CategoryEncoding without TensorFlow.

Expected values are Keras 3's documented examples (its docstrings' outputs, computed by TF),
SipHash-2-4's reference vectors, and the rules of Keras' ``index_lookup.py``; the comparison
with TF 2.21 itself is tests/conformance/test_preprocessing_lookups.py.
"""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.nn.string_hash import fingerprint64, siphash64, to_hash_bucket_fast, unique_keys

layers = hd.nn.layers
ABCDE = [["A"], ["B"], ["C"], ["D"], ["E"]]


# -- hashes -----------------------------------------------------------------------------------


def test_siphash_reference_vectors():
    """SipHash-2-4 paper's key 00..0f: 15-byte message and empty message."""
    key = (int.from_bytes(bytes(range(8)), "little"), int.from_bytes(bytes(range(8, 16)), "little"))
    assert siphash64(key, bytes(range(15))) == 0xA129CA6149BE45E5
    assert siphash64(key, b"") == 0x726FDB47DD0E0E31
    assert siphash64(key, bytes(range(8))) == 0x93F5F5799A932462


def test_fingerprint64_of_empty_string_is_farmhash_k2():
    # farmhashna's HashLen0to16 returns the constant k2 for an empty input
    assert fingerprint64(b"") == 0x9AE16A3B2F90404F


def test_unique_keys_encode_str_as_utf8_and_keep_bytes():
    keys, inverse, shape = unique_keys(np.array([["é", "a"], ["a", "é"]]), "string")
    assert keys == [b"a", "é".encode()] and shape == (2, 2)
    assert [keys[i] for i in inverse] == ["é".encode(), b"a", b"a", "é".encode()]
    keys, _, _ = unique_keys(np.array([b"x", "y"], dtype=object), "string")
    assert keys == [b"x", b"y"]
    with pytest.raises(TypeError, match="integer"):
        unique_keys(np.array(["a"]), "int")
    assert to_hash_bucket_fast([7], 1000).tolist() == to_hash_bucket_fast([b"7"], 1000).tolist()


# -- Hashing ----------------------------------------------------------------------------------


def test_hashing_matches_keras_docstring_examples():
    assert layers.Hashing(3)(ABCDE).ravel().tolist() == [1, 0, 1, 1, 2]
    masked = layers.Hashing(3, mask_value="")([["A"], ["B"], [""], ["C"], ["D"]])
    assert masked.ravel().tolist() == [1, 1, 0, 2, 2]
    assert layers.Hashing(3, salt=[133, 137])(ABCDE).ravel().tolist() == [1, 2, 1, 0, 2]
    assert layers.Hashing(3, salt=133)(ABCDE).ravel().tolist() == [0, 0, 2, 1, 0]
    out = layers.Hashing(3)(np.array(ABCDE))
    assert out.dtype == np.int64 and out.shape == (5, 1)


def test_hashing_integers_floats_and_encodings():
    ints = layers.Hashing(100)(np.array([[12, -3]]))
    assert ints.tolist() == layers.Hashing(100)(np.array([["12", "-3"]])).tolist()
    assert (
        layers.Hashing(100)(np.array([1.9, -1.9])).tolist()
        == layers.Hashing(100)(np.array([1, -1])).tolist()
    )
    one_hot = layers.Hashing(3, output_mode="one_hot")(np.array(ABCDE))
    assert one_hot.dtype == np.float32 and one_hot.shape == (5, 3)
    assert one_hot.argmax(-1).tolist() == [1, 0, 1, 1, 2]
    multi = layers.Hashing(3, output_mode="multi_hot")(np.array([["A", "B", "E"]]))
    assert multi.tolist() == [[1.0, 1.0, 1.0]]
    count = layers.Hashing(3, output_mode="count")(np.array([["A", "C", "D"]]))
    assert count.tolist() == [[0.0, 3.0, 0.0]]
    with pytest.raises(ValueError, match="num_bins"):
        layers.Hashing(0)
    with pytest.raises(ValueError, match="salt"):
        layers.Hashing(3, salt="x")


# -- CategoryEncoding -------------------------------------------------------------------------


def test_category_encoding_modes():
    enc = layers.CategoryEncoding
    assert enc(4, "one_hot")(np.array([3, 2, 0, 1])).tolist() == np.eye(4)[[3, 2, 0, 1]].tolist()
    multi = enc(4)(np.array([[0, 1], [0, 0], [1, 2], [3, 1]]))
    assert multi.dtype == np.float32
    assert multi.tolist() == [[1, 1, 0, 0], [1, 0, 0, 0], [0, 1, 1, 0], [0, 1, 0, 1]]
    count = enc(4, "count")(np.array([[0, 1], [0, 0], [1, 2], [3, 1]]))
    assert count.tolist() == [[1, 1, 0, 0], [2, 0, 0, 0], [0, 1, 1, 0], [0, 1, 0, 1]]
    weighted = enc(4, "count")(
        np.array([[0, 1], [0, 0]]), count_weights=np.array([[0.1, 0.2], [0.1, 0.4]])
    )
    np.testing.assert_allclose(weighted, [[0.1, 0.2, 0, 0], [0.5, 0, 0, 0]], rtol=1e-6)
    assert enc(3)(np.array([0, 2, 2])).tolist() == [1, 0, 1]  # rank 1: one sample
    assert enc(3, "one_hot")(np.array([[1], [5]])).tolist() == [[0, 1, 0], [0, 0, 0]]
    with pytest.raises(ValueError, match="count_weights"):
        enc(3)(np.array([0]), count_weights=np.array([1.0]))
    with pytest.raises(ValueError, match="num_tokens"):
        enc(None)


# -- StringLookup -----------------------------------------------------------------------------

VOCAB = ["a", "b", "c", "d"]
DATA = np.array([["a", "c", "d"], ["d", "z", "b"]])


def test_string_lookup_ids_oov_and_mask():
    layer = layers.StringLookup(vocabulary=VOCAB)
    out = layer(DATA)
    assert out.dtype == np.int64 and out.tolist() == [[1, 3, 4], [4, 0, 2]]
    assert layer.get_vocabulary() == ["[UNK]", "a", "b", "c", "d"]
    assert layer.vocabulary_size() == 5
    masked = layers.StringLookup(vocabulary=VOCAB, mask_token="")
    assert masked(np.array([["a", ""], ["z", "d"]])).tolist() == [[2, 0], [1, 5]]
    assert masked.get_vocabulary() == ["", "[UNK]", "a", "b", "c", "d"]
    assert masked.get_vocabulary(include_special_tokens=False) == VOCAB
    with_oov = layers.StringLookup(vocabulary=["[UNK]", *VOCAB])  # special tokens skipped
    assert with_oov(DATA).tolist() == out.tolist()


def test_string_lookup_several_oov_ids_hash_with_farmhash():
    layer = layers.StringLookup(vocabulary=VOCAB, num_oov_indices=2)
    out = layer(np.array([["a", "z"], ["y", "x"]]))
    buckets = to_hash_bucket_fast([b"z", b"y", b"x"], 2).tolist()
    assert out.tolist() == [[2, buckets[0]], [buckets[1], buckets[2]]]


def test_string_lookup_no_oov_raises_and_invert():
    strict = layers.StringLookup(vocabulary=VOCAB, num_oov_indices=0)
    assert strict(np.array(["d", "a"])).tolist() == [3, 0]
    with pytest.raises(hd.errors.InvalidArgumentError, match="OOV values"):
        strict(np.array(["a", "z"]))
    inverse = layers.StringLookup(vocabulary=VOCAB, invert=True)
    out = inverse(np.array([[1, 3, 4], [4, 0, 2]]))
    assert out.dtype == object and out.tolist() == [[b"a", b"c", b"d"], [b"d", b"[UNK]", b"b"]]
    masked = layers.StringLookup(vocabulary=VOCAB, invert=True, mask_token="[M]")
    assert masked(np.array([0, 1, 2, 9])).tolist() == [b"[M]", b"[UNK]", b"a", b"[UNK]"]


def test_string_lookup_encodings_are_int64_and_drop_the_mask():
    multi = layers.StringLookup(vocabulary=VOCAB, output_mode="multi_hot", mask_token="")
    out = multi(np.array([["a", "", "a"], ["z", "d", ""]]))
    assert out.dtype == np.int64 and out.tolist() == [[0, 1, 0, 0, 0], [1, 0, 0, 0, 1]]
    count = layers.StringLookup(vocabulary=VOCAB, output_mode="count")
    assert count(np.array([["a", "a", "z"]])).tolist() == [[1, 2, 0, 0, 0]]
    one_hot = layers.StringLookup(vocabulary=VOCAB, output_mode="one_hot")
    assert one_hot(np.array([["b"], ["z"]])).tolist() == [[0, 0, 1, 0, 0], [1, 0, 0, 0, 0]]
    padded = layers.StringLookup(
        vocabulary=VOCAB, output_mode="multi_hot", max_tokens=8, pad_to_max_tokens=True
    )
    assert padded(np.array([["a"]])).shape == (1, 8)


def test_string_lookup_adapt_orders_by_count_then_token_descending():
    layer = layers.StringLookup()
    layer.adapt(np.array(["b", "a", "c", "a", "c", "d", "[UNK]", "e", "e"]))
    assert layer.get_vocabulary() == ["[UNK]", "e", "c", "a", "d", "b"]
    capped = layers.StringLookup(max_tokens=3, mask_token="")
    capped.adapt([["x", "y", ""], ["y", "", ""]])
    assert capped.get_vocabulary() == ["", "[UNK]", "y"]
    with pytest.raises(ValueError, match="static vocabulary"):
        layers.StringLookup(vocabulary=VOCAB).adapt(np.array(["a"]))


def test_adapt_on_an_hpcdist_dataset_of_strings_with_steps():
    words = np.array(["x", "y", "y", "z", "z", "z", "w", "w", "w", "w"])
    ds = hd.data.Dataset.from_tensor_slices(words).batch(3)
    full = layers.StringLookup()
    full.adapt(ds)
    assert full.get_vocabulary() == ["[UNK]", "w", "z", "y", "x"]  # w's 4th is in batch 4
    first = layers.StringLookup()
    first.adapt(ds, steps=2)  # x y y | z z z
    assert first.get_vocabulary() == ["[UNK]", "z", "y", "x"]


def test_vocabulary_rules():
    with pytest.raises(ValueError, match="repeated"):
        layers.StringLookup(vocabulary=["a", "b", "a"])
    with pytest.raises(ValueError, match="mask"):
        layers.StringLookup(vocabulary=["a", ""], mask_token="")
    with pytest.raises(ValueError, match="max_tokens"):
        layers.StringLookup(vocabulary=VOCAB, max_tokens=3)
    with pytest.raises(ValueError, match="empty"):
        layers.StringLookup(vocabulary=[])
    special = layers.StringLookup(vocabulary=["", "[UNK]", *VOCAB], mask_token="")
    assert special.get_vocabulary() == ["", "[UNK]", *VOCAB]
    with pytest.raises(ValueError, match="output_mode"):
        layers.StringLookup(vocabulary=VOCAB, output_mode="tf_idf")
    with pytest.raises(RuntimeError, match="vocabulary must be set"):
        layers.StringLookup(output_mode="multi_hot")(np.array(["a"]))


def test_vocabulary_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"a\r\nb\nc\n")
    layer = layers.StringLookup(vocabulary=str(path), mask_token="")
    assert layer(np.array(["c", "a", "q", ""])).tolist() == [4, 2, 1, 0]
    ints = tmp_path / "ints.txt"
    ints.write_text("10\n20\n")
    assert layers.IntegerLookup(vocabulary=str(ints))(np.array([20, 5])).tolist() == [2, 0]
    with pytest.raises(ValueError, match="does not exist"):
        layers.StringLookup(vocabulary=str(tmp_path / "missing.txt"))


# -- IntegerLookup ----------------------------------------------------------------------------


def test_integer_lookup_keras_examples():
    vocab = [12, 36, 1138, 42]
    data = np.array([[12, 1138, 42], [42, 1000, 36]])
    assert layers.IntegerLookup(vocabulary=vocab)(data).tolist() == [[1, 3, 4], [4, 0, 2]]
    two = layers.IntegerLookup(vocabulary=vocab, num_oov_indices=2)
    assert two(data).tolist() == [[2, 4, 5], [5, 0, 3]]  # 1000 % 2 == 0
    masked = layers.IntegerLookup(vocabulary=vocab, mask_token=0)
    assert masked(np.array([[12, 0], [7, 42]])).tolist() == [[2, 0], [1, 5]]
    inverse = layers.IntegerLookup(vocabulary=vocab, invert=True)
    assert inverse(np.array([[1, 3, 4], [4, 0, 2]])).tolist() == [[12, 1138, 42], [42, -1, 36]]
    adapted = layers.IntegerLookup()
    adapted.adapt(np.array([[12, 1138, 42], [42, 1000, 36], [36, 12, 42]]))
    assert adapted.get_vocabulary() == [-1, 42, 36, 12, 1138, 1000]
    farm = layers.IntegerLookup(vocabulary=vocab, num_oov_indices=3, oov_method="farmhash")
    assert farm(np.array([7])).tolist() == (to_hash_bucket_fast([b"7"], 3)).tolist()


def test_layers_run_in_a_dataset_map_and_a_functional_model():
    lookup = layers.StringLookup(vocabulary=VOCAB, num_oov_indices=0)
    words = np.array([["a", "b"], ["d", "c"], ["b", "b"]])
    ds = hd.data.Dataset.from_tensor_slices({"w": words, "y": np.array(["a", "d", "c"])})
    ds = ds.map(lambda x: (lookup(x["w"]), lookup(x["y"]))).batch(2)
    batches = list(ds)
    assert batches[0][0].tolist() == [[0, 1], [3, 2]] and batches[0][1].tolist() == [0, 3]
    assert batches[1][0].tolist() == [[1, 1]]
    inputs = hd.nn.Input(shape=(2,), dtype=hd.string)
    model = hd.nn.Model(inputs, lookup(inputs))
    assert model(words).tolist() == [[0, 1], [3, 2], [1, 1]]


def test_configs_round_trip():
    strings, ints = np.array([["a", "q"]]), np.array([[5, 3]])
    for layer, sample in (
        (layers.StringLookup(vocabulary=VOCAB, mask_token="", num_oov_indices=2), strings),
        (layers.IntegerLookup(vocabulary=[5, 6], output_mode="count"), ints),
        (layers.Hashing(7, salt=3, output_mode="multi_hot"), strings),
        (layers.CategoryEncoding(5, output_mode="count"), ints),
    ):
        config = layer.get_config()
        clone = type(layer).from_config({**config, "name": config["name"] + "_clone"})
        assert np.array_equal(clone(sample), layer(sample)), type(layer).__name__


def test_string_datasets_through_hd_data():
    """numpy str, bytes and object arrays through from_tensor_slices, map, shuffle and batch."""
    text = np.array(["a", "bbb", "cc", "dddd", "e"])
    out = list(hd.data.Dataset.from_tensor_slices(text).batch(2))
    assert [b.tolist() for b in out] == [["a", "bbb"], ["cc", "dddd"], ["e"]]
    raw = np.array([b"x\x01", b"", "é".encode()], dtype=object)
    batches = list(hd.data.Dataset.from_tensor_slices(raw).batch(3))
    assert batches[0].tolist() == [b"x\x01", b"", "é".encode()]
    words = np.array([b"ab", b"c"])  # numpy bytes ("S") arrays
    mapped = hd.data.Dataset.from_tensor_slices(words).map(lambda w: w + b"!").batch(2)
    assert next(iter(mapped)).tolist() == [b"ab!", b"c!"]
    shuffled = hd.data.Dataset.from_tensor_slices(text).shuffle(5, seed=3).batch(5)
    assert sorted(next(iter(shuffled)).tolist()) == sorted(text.tolist())
    lookup = layers.StringLookup(vocabulary=["a", "cc", "e"])
    ids = hd.data.Dataset.from_tensor_slices(text).batch(5).map(lookup)
    assert next(iter(ids)).tolist() == [1, 0, 2, 0, 3]
