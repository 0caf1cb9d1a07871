"""Keras preprocessing lookups against Keras 3 on TF 2.21: same vocabularies, same inputs.

StringLookup and IntegerLookup (given vocabularies, files, `adapt` on arrays and datasets, OOV
ids, the mask, `invert`, every output mode), Hashing (FarmHash and salted SipHash), and
CategoryEncoding; each case returns the values and their dtype's name, so int64 ids and the
encodings' dtypes are compared too. The hashes themselves are compared with
``tf.strings.to_hash_bucket_fast`` / ``_strong`` on a few thousand strings.
"""

import numpy as np
import pytest

from hpcdist.nn.string_hash import fingerprint64, siphash64
from tests.conformance.helpers import conform, tf

VOCAB = ["a", "b", "c", "d"]
WORDS = np.array([["a", "c", "d"], ["d", "z", "b"], ["", "a", "q"]])
INTS = np.array([[12, 1138, 42], [42, 1000, 36], [0, 7, -5]])
IVOCAB = [12, 36, 1138, 42]


def with_dtype(out):
    """The values and their dtype's name (a TF tensor or a numpy array)."""
    array = np.asarray(out)
    return array, array.dtype.name


def random_strings(n, seed):
    rng = np.random.default_rng(seed)
    out = [b"", b"\x00", b"a\x00b", "é".encode(), "日本語".encode()]
    for _ in range(n - len(out)):
        size = int(rng.choice([1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 200]))
        out.append(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    return out


def test_fingerprint64_equals_tf_on_many_strings():
    strings = random_strings(3000, seed=1)
    buckets = 2**63 - 1  # TF's largest: the fingerprint modulo a prime-free big number
    expected = tf.strings.to_hash_bucket_fast(tf.constant(strings), buckets).numpy()
    got = np.array([fingerprint64(s) % buckets for s in strings], dtype=np.int64)
    assert np.array_equal(got, expected)
    raw = tf.fingerprint(tf.constant(strings)).numpy()  # uint8[n, 8], little-endian
    assert [int.from_bytes(bytes(r), "little") for r in raw[:50]] == [
        fingerprint64(s) for s in strings[:50]
    ]


@pytest.mark.parametrize("key", [[133, 137], [1, 1], [2**62 + 5, 2**40 + 3]])
def test_siphash_equals_tf_strong_hash(key):
    strings = random_strings(800, seed=2)
    buckets = 2**63 - 1
    expected = tf.strings.to_hash_bucket_strong(tf.constant(strings), buckets, key).numpy()
    got = np.array([siphash64(key, s) % buckets for s in strings], dtype=np.int64)
    assert np.array_equal(got, expected)


HASHING = {
    "strings": (dict(num_bins=3), np.array([["A"], ["B"], ["C"], ["D"], ["E"]])),
    "many-bins": (dict(num_bins=1000), WORDS),
    "mask": (dict(num_bins=5, mask_value=""), WORDS),
    "salt-pair": (dict(num_bins=7, salt=[133, 137]), WORDS),
    "salt-int": (dict(num_bins=7, salt=133), WORDS),
    "ints": (dict(num_bins=11), INTS),
    "ints-mask": (dict(num_bins=11, mask_value=0), INTS),
    "floats": (dict(num_bins=11), np.array([[1.5, -2.7, 3.0]], np.float32)),
    "bytes": (dict(num_bins=9), np.array([[b"a", b"xyz"], [b"", b"q"]])),
    "one-hot": (dict(num_bins=4, output_mode="one_hot"), np.array([["a"], ["b"], ["zz"]])),
    "one-hot-rank1": (dict(num_bins=4, output_mode="one_hot"), np.array(["a", "b", "zz"])),
    "multi-hot": (dict(num_bins=4, output_mode="multi_hot"), WORDS),
    "count": (dict(num_bins=4, output_mode="count"), WORDS),
    "count-rank1": (dict(num_bins=4, output_mode="count"), np.array(["a", "a", "b"])),
}


@pytest.mark.parametrize("name", list(HASHING))
def test_hashing(name):
    kwargs, inputs = HASHING[name]
    conform(lambda lib: with_dtype(lib.keras.layers.Hashing(**kwargs)(inputs)))


STRING_CASES = {
    "int": (dict(vocabulary=VOCAB), WORDS),
    "mask": (dict(vocabulary=VOCAB, mask_token=""), WORDS),
    "two-oov": (dict(vocabulary=VOCAB, num_oov_indices=2), WORDS),
    "five-oov-mask": (dict(vocabulary=VOCAB, num_oov_indices=5, mask_token=""), WORDS),
    "salted-oov": (dict(vocabulary=VOCAB, num_oov_indices=3, salt=[7, 9]), WORDS),
    "special-first": (dict(vocabulary=["", "[UNK]", *VOCAB], mask_token=""), WORDS),
    "rank1": (dict(vocabulary=VOCAB), np.array(["c", "z", "a"])),
    "scalar": (dict(vocabulary=VOCAB), np.array("b")),
    "bytes": (dict(vocabulary=[b"a", b"b"]), np.array([[b"b", b"x"]])),
    "unicode": (dict(vocabulary=["é", "日本"]), np.array([["日本", "é", "e"]])),
    "one-hot": (dict(vocabulary=VOCAB, output_mode="one_hot"), np.array([["a"], ["z"], ["d"]])),
    "one-hot-2d": (dict(vocabulary=VOCAB, output_mode="one_hot"), WORDS),
    "one-hot-mask": (dict(vocabulary=VOCAB, output_mode="one_hot", mask_token=""), WORDS),
    "multi-hot": (dict(vocabulary=VOCAB, output_mode="multi_hot"), WORDS),
    "multi-hot-mask": (dict(vocabulary=VOCAB, output_mode="multi_hot", mask_token=""), WORDS),
    "count": (dict(vocabulary=VOCAB, output_mode="count"), WORDS),
    "count-rank1": (dict(vocabulary=VOCAB, output_mode="count"), np.array(["a", "a", "z"])),
    "count-padded": (
        dict(vocabulary=VOCAB, output_mode="count", max_tokens=9, pad_to_max_tokens=True),
        WORDS,
    ),
    "no-oov-raises": (dict(vocabulary=VOCAB, num_oov_indices=0), WORDS),
    "no-oov": (dict(vocabulary=VOCAB, num_oov_indices=0), np.array([["d", "a"]])),
    "invert": (dict(vocabulary=VOCAB, invert=True), np.array([[1, 3, 4], [4, 0, 9]])),
    "invert-mask": (
        dict(vocabulary=VOCAB, invert=True, mask_token="[M]"),
        np.array([[0, 1, 2], [5, 6, -1]]),
    ),
    "invert-two-oov": (dict(vocabulary=VOCAB, invert=True, num_oov_indices=2), np.arange(8)),
    "repeated-raises": (dict(vocabulary=["a", "b", "a"]), WORDS),
    "mask-inside-raises": (dict(vocabulary=["a", ""], mask_token=""), WORDS),
    "too-many-raises": (dict(vocabulary=VOCAB, max_tokens=3), WORDS),
}


def lookup_case(lib, cls, kwargs, inputs):
    layer = getattr(lib.keras.layers, cls)(**kwargs)
    return (
        with_dtype(layer(inputs)),
        layer.get_vocabulary(),
        layer.get_vocabulary(include_special_tokens=False),
        layer.vocabulary_size(),
    )


@pytest.mark.parametrize("name", list(STRING_CASES))
def test_string_lookup(name):
    kwargs, inputs = STRING_CASES[name]
    conform(lambda lib: lookup_case(lib, "StringLookup", kwargs, inputs))


INT_CASES = {
    "int": (dict(vocabulary=IVOCAB), INTS),
    "mask": (dict(vocabulary=IVOCAB, mask_token=0), INTS),
    "floormod-oov": (dict(vocabulary=IVOCAB, num_oov_indices=3), INTS),
    "farmhash-oov": (dict(vocabulary=IVOCAB, num_oov_indices=3, oov_method="farmhash"), INTS),
    "salted-oov": (
        dict(vocabulary=IVOCAB, num_oov_indices=4, oov_method="farmhash", salt=11),
        INTS,
    ),
    "int32-inputs": (dict(vocabulary=IVOCAB), INTS.astype(np.int32)),
    "one-hot": (dict(vocabulary=IVOCAB, output_mode="one_hot"), np.array([[12], [5]])),
    "multi-hot-mask": (dict(vocabulary=IVOCAB, output_mode="multi_hot", mask_token=0), INTS),
    "count": (dict(vocabulary=IVOCAB, output_mode="count"), INTS),
    "invert": (dict(vocabulary=IVOCAB, invert=True), np.array([[1, 3, 4], [4, 0, 9]])),
    "invert-mask": (dict(vocabulary=IVOCAB, invert=True, mask_token=0), np.arange(6)),
    "no-oov-raises": (dict(vocabulary=IVOCAB, num_oov_indices=0), INTS),
}


@pytest.mark.parametrize("name", list(INT_CASES))
def test_integer_lookup(name):
    kwargs, inputs = INT_CASES[name]
    conform(lambda lib: lookup_case(lib, "IntegerLookup", kwargs, inputs))


ADAPT_WORDS = np.array(["b", "a", "c", "a", "c", "d", "[UNK]", "e", "e", "", "", "", "f"])


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"mask_token": ""},
        {"max_tokens": 4},
        {"max_tokens": 5, "mask_token": "", "num_oov_indices": 2},
        {"output_mode": "multi_hot"},
    ],
    ids=["plain", "mask", "max-tokens", "max-mask-oov", "multi-hot"],
)
def test_string_adapt_on_arrays_and_datasets(kwargs):
    def case(lib):
        on_array = lib.keras.layers.StringLookup(**kwargs)
        on_array.adapt(ADAPT_WORDS)
        on_2d = lib.keras.layers.StringLookup(**kwargs)
        on_2d.adapt(ADAPT_WORDS[:12].reshape(4, 3).tolist())
        on_data = lib.keras.layers.StringLookup(**kwargs)
        on_data.adapt(lib.data.Dataset.from_tensor_slices(ADAPT_WORDS).batch(4))
        some = lib.keras.layers.StringLookup(**kwargs)
        some.adapt(lib.data.Dataset.from_tensor_slices(ADAPT_WORDS).batch(4), steps=2)
        layers = (on_array, on_2d, on_data, some)
        return [(x.get_vocabulary(), with_dtype(x(WORDS))) for x in layers]

    conform(case)


