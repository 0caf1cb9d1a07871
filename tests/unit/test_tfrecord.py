"""TFRecord files and ``tf.train.Example`` parsing: format, round trips, order, bad input.

The record framing is checked byte for byte against TensorBoard's own ``RecordWriter`` (an
independent implementation of TF's format) where the ``tensorboard`` extra is installed; the
files written by and read back from TensorFlow itself are in tests/conformance/test_tfrecord.py.
"""

from __future__ import annotations

import gzip
import io
import struct
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

import hpcdist.io as hdio
from hpcdist.data import Dataset
from hpcdist.data.tfrecord import TFRecordDataset
from hpcdist.data.tfrecord_format import encode_record, masked_crc32c
from hpcdist.errors import DataLossError, HpcdistError, InvalidArgumentError, NotFoundError
from hpcdist.io.example_proto import Example

RECORDS = [b"", b"a", b"hello world", bytes(range(256)) * 40, b"\x00" * 7]


def write(path, records, options=None):
    with hdio.TFRecordWriter(str(path), options) as writer:
        for record in records:
            writer.write(record)
    return str(path)


def read(path, **kwargs):
    return list(TFRecordDataset(str(path), **kwargs))


# -- the format ---------------------------------------------------------------------------------


def test_masked_crc_is_tfs_mask():
    # crc32c(b"123456789") is the standard check value 0xE3069283
    expected = (((0xE3069283 >> 15) | (0xE3069283 << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    assert masked_crc32c(b"123456789") == expected


def test_record_layout():
    data = b"payload"
    block = encode_record(data)
    assert len(block) == 12 + len(data) + 4
    assert struct.unpack("<Q", block[:8])[0] == len(data)
    assert struct.unpack("<I", block[8:12])[0] == masked_crc32c(block[:8])
    assert block[12:-4] == data
    assert struct.unpack("<I", block[-4:])[0] == masked_crc32c(data)


def test_framing_is_tensorboards_record_writer():
    record_writer = pytest.importorskip("tensorboard.summary.writer.record_writer")
    sink = io.BytesIO()
    writer = record_writer.RecordWriter(sink)
    for record in RECORDS:
        writer.write(record)
    writer.flush()
    assert sink.getvalue() == b"".join(encode_record(r) for r in RECORDS)


@pytest.mark.parametrize("compression", [None, "", "GZIP", "ZLIB"])
def test_round_trip(tmp_path, compression):
    path = write(tmp_path / "r.tfrecord", RECORDS, hdio.TFRecordOptions(compression))
    assert read(path, compression_type=compression) == RECORDS
    assert read(path, compression_type=compression, buffer_size=3) == RECORDS


def test_compressed_files_are_the_compressed_plain_stream(tmp_path):
    write(tmp_path / "p", RECORDS)
    write(tmp_path / "g", RECORDS, "GZIP")
    write(tmp_path / "z", RECORDS, "ZLIB")
    plain = (tmp_path / "p").read_bytes()
    assert gzip.decompress((tmp_path / "g").read_bytes()) == plain
    assert zlib.decompress((tmp_path / "z").read_bytes()) == plain


def test_concatenated_gzip_members_read_as_one_stream(tmp_path):
    path = tmp_path / "two.gz"
    path.write_bytes(
        gzip.compress(b"".join(encode_record(r) for r in RECORDS[:2]))
        + gzip.compress(b"".join(encode_record(r) for r in RECORDS[2:]))
    )
    assert read(path, compression_type="GZIP") == RECORDS


def test_writer_options_and_strings(tmp_path):
    options = hdio.TFRecordOptions("gzip", compression_level=9, mem_level=8, window_bits=12)
    assert options.compression_type == "GZIP"
    path = write(tmp_path / "s", ["text", "ünï"], options)
    assert read(path, compression_type="GZIP") == [b"text", "ünï".encode()]
    assert hdio.TFRecordOptions.get_compression_type_string(None) == ""
    assert hdio.TFRecordOptions.get_compression_type_string(hdio.TFRecordCompressionType.ZLIB)
    with pytest.raises(InvalidArgumentError, match="BZ2"):
        hdio.TFRecordOptions("BZ2")
    with pytest.raises(InvalidArgumentError, match="zlib settings"):
        hdio.TFRecordWriter(str(tmp_path / "bad"), hdio.TFRecordOptions("ZLIB", mem_level=99))


def test_writer_flush_and_close(tmp_path):
    writer = hdio.TFRecordWriter(str(tmp_path / "f"), "GZIP")
    writer.write(b"one")
    writer.flush()  # a sync flush: what was written so far decompresses
    partial = zlib.decompressobj(31).decompress((tmp_path / "f").read_bytes())
    assert partial == encode_record(b"one")
    writer.close()
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"two")


def test_writer_missing_directory(tmp_path):
    with pytest.raises(NotFoundError, match="no-such-dir"):
        hdio.TFRecordWriter(str(tmp_path / "no-such-dir" / "f"))


# -- the dataset --------------------------------------------------------------------------------


def three_files(tmp_path):
    return [
        write(tmp_path / "a", [b"a0", b"a1", b"a2"]),
        write(tmp_path / "b", [b"b0"]),
        write(tmp_path / "c", [b"c0", b"c1"]),
    ]


def test_files_in_order_and_interleaved(tmp_path):
    files = three_files(tmp_path)
    assert read_all(TFRecordDataset(files)) == [b"a0", b"a1", b"a2", b"b0", b"c0", b"c1"]
    # TF's interleave, cycle 2, block 1: a new file takes the place of one that ended
    two = TFRecordDataset(files, num_parallel_reads=2)
    assert read_all(two) == [b"a0", b"b0", b"a1", b"a2", b"c0", b"c1"]
    three = TFRecordDataset(files, num_parallel_reads=3)
    assert read_all(three) == [b"a0", b"b0", b"c0", b"a1", b"c1", b"a2"]
    assert read_all(TFRecordDataset(files, num_parallel_reads=-1)) != []


def read_all(dataset):
    return list(dataset)


def test_filenames_from_a_dataset_and_paths(tmp_path):
    files = three_files(tmp_path)
    names = Dataset.from_tensor_slices(np.array(files))
    dataset = TFRecordDataset(names)
    assert dataset.files is None and dataset.filenames is names
    assert read_all(dataset)[:2] == [b"a0", b"a1"]
    assert read_all(TFRecordDataset(tmp_path / "b")) == [b"b0"]
    assert read_all(TFRecordDataset([files[1].encode()])) == [b"b0"]
    assert read_all(TFRecordDataset([])) == []


def test_dataset_shape_of_the_api(tmp_path):
    files = three_files(tmp_path)
    dataset = TFRecordDataset(files)
    assert isinstance(dataset, Dataset)
    assert dataset.cardinality() == -2  # UNKNOWN, as TF
    assert dataset.files == tuple(files)
    assert read_all(dataset.with_filenames(files[2:])) == [b"c0", b"c1"]
    assert read_all(dataset.take(2).repeat(2)) == [b"a0", b"a1"] * 2
    assert read_all(dataset.batch(4))[0].tolist() == [b"a0", b"a1", b"a2", b"b0"]
    with pytest.raises(TypeError, match="string"):
        TFRecordDataset([1, 2])
    with pytest.raises(InvalidArgumentError, match="compression"):
        TFRecordDataset(files, compression_type="LZ4")
    with pytest.raises(InvalidArgumentError, match="buffer_size"):
        TFRecordDataset(files, buffer_size=0)
    with pytest.raises(InvalidArgumentError, match="num_parallel_reads"):
        TFRecordDataset(files, num_parallel_reads=0)


# -- bad input ------------------------------------------------------------------------------------


def corrupt(path, offset, value=0xFF):
    data = bytearray(Path(path).read_bytes())
    data[offset] ^= value
    Path(path).write_bytes(bytes(data))


def offset_of(index, records=RECORDS):
    return sum(12 + len(r) + 4 for r in records[:index])


def read_until_error(dataset):
    got = []
    with pytest.raises(DataLossError) as info:
        for record in dataset:
            got.append(record)
    return got, str(info.value)


def test_data_loss_error_class():
    assert issubclass(DataLossError, HpcdistError)
    assert DataLossError.__name__ == "DataLossError"


def test_corrupt_data_after_the_good_records(tmp_path):
    path = write(tmp_path / "r", RECORDS)
    corrupt(path, offset_of(2) + 12 + 3)  # a byte of record 2's data
    got, message = read_until_error(TFRecordDataset(path))
    assert got == RECORDS[:2]
    assert path in message and f"byte offset {offset_of(2)}" in message and "data" in message


def test_corrupt_length_and_its_crc(tmp_path):
    path = write(tmp_path / "r", RECORDS)
    corrupt(path, offset_of(3) + 1)  # the length field of record 3
    got, message = read_until_error(TFRecordDataset(path))
    assert got == RECORDS[:3]
    assert f"byte offset {offset_of(3)}" in message and "length" in message
    path = write(tmp_path / "s", RECORDS)
    corrupt(path, offset_of(1) + 8)  # the length's CRC of record 1
    got, message = read_until_error(TFRecordDataset(path))
    assert got == RECORDS[:1] and f"byte offset {offset_of(1)}" in message


def huge_length_record(length):
    header = struct.pack("<Q", length)
    return header + struct.pack("<I", masked_crc32c(header)) + b"tiny"


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_length_beyond_the_file_is_data_loss_not_an_allocation(tmp_path, compression):
    stream = b"".join(encode_record(r) for r in RECORDS[:2]) + huge_length_record(1 << 50)
    path = tmp_path / "huge"
    path.write_bytes(gzip.compress(stream) if compression else stream)
    tracemalloc.start()
    try:
        got, message = read_until_error(TFRecordDataset(str(path), compression_type=compression))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == RECORDS[:2]
    assert f"byte offset {offset_of(2)}" in message and str(1 << 50) in message
    assert peak < 64 << 20


@pytest.mark.parametrize("cut", [5, 12 + 2, 12 + 11 + 2])
def test_truncated_file(tmp_path, cut):
    path = write(tmp_path / "r", [b"first", b"hello world"])
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: offset_of(1, [b"first"]) + cut])
    got, message = read_until_error(TFRecordDataset(path))
    assert got == [b"first"] and "truncated" in message and "byte offset 21" in message


