"""TFRecord files and tf.train.Example parsing against TensorFlow 2.21.

Files written by TF (plain, GZIP, ZLIB; Examples with float, int64, bytes and var-len features)
are read back by hpcdist record for record and parsed to the same arrays, and files written by
hpcdist are read by ``tf.data.TFRecordDataset`` and ``tf.io.parse_single_example`` /
``parse_example``; interleaved reads, defaults, shapes and the bad-input errors are compared
case by case.
"""

import contextlib
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import descriptor_pb2

import hpcdist.io as hdio
from hpcdist.data.tfrecord import TFRecordDataset
from hpcdist.data.tfrecord_format import masked_crc32c
from hpcdist.errors import DataLossError, InvalidArgumentError, NotFoundError
from hpcdist.io import example_proto
from tests.conformance.helpers import tf

COMPRESSIONS = [None, "GZIP", "ZLIB"]


def tf_example(i):
    feature = tf.train.Feature
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "x": feature(float_list=tf.train.FloatList(value=[i + 0.5, -i / 3, 1e-7 * i])),
                "label": feature(int64_list=tf.train.Int64List(value=[i * 1_000_000_007])),
                "name": feature(bytes_list=tf.train.BytesList(value=[f"ex{i}".encode()])),
                "tags": feature(int64_list=tf.train.Int64List(value=list(range(i % 4)))),
                "weights": feature(float_list=tf.train.FloatList(value=[0.25] * (i % 3))),
                "words": feature(bytes_list=tf.train.BytesList(value=[b"w"] * (i % 2))),
                "seq": feature(float_list=tf.train.FloatList(value=[float(i)] * (2 * (i % 3)))),
            }
        )
    ).SerializeToString()


def spec(side):
    io = tf.io if side == "tf" else hdio
    dt = tf if side == "tf" else np
    string = tf.string if side == "tf" else object
    return {
        "x": io.FixedLenFeature([3], dt.float32),
        "label": io.FixedLenFeature([], dt.int64),
        "name": io.FixedLenFeature([1], string),
        "missing": io.FixedLenFeature([2, 1], dt.int64, default_value=[[4], [5]]),
        "absent": io.FixedLenFeature([], string, default_value="none"),
        "tags": io.VarLenFeature(dt.int64),
        "weights": io.VarLenFeature(dt.float32),
        "words": io.VarLenFeature(string),
        "seq": io.FixedLenSequenceFeature([2], dt.float32, allow_missing=True, default_value=-1),
    }


def plain(value):
    """A parse result as numpy: a SparseTensor as (indices, values, dense_shape)."""
    if isinstance(value, tf.sparse.SparseTensor):
        return [value.indices.numpy(), value.values.numpy(), value.dense_shape.numpy()]
    if isinstance(value, hdio.SparseTensorValue):
        return [value.indices, value.values, value.dense_shape]
    value = value.numpy() if hasattr(value, "numpy") else value
    return [np.array(value, dtype=object) if isinstance(value, bytes) else value]


def assert_same_parse(tf_out, hd_out):
    assert sorted(tf_out) == sorted(hd_out)
    for key in tf_out:
        for a, b in zip(plain(tf_out[key]), plain(hd_out[key]), strict=True):
            assert a.shape == b.shape, key
            assert a.dtype == b.dtype, (key, a.dtype, b.dtype)
            assert a.tolist() == b.tolist(), key  # exact, float32 bits included


SERIALIZED = [tf_example(i) for i in range(7)]


def test_messages_are_tfs_descriptors():
    from tensorflow.core.example import example_pb2, feature_pb2  # only with TF installed

    for module, names in (
        (feature_pb2, ["BytesList", "FloatList", "Int64List", "Feature", "Features"]),
        (feature_pb2, ["FeatureList", "FeatureLists"]),
        (example_pb2, ["Example", "SequenceExample"]),
    ):
        for name in names:
            theirs, ours = descriptor_pb2.DescriptorProto(), descriptor_pb2.DescriptorProto()
            getattr(module, name).DESCRIPTOR.CopyToProto(theirs)
            getattr(example_proto, name).DESCRIPTOR.CopyToProto(ours)
            for message in (theirs, ours):
                for field in [*message.field, *(f for n in message.nested_type for f in n.field)]:
                    field.ClearField("json_name")
            assert theirs == ours, name


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_tf_written_files_read_and_parsed_by_hpcdist(tmp_path, compression):
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type=compression)) as w:
        for record in SERIALIZED:
            w.write(record)
    records = list(TFRecordDataset(path, compression_type=compression))
    assert records == SERIALIZED
    tf_records = [r.numpy() for r in tf.data.TFRecordDataset(path, compression)]
    assert records == tf_records
    for record in records:
        assert_same_parse(
            tf.io.parse_single_example(record, spec("tf")),
            hdio.parse_single_example(record, spec("hd")),
        )
    assert_same_parse(
        tf.io.parse_example(tf.constant(records), spec("tf")),
        hdio.parse_example(records, spec("hd")),
    )