def test_integer_adapt_ties_break_high_to_low():
    data = np.array([[5, 3, 3], [9, 1, 1], [7, 7, -1], [0, 0, 2]])

    def case(lib):
        plain = lib.keras.layers.IntegerLookup()
        plain.adapt(data)
        masked = lib.keras.layers.IntegerLookup(mask_token=0, max_tokens=5)
        masked.adapt(lib.data.Dataset.from_tensor_slices(data).batch(2))
        return [(x.get_vocabulary(), with_dtype(x(data))) for x in (plain, masked)]

    conform(case)


def test_adapt_after_a_vocabulary_raises():
    conform(lambda lib: lib.keras.layers.StringLookup(vocabulary=VOCAB).adapt(ADAPT_WORDS))


def test_vocabulary_files(tmp_path):
    words, ints = tmp_path / "words.txt", tmp_path / "ints.txt"
    words.write_text("a\nb\nc\n")
    ints.write_text("12\n36\n1138\n")

    def case(lib):
        s = lib.keras.layers.StringLookup(vocabulary=str(words), mask_token="")
        i = lib.keras.layers.IntegerLookup(vocabulary=str(ints), num_oov_indices=2)
        inv = lib.keras.layers.StringLookup(vocabulary=str(words), invert=True)
        return [
            (with_dtype(s(WORDS)), s.get_vocabulary(), s.vocabulary_size()),
            (with_dtype(i(INTS)), i.get_vocabulary(), i.vocabulary_size()),
            with_dtype(inv(np.array([0, 1, 3, 7]))),
        ]

    conform(case)