def test_truncated_and_corrupt_gzip(tmp_path):
    path = write(tmp_path / "g", [bytes(1000)] * 50, "GZIP")
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[:-6])  # the trailer's CRC and size cut off
    got, message = read_until_error(TFRecordDataset(path, compression_type="GZIP"))
    assert len(got) >= 49 and "truncated" in message and path in message
    Path(path).write_bytes(data[:10] + b"\xff" * 20 + data[30:])
    with pytest.raises(DataLossError, match="corrupt compressed data"):
        read_all(TFRecordDataset(path, compression_type="GZIP"))
    plain = write(tmp_path / "p", [b"x"])  # plain bytes read as ZLIB
    with pytest.raises(DataLossError, match=plain):
        read_all(TFRecordDataset(plain, compression_type="ZLIB"))


def test_missing_file_after_the_files_before_it(tmp_path):
    files = [write(tmp_path / "a", [b"a0"]), str(tmp_path / "missing")]
    got = []
    with pytest.raises(NotFoundError, match="missing"):
        for record in TFRecordDataset(files):
            got.append(record)
    assert got == [b"a0"]
    assert issubclass(NotFoundError, FileNotFoundError)


# -- parsing --------------------------------------------------------------------------------------


def example(**features):
    proto = Example()
    for key, value in features.items():
        feature = proto.features.feature[key]
        if value is None:
            feature.SetInParent()
        elif isinstance(value[0], bytes):
            feature.bytes_list.value.extend(value)
        elif isinstance(value[0], float):
            feature.float_list.value.extend(value)
        else:
            feature.int64_list.value.extend(value)
    return proto.SerializeToString()