def hd_example(i):
    proto = example_proto.Example()
    feature = proto.features.feature
    feature["x"].float_list.value.extend([i / 7, 2.0**-i, -3.0])
    feature["label"].int64_list.value.append(-(2**62) + i)
    feature["name"].bytes_list.value.append(bytes([i, 0, 255]))
    feature["tags"].int64_list.value.extend(range(i % 3))
    feature["weights"].float_list.value.extend([1.5] * (i % 4))
    if i % 2:
        feature["words"].bytes_list.value.extend([b"a", b"bc"])
    if i % 3:
        feature["seq"].float_list.value.extend([0.5, float(i)] * i)
    return proto.SerializeToString()


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_hpcdist_written_files_read_and_parsed_by_tf(tmp_path, compression):
    path = str(tmp_path / "hd.tfrecord")
    serialized = [hd_example(i) for i in range(6)] + [b"", b"raw bytes"]
    with hdio.TFRecordWriter(path, hdio.TFRecordOptions(compression)) as writer:
        for record in serialized:
            writer.write(record)
    tf_records = [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type=compression)]
    assert tf_records == serialized
    examples = serialized[:6]
    for record in examples:
        assert_same_parse(
            tf.io.parse_single_example(record, spec("tf")),
            hdio.parse_single_example(record, spec("hd")),
        )
    assert_same_parse(
        tf.io.parse_example(tf.constant(examples), spec("tf")),
        hdio.parse_example(examples, spec("hd")),
    )


def write_files(tmp_path, sizes):
    files = []
    for k, size in enumerate(sizes):
        path = str(tmp_path / f"f{k}")
        with hdio.TFRecordWriter(path) as writer:
            for j in range(size):
                writer.write(f"{k}-{j}")
        files.append(path)
    return files


@pytest.mark.parametrize("reads", [None, 1, 2, 3, 5])
def test_interleaved_reads_in_tfs_order(tmp_path, reads):
    files = write_files(tmp_path, [3, 1, 0, 4, 2])
    expected = [r.numpy() for r in tf.data.TFRecordDataset(files, num_parallel_reads=reads)]
    assert list(TFRecordDataset(files, num_parallel_reads=reads)) == expected


def hd_records(path):
    """The records before the first fault, read with hpcdist."""
    got = []
    with contextlib.suppress(DataLossError):
        for record in TFRecordDataset(str(path)):
            got.append(record)
    return got


def records_until_error(dataset, error):
    got = []
    with pytest.raises(error) as info:
        for record in dataset:
            got.append(record.numpy() if hasattr(record, "numpy") else record)
    return got, info


@pytest.mark.parametrize(
    "damage",
    ["data-crc", "length-crc", "huge-length", "cut-header", "cut-data", "cut-gzip"],
)
def test_bad_files_fail_as_tf_after_the_same_records(tmp_path, damage):
    path = tmp_path / "bad"
    compression = "GZIP" if damage == "cut-gzip" else None
    with hdio.TFRecordWriter(str(path), compression) as writer:
        for i in range(200):
            writer.write(f"record {i}".encode() * 20)
    data = bytearray(path.read_bytes())
    size = 12 + len(b"record 0" * 20) + 4
    at = 3 * size  # record 3 (all records before it have the same size)
    if damage == "data-crc":
        data[at + 12 + 5] ^= 1
    elif damage == "length-crc":
        data[at + 9] ^= 1
    elif damage == "huge-length":
        header = (1 << 40).to_bytes(8, "little")
        data[at : at + 12] = header + masked_crc32c(header).to_bytes(4, "little")
    elif damage == "cut-header":
        data = data[: at + 7]
    elif damage == "cut-data":
        data = data[: at + 40]
    else:
        data = data[: len(data) // 2]
    path.write_bytes(bytes(data))
    if damage == "huge-length":  # TF 2.21 dies with a segmentation fault reading this file
        hd_got, info = records_until_error(TFRecordDataset(str(path)), DataLossError)
        assert len(hd_got) == 3 and f"byte offset {at}" in str(info.value)
        assert str(1 << 40) in str(info.value)
        return
    if damage == "cut-header":  # TF ends the file there without an error; hpcdist raises
        assert [r.numpy() for r in tf.data.TFRecordDataset(str(path))] == hd_records(path)
        hd_got, info = records_until_error(TFRecordDataset(str(path)), DataLossError)
        assert len(hd_got) == 3 and "truncated record at byte offset" in str(info.value)
        return
    tf_got, _ = records_until_error(
        tf.data.TFRecordDataset(str(path), compression), tf.errors.DataLossError
    )
    hd_got, info = records_until_error(TFRecordDataset(str(path), compression), DataLossError)
    assert str(path) in str(info.value)
    if damage == "cut-gzip":  # TF stops at its last complete buffer; hpcdist at its last record
        assert len(hd_got) >= len(tf_got) > 0
        assert hd_got[: len(tf_got)] == tf_got
    else:
        assert hd_got == tf_got and len(hd_got) == 3
        assert f"byte offset {at}" in str(info.value)


def test_missing_file_is_not_found_on_both_sides(tmp_path):
    files = [*write_files(tmp_path, [2]), str(tmp_path / "nope")]
    tf_got, _ = records_until_error(tf.data.TFRecordDataset(files), tf.errors.NotFoundError)
    hd_got, _ = records_until_error(TFRecordDataset(files), NotFoundError)
    assert hd_got == tf_got == [b"0-0", b"0-1"]


def test_parse_errors_are_invalid_argument_on_both_sides():
    int_x = tf.train.Example(
        features=tf.train.Features(
            feature={"x": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2, 3]))}
        )
    ).SerializeToString()
    short_x = tf.train.Example(
        features=tf.train.Features(
            feature={"x": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0]))}
        )
    ).SerializeToString()
    for record in (int_x, short_x, tf.train.Example().SerializeToString()):
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.io.parse_single_example(record, {"x": tf.io.FixedLenFeature([3], tf.float32)})
        with pytest.raises(InvalidArgumentError, match="'x'"):
            hdio.parse_single_example(record, {"x": hdio.FixedLenFeature([3], np.float32)})


