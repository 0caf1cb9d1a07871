"""The byte-layout shortcut of `parse_example` (hpcdist.io.layout) gives protobuf's values.

Each case parses a batch with `hd.io.parse_example` and compares, bit for bit, with the values
protobuf itself decodes from every record; `dense_columns` is asked directly whether the
shortcut applied, so a batch meant for it cannot pass through the slow path unnoticed.
"""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.errors import InvalidArgumentError
from hpcdist.io.example_proto import Example
from hpcdist.io.layout import MIN_BATCH, dense_columns, read_layout

SPEC = {"x": hd.io.FixedLenFeature([2, 3], hd.float32), "y": hd.io.FixedLenFeature([], hd.int64)}
WANTED = {"x": ("float_list", 6), "y": ("int64_list", 1)}


def example(x, y, x_key="x", extra=None):
    proto = Example()
    proto.features.feature[x_key].float_list.value.extend(x)
    proto.features.feature["y"].int64_list.value.extend(y)
    for key, value in (extra or {}).items():
        proto.features.feature[key].bytes_list.value.append(value)
    return proto.SerializeToString()


def protobuf_values(records):
    """What protobuf decodes: x as float32 [n, 2, 3], y as int64 [n]."""
    parsed = [Example.FromString(r).features.feature for r in records]
    x = np.array([list(f["x"].float_list.value) for f in parsed], np.float32).reshape(-1, 2, 3)
    y = np.array([f["y"].int64_list.value[0] for f in parsed], np.int64)
    return x, y


def batch(n, labels=None, seed=0):
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((n, 6)).astype(np.float32)
    xs[0, :4] = [np.nan, -0.0, np.inf, 1e-45]
    labels = [i % 128 for i in range(n)] if labels is None else labels
    return [example(x, [label]) for x, label in zip(xs, labels, strict=True)]


def assert_parsed_as_protobuf(records):
    out = hd.io.parse_example(records, SPEC)
    x, y = protobuf_values(records)
    assert out["x"].dtype == np.float32 and out["x"].tobytes() == x.tobytes()
    assert out["y"].dtype == np.int64 and out["y"].tolist() == y.tolist()


def test_one_layout_is_read_from_the_bytes_with_protobufs_values():
    records = batch(32)
    assert sorted(dense_columns(records, WANTED)) == ["x", "y"]  # the shortcut applied
    assert_parsed_as_protobuf(records)


def test_the_layout_names_the_keys_and_the_packed_value_bytes():
    layout = read_layout(example([1.0] * 6, [5]))
    assert layout is not None
    assert {k: (f.kind, f.stop - f.start) for k, f in layout.fields.items()} == {
        "x": ("float_list", 24),
        "y": ("int64_list", 1),
    }


@pytest.mark.parametrize(
    "case",
    ["wide varints", "negative", "other key", "other length", "small batch", "extra key"],
)
def test_batches_the_shortcut_leaves_to_protobuf_parse_the_same(case):
    records = batch(16)
    if case == "wide varints":
        records = batch(16, labels=[200 + i for i in range(16)])  # 2-byte varints, one length
    elif case == "negative":
        records = batch(16, labels=[-1] * 16)  # a 10-byte varint
    elif case == "other key":
        records[5] = example([0.5] * 6, [3], x_key="q")  # same length, another key
    elif case == "other length":
        records[7] = example([0.5] * 6, [300])
    elif case == "small batch":
        records = records[: MIN_BATCH - 1]
    elif case == "extra key":
        records[3] = example([0.5] * 6, [3], extra={"z": b"same length?"})
    columns = dense_columns(records, WANTED)
    if case in ("wide varints", "negative"):
        assert columns is not None and "y" not in columns  # x still from the bytes
    else:
        assert columns is None
    if case == "other key":
        with pytest.raises(InvalidArgumentError, match=r"example 5 .* feature 'x' .* required"):
            hd.io.parse_example(records, SPEC)
        return
    assert_parsed_as_protobuf(records)


def test_wrong_count_or_type_in_one_layout_still_raises_as_before():
    records = batch(16)
    wrong_count = {"x": hd.io.FixedLenFeature([5], hd.float32)}
    with pytest.raises(InvalidArgumentError, match=r"feature 'x': number of float values"):
        hd.io.parse_example(records, wrong_count)
    wrong_type = {"y": hd.io.FixedLenFeature([], hd.float32)}
    with pytest.raises(InvalidArgumentError, match=r"feature 'y': data types don't match"):
        hd.io.parse_example(records, wrong_type)
    missing = {"w": hd.io.FixedLenFeature([], hd.int64)}
    with pytest.raises(InvalidArgumentError, match=r"feature 'w' .* is required"):
        hd.io.parse_example(records, missing)
    defaulted = hd.io.parse_example(records, {"w": hd.io.FixedLenFeature([], hd.int64, 9)})
    assert defaulted["w"].tolist() == [9] * 16


def test_corrupt_bytes_are_never_taken_as_a_layout():
    good = example([1.0] * 6, [5])
    for cut in range(1, len(good)):
        assert read_layout(good[:cut]) is None  # truncated anywhere: not a layout
    assert read_layout(b"\xff" * 40) is None
    assert read_layout(b"") is None