SPEC = {
    "x": hdio.FixedLenFeature([2, 2], np.float32),
    "label": hdio.FixedLenFeature([], np.int64),
    "name": hdio.FixedLenFeature([], object, default_value=b"none"),
    "tags": hdio.VarLenFeature(np.int64),
}


def test_parse_single_example():
    out = hdio.parse_single_example(
        example(x=[1.0, 2.0, 3.5, 4.0], label=[7], tags=[3, 1, 4]), SPEC
    )
    assert out["x"].dtype == np.float32 and out["x"].tolist() == [[1, 2], [3.5, 4]]
    assert out["label"].dtype == np.int64 and out["label"].shape == () and out["label"] == 7
    assert out["name"].dtype == object and out["name"] == b"none"
    tags = out["tags"]
    assert isinstance(tags, hdio.SparseTensorValue)
    assert tags.values.tolist() == [3, 1, 4] and tags.values.dtype == np.int64
    assert tags.indices.tolist() == [[0], [1], [2]] and tags.dense_shape.tolist() == [3]


def test_parse_example_batch():
    batch = [
        example(x=[1.0] * 4, label=[1], name=[b"a"], tags=[5]),
        example(x=[2.0] * 4, label=[2]),
        example(x=[3.0] * 4, label=[3], tags=[6, 7]),
    ]
    out = hdio.parse_example(np.array(batch, dtype=object), SPEC)
    assert out["x"].shape == (3, 2, 2) and out["x"][:, 0, 0].tolist() == [1, 2, 3]
    assert out["label"].tolist() == [1, 2, 3]
    assert out["name"].tolist() == [b"a", b"none", b"none"]
    tags = out["tags"]
    assert tags.indices.tolist() == [[0, 0], [2, 0], [2, 1]]
    assert tags.values.tolist() == [5, 6, 7] and tags.dense_shape.tolist() == [3, 2]
    empty = hdio.parse_example([], SPEC)
    assert empty["x"].shape == (0, 2, 2) and empty["tags"].indices.shape == (0, 2)