def test_feature_with_no_list_parses_as_tf():
    record = tf.train.Example(
        features=tf.train.Features(feature={"v": tf.train.Feature(), "d": tf.train.Feature()})
    ).SerializeToString()
    tf_spec = {
        "v": tf.io.VarLenFeature(tf.float32),
        "d": tf.io.FixedLenFeature([2], tf.int64, default_value=[7, 8]),
    }
    hd_spec = {
        "v": hdio.VarLenFeature(np.float32),
        "d": hdio.FixedLenFeature([2], np.int64, default_value=[7, 8]),
    }
    assert_same_parse(
        tf.io.parse_single_example(record, tf_spec), hdio.parse_single_example(record, hd_spec)
    )
    # without a default, such a feature is missing: required on both sides
    with pytest.raises(tf.errors.InvalidArgumentError, match="required"):
        tf.io.parse_single_example(record, {"d": tf.io.FixedLenFeature([0], tf.int64)})
    with pytest.raises(InvalidArgumentError, match="required"):
        hdio.parse_single_example(record, {"d": hdio.FixedLenFeature([0], np.int64)})


def test_records_match_tfs_bytes_on_disk(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    with hdio.TFRecordWriter(str(ours)) as writer:
        for record in SERIALIZED:
            writer.write(record)
    with tf.io.TFRecordWriter(str(theirs)) as writer:
        for record in SERIALIZED:
            writer.write(record)
    assert Path(ours).read_bytes() == Path(theirs).read_bytes()


def uniform_tf_examples(count, label_step):
    """Records as one writer makes them: 16 floats, a label ``i * label_step % 128`` (one
    layout for all) or ``i * label_step`` (a step of 1000: varints of 1 to 3 bytes), 2 ids."""
    rng = np.random.default_rng(count)
    feature = tf.train.Feature
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, 3.4e38], np.float32)
    out = []

    def label(i):
        return i * label_step % 128 if label_step == 1 else i * label_step

    for i in range(count):
        x = rng.standard_normal(16).astype(np.float32)
        x[i % 16] = special[i % len(special)]
        example = tf.train.Example(
            features=tf.train.Features(
                feature={
                    "x": feature(float_list=tf.train.FloatList(value=x)),
                    "label": feature(int64_list=tf.train.Int64List(value=[label(i)])),
                    "ids": feature(int64_list=tf.train.Int64List(value=[i % 7, 100])),
                }
            )
        )
        out.append(example.SerializeToString())
    return out


@pytest.mark.parametrize("label_step", [1, 1000], ids=["one-byte-labels", "wide-labels"])
def test_batches_of_one_layout_parse_as_tf(label_step):
    # 64 TF-written records of one layout: hpcdist reads their numbers straight from the bytes
    # (hpcdist.io.layout) for one-byte varints, through protobuf for the wide labels.
    records = uniform_tf_examples(64, label_step)
    assert len({len(r) for r in records}) == (1 if label_step == 1 else 3)

    def features(side):
        io = tf.io if side == "tf" else hdio
        dt = tf if side == "tf" else np
        return {
            "x": io.FixedLenFeature([4, 4], dt.float32),
            "label": io.FixedLenFeature([], dt.int64),
            "ids": io.FixedLenFeature([2], dt.int64),
            "absent": io.FixedLenFeature([1], dt.float32, default_value=[7.0]),
        }

    tf_out = tf.io.parse_example(tf.constant(records), features("tf"))
    hd_out = hdio.parse_example(records, features("hd"))
    for key in tf_out:
        a, b = tf_out[key].numpy(), hd_out[key]
        assert a.shape == b.shape and a.dtype == b.dtype, key
        assert a.tobytes() == b.tobytes(), key  # bit for bit: NaN, -0.0 and denormals included