CATEGORY = {
    "one-hot": (dict(num_tokens=4, output_mode="one_hot"), np.array([3, 2, 0, 1])),
    "one-hot-col": (dict(num_tokens=4, output_mode="one_hot"), np.array([[3], [1]])),
    "one-hot-2d": (dict(num_tokens=4, output_mode="one_hot"), np.array([[3, 1], [0, 2]])),
    "multi-hot": (dict(num_tokens=4), np.array([[0, 1], [0, 0], [1, 2], [3, 1]])),
    "multi-hot-rank1": (dict(num_tokens=4), np.array([0, 2, 2])),
    "count": (dict(num_tokens=4, output_mode="count"), np.array([[0, 1], [0, 0], [3, 3]])),
    "out-of-range": (dict(num_tokens=3, output_mode="count"), np.array([[0, 5], [2, 3]])),
    "int32": (dict(num_tokens=5, output_mode="multi_hot"), np.array([[4, 0]], np.int32)),
}


@pytest.mark.parametrize("name", list(CATEGORY))
def test_category_encoding(name):
    kwargs, inputs = CATEGORY[name]
    conform(lambda lib: with_dtype(lib.keras.layers.CategoryEncoding(**kwargs)(inputs)))


def test_category_encoding_count_weights():
    ids = np.array([[0, 1], [0, 0], [2, 1]])
    weights = np.array([[0.1, 0.2], [0.1, 0.4], [1.5, 2.0]], np.float32)

    def case(lib):
        layer = lib.keras.layers.CategoryEncoding(num_tokens=3, output_mode="count")
        return with_dtype(layer(ids, count_weights=weights))

    conform(case)


def test_lookups_inside_a_string_dataset_pipeline():
    """from_tensor_slices of str arrays, map through lookups, shuffle-free batch, as TF's
    parameter-server tutorial feeds its model."""
    features = np.array([["avenger", "ironman", "batman"], ["hulk", "spiderman", "x"]] * 3)
    labels = np.array([["yes"], ["no"]] * 3)

    def case(lib):
        feature_lookup = lib.keras.layers.StringLookup(
            vocabulary=["avenger", "ironman", "batman", "hulk", "spiderman"], mask_token=None
        )
        label_lookup = lib.keras.layers.StringLookup(
            vocabulary=["yes", "no"], num_oov_indices=0, mask_token=None
        )
        hashing = lib.keras.layers.Hashing(num_bins=16)
        ds = lib.data.Dataset.from_tensor_slices({"features": features, "label": labels})
        ds = ds.map(
            lambda x: (
                {"ids": feature_lookup(x["features"]), "hashed": hashing(x["features"])},
                label_lookup(x["label"]),
            )
        ).batch(4)
        return [(x["ids"], x["hashed"], y) for x, y in ds]

    conform(case)