def test_sequence_feature_and_string_values():
    spec = {
        "seq": hdio.FixedLenSequenceFeature([2], np.float32, allow_missing=True),
        "words": hdio.VarLenFeature("string"),
    }
    out = hdio.parse_example(
        [example(seq=[1.0, 2.0, 3.0, 4.0], words=[b"x", b"yy"]), example()], spec
    )
    assert out["seq"].shape == (2, 2, 2) and out["seq"][1].tolist() == [[0, 0], [0, 0]]
    assert out["words"].values.tolist() == [b"x", b"yy"]
    single = hdio.parse_single_example(example(seq=[1.0, 2.0]), spec)
    assert single["seq"].tolist() == [[1.0, 2.0]]
    with pytest.raises(InvalidArgumentError, match=r"'seq'.*multiple"):
        hdio.parse_single_example(example(seq=[1.0, 2.0, 3.0]), spec)
    required = {"seq": hdio.FixedLenSequenceFeature([], np.int64)}
    with pytest.raises(InvalidArgumentError, match=r"'seq'.*required"):
        hdio.parse_single_example(example(), required)


def test_parse_errors_name_the_feature():
    with pytest.raises(InvalidArgumentError, match=r"'label'.*required"):
        hdio.parse_single_example(example(x=[1.0] * 4), SPEC)
    with pytest.raises(InvalidArgumentError, match=r"'x'.*holds int64.*expects float"):
        hdio.parse_single_example(example(x=[1, 2, 3, 4], label=[1]), SPEC)
    with pytest.raises(InvalidArgumentError, match=r"'x'.*holds 3.*needs 4"):
        hdio.parse_single_example(example(x=[1.0, 2.0, 3.0], label=[1]), SPEC)
    with pytest.raises(InvalidArgumentError, match=r"example 1.*'label'"):
        hdio.parse_example([example(x=[1.0] * 4, label=[1]), example(x=[1.0] * 4)], SPEC)
    with pytest.raises(InvalidArgumentError, match="could not parse"):
        hdio.parse_single_example(b"\xff\xff\xff", SPEC)
    with pytest.raises(TypeError, match=r"hd.float32, hd.int64 or hd.string"):
        hdio.parse_single_example(example(), {"a": hdio.FixedLenFeature([], np.int32)})
    with pytest.raises(ValueError, match="default_value has 1 elements"):
        hdio.parse_single_example(example(), {"a": hdio.FixedLenFeature([3], np.float32, 0.0)})
    with pytest.raises(ValueError, match="parse_example"):
        hdio.parse_single_example([example()], SPEC)
    with pytest.raises(ValueError, match="parse_single_example"):
        hdio.parse_example(example(), SPEC)


def test_defaults_and_empty_feature():
    spec = {"v": hdio.FixedLenFeature([3], np.float32, default_value=[1.0, 2.0, 3.0])}
    assert hdio.parse_single_example(example(), spec)["v"].tolist() == [1, 2, 3]
    varlen = {"v": hdio.VarLenFeature(np.float32)}
    out = hdio.parse_single_example(example(v=None), varlen)["v"]
    assert out.values.shape == (0,) and out.values.dtype == np.float32
    with pytest.raises(InvalidArgumentError, match="required"):  # a Feature with no list
        hdio.parse_single_example(example(v=None), {"v": hdio.FixedLenFeature([0], np.int64)})


def test_read_and_parse_pipeline(tmp_path):
    records = [example(x=[float(i)] * 4, label=[i]) for i in range(10)]
    path = write(tmp_path / "e", records, "GZIP")
    mapped = TFRecordDataset(path, compression_type="GZIP").map(
        lambda r: hdio.parse_single_example(r, SPEC)
    )
    assert [int(e["label"]) for e in mapped] == list(range(10))
    dataset = TFRecordDataset(path, compression_type="GZIP")
    assert hdio.parse_example(list(dataset), SPEC)["label"].tolist() == list(range(10))


def test_batched_records_keep_their_bytes(tmp_path):
    records = [example(x=[float(i)] * 4, label=[i]) for i in range(10)]
    path = write(tmp_path / "e", records)
    batches = list(TFRecordDataset(path).batch(4))
    assert [list(b) for b in batches] == [records[:4], records[4:8], records[8:]]
    labels = [hdio.parse_example(b, SPEC)["label"].tolist() for b in batches]
    assert labels == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
