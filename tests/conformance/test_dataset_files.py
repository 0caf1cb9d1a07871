"""File pipelines, composition ops and auto-sharding against TensorFlow 2.21.

The same pipelines are built on both sides over the same TFRecord files and must give the same
elements and cardinalities; errors are compared by class. TF's auto-shard rewrite is driven in
one process through its ``_AutoShardDataset`` (what ``experimental_distribute_dataset`` inserts
for worker ``i`` of ``n``), with the policy set by ``Options``, and compared case by case with
`hpcdist.data.autoshard.auto_shard` for AUTO/FILE/DATA/OFF at 1-3 workers over enough and too
few files.
"""

from __future__ import annotations

import numpy as np
import pytest

import hpcdist.data as hdd
import hpcdist.io as hdio
from hpcdist.data.autoshard import auto_shard
from hpcdist.errors import InvalidArgumentError, NotFoundError
from tests.conformance.helpers import assert_documented, tf

_AutoShardDataset = pytest.importorskip(
    "tensorflow.python.data.experimental.ops.distribute"
)._AutoShardDataset

RECORDS = 3


def plain(value):
    """Elements as plain Python: bytes stay bytes, arrays become (nested) lists."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, tf.Tensor):
        value = value.numpy()
    array = np.asarray(value)
    if array.dtype == object:
        return array.tolist()
    return array.tolist() if array.ndim else array.item()


def elements(dataset):
    return [plain(x) for x in dataset]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Four TFRecord files written by TF: file k holds b"k-0", b"k-1", b"k-2"."""
    directory = tmp_path_factory.mktemp("records")
    out = []
    for k in range(4):
        path = str(directory / f"part-{k}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for j in range(RECORDS):
                writer.write(f"{k}-{j}".encode())
        out.append(path)
    return out


def pipelines(files):
    """name -> (TF builder, hpcdist builder): the same pipeline on each side."""
    pattern = files[0].replace("part-0", "part-*")

    def both(fn):
        return (lambda: fn(tf.data, tf.data.TFRecordDataset), lambda: fn(hdd, hdd.TFRecordDataset))

    return {
        "TFRecordDataset(4 files)": both(lambda d, reader: reader(files)),
        "TFRecordDataset(2 files)": both(lambda d, reader: reader(files[:2])),
        "TFRecordDataset(1 file)": both(lambda d, reader: reader(files[:1])),
        "list_files.interleave": both(
            lambda d, reader: d.Dataset.list_files(pattern, shuffle=False).interleave(
                reader, cycle_length=2
            )
        ),
        "TFRecordDataset(list_files)": both(
            lambda d, reader: reader(d.Dataset.list_files(pattern, shuffle=False))
        ),
        "from_tensor_slices(2 names).interleave": both(
            lambda d, reader: d.Dataset.from_tensor_slices(files[:2]).interleave(reader)
        ),
        "list_files.flat_map.map.batch": both(
            lambda d, reader: (
                d.Dataset.list_files(pattern, shuffle=False)
                .flat_map(reader)
                .map(lambda x: x)
                .batch(2)
            )
        ),
        "range": both(lambda d, reader: d.Dataset.range(7)),
        "range.batch": both(lambda d, reader: d.Dataset.range(7).batch(2)),
        "list_files alone": both(lambda d, reader: d.Dataset.list_files(pattern, shuffle=False)),
    }


POLICIES = ["AUTO", "FILE", "DATA", "OFF"]
SHARD_CASES = [(n, i) for n in (1, 2, 3) for i in range(n)]
TOO_FEW = "docs/differences-from-tensorflow.md: FILE sharding with fewer files than workers"


def with_policy(dataset, module, policy):
    options = module.Options()
    options.experimental_distribute.auto_shard_policy = getattr(
        module.experimental.AutoShardPolicy if module is tf.data else module.AutoShardPolicy,
        policy,
    )
    return dataset.with_options(options)


def outcome(run):
    try:
        return elements(run())
    except Exception as exc:
        return exc


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(
    "name",
    [
        "TFRecordDataset(4 files)",
        "TFRecordDataset(2 files)",
        "TFRecordDataset(1 file)",
        "list_files.interleave",
        "TFRecordDataset(list_files)",
        "from_tensor_slices(2 names).interleave",
        "list_files.flat_map.map.batch",
        "range",
        "range.batch",
        "list_files alone",
    ],
)
def test_auto_shard_decisions_match_tf(files, name, policy):
    make_tf, make_hd = pipelines(files)[name]
    for n in (1, 2, 3):
        tf_results = [
            outcome(
                lambda i=i, n=n: _AutoShardDataset(with_policy(make_tf(), tf.data, policy), n, i)
            )
            for i in range(n)
        ]
        hd_results = [
            outcome(lambda i=i, n=n: auto_shard(with_policy(make_hd(), hdd, policy), n, i).dataset)
            for i in range(n)
        ]
        tf_failed = [isinstance(r, Exception) for r in tf_results]
        if any(isinstance(r, tf.errors.InvalidArgumentError) for r in tf_results):
            # Too few files: TF fails on some workers at the first read and gives the others
            # nothing; hpcdist raises on every worker.
            assert_documented(TOO_FEW)
            assert all(isinstance(r, tf.errors.InvalidArgumentError) or r == [] for r in tf_results)
            assert all(isinstance(r, InvalidArgumentError) for r in hd_results), hd_results
            assert "fewer than the" in str(hd_results[0])
            continue
        if all(tf_failed):
            assert all(isinstance(r, tf.errors.NotFoundError) for r in tf_results)
            assert all(isinstance(r, NotFoundError) for r in hd_results), hd_results
            continue
        assert not any(tf_failed), tf_results
        assert hd_results == tf_results, (name, policy, n)
        for i in range(n):
            tf_card = _AutoShardDataset(with_policy(make_tf(), tf.data, policy), n, i).cardinality()
            hd_card = auto_shard(with_policy(make_hd(), hdd, policy), n, i).dataset.cardinality()
            assert hd_card == int(tf_card), (name, policy, n, i)


def test_a_distributed_file_shard_reads_every_record_once(files):
    make_tf, make_hd = pipelines(files)["list_files.interleave"]
    for n in (1, 2, 3):
        seen = [x for i in range(n) for x in elements(auto_shard(make_hd(), n, i).dataset)]
        tf_seen = [x for i in range(n) for x in elements(_AutoShardDataset(make_tf(), n, i))]
        assert sorted(seen) == sorted(tf_seen) == sorted(elements(make_hd()))


def both_sides(build):
    """(TF elements, TF cardinality), (hpcdist elements, hpcdist cardinality)."""
    out = []
    for side in (tf.data, hdd):
        dataset = build(side.Dataset, side)
        out.append((elements(dataset), int(dataset.cardinality())))
    return out


OPS = {
    "interleave cycle 2 block 2": lambda data, m: data.range(4).interleave(
        lambda x: data.range(x * 10, x * 10 + 3 + x), cycle_length=2, block_length=2
    ),
    "interleave cycle 3 parallel": lambda data, m: data.range(5).interleave(
        lambda x: data.range(x).map(lambda y: y + 100 * x),
        cycle_length=3,
        num_parallel_calls=2,
        deterministic=True,
    ),
    "flat_map": lambda data, m: data.range(4).flat_map(lambda x: data.range(x)),
    "zip of two": lambda data, m: data.zip(data.range(3), data.range(10, 20)),
    "zip of a dict": lambda data, m: data.zip({"a": data.range(4), "b": data.range(3).repeat()}),
    "zip nested": lambda data, m: data.zip((data.range(3), (data.range(3), data.range(5)))),
    "concatenate": lambda data, m: data.range(3).concatenate(data.range(5, 7)),
    "concatenate infinite": lambda data, m: (
        data.range(3).concatenate(data.range(2).repeat()).take(7)
    ),
    "enumerate": lambda data, m: data.range(10, 14).enumerate(start=3),
    "unbatch": lambda data, m: data.range(7).batch(3).unbatch(),
    "unbatch tuple": lambda data, m: (
        data.from_tensor_slices((np.arange(10).reshape(5, 2), np.arange(5))).batch(2).unbatch()
    ),
    "padded_batch": lambda data, m: data.range(5).map(lambda x: m_fill(m, x)).padded_batch(2),
    "padded_batch shapes values": lambda data, m: (
        data.range(4)
        .map(lambda x: m_fill(m, x))
        .padded_batch(3, padded_shapes=[6], padding_values=np.int64(-1), drop_remainder=True)
    ),
    "padded_batch tuple": lambda data, m: (
        data.range(1, 4).map(lambda x: (m_fill(m, x), x)).padded_batch(2, padded_shapes=([5], []))
    ),
    "padded_batch dict": lambda data, m: (
        data.range(1, 4)
        .map(lambda x: {"v": m_fill(m, x), "n": x})
        .padded_batch(2, padding_values={"v": np.int64(7), "n": np.int64(0)})
    ),
    "rebatch": lambda data, m: data.range(10).batch(4).rebatch(3),
    "rebatch drop": lambda data, m: data.range(10).batch(4).rebatch(3, drop_remainder=True),
    "window": lambda data, m: data.range(7).window(3, shift=2).flat_map(lambda w: w.batch(3)),
    "window stride drop": lambda data, m: (
        data.range(10)
        .window(3, shift=2, stride=2, drop_remainder=True)
        .flat_map(lambda w: w.batch(3))
    ),
    "window shift > size": lambda data, m: (
        data.range(10).window(2, shift=4).flat_map(lambda w: w.batch(2))
    ),
    "map parallel": lambda data, m: data.range(20).map(
        lambda x: x * 3, num_parallel_calls=4, deterministic=True
    ),
    "prefetch autotune": lambda data, m: data.range(5).prefetch(m.AUTOTUNE),
    "from_generator": lambda data, m: data.from_generator(
        lambda: iter([(1, [1.5, 2.0]), (2, [3.0, 4.5])]),
        output_signature=(spec(m, [], "int64"), spec(m, [2], "float32")),
    ),
    "from_generator types": lambda data, m: data.from_generator(
        lambda: iter(range(3)), output_types=dtype(m, "int64"), output_shapes=()
    ),
}


def dtype(m, name):
    return getattr(tf, name) if m is tf.data else np.dtype(name)


def spec(m, shape, name):
    return tf.TensorSpec(shape, getattr(tf, name)) if m is tf.data else hdd.TensorSpec(shape, name)


def m_fill(m, x):
    """A vector of ``x`` ones (length varies per element)."""
    if m is tf.data:
        return tf.ones([x], tf.int64) * x
    return np.ones(int(x), np.int64) * x


KNOWN_CARDINALITY_DIFFERENCES = {"unbatch", "unbatch tuple", "rebatch", "rebatch drop"}
CARDINALITY = "docs/differences-from-tensorflow.md: `unbatch` and `rebatch` report an unknown"


@pytest.mark.parametrize("name", sorted(OPS))
def test_ops_give_tfs_elements_and_cardinality(name):
    (tf_out, tf_card), (hd_out, hd_card) = both_sides(OPS[name])
    assert hd_out == tf_out
    if name in KNOWN_CARDINALITY_DIFFERENCES and tf_card != hd_card:
        assert_documented(CARDINALITY)
        assert hd_card == hdd.UNKNOWN_CARDINALITY
    else:
        assert hd_card == tf_card


def test_list_files_sorted_and_shuffled_as_permutations(files):
    pattern = files[0].replace("part-0", "part-*")
    tf_sorted = elements(tf.data.Dataset.list_files(pattern, shuffle=False))
    hd_sorted = elements(hdd.Dataset.list_files(pattern, shuffle=False))
    assert hd_sorted == tf_sorted
    shuffled = elements(hdd.Dataset.list_files(pattern, seed=3))
    assert sorted(shuffled) == hd_sorted
    assert (
        hdd.Dataset.list_files(pattern).cardinality()
        == 4
        == int(tf.data.Dataset.list_files(pattern).cardinality())
    )


def test_errors_have_tfs_classes(tmp_path, files):
    missing = str(tmp_path / "none-*.tfrecord")
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.data.Dataset.list_files(missing)
    with pytest.raises(InvalidArgumentError, match="No files matched pattern"):
        hdd.Dataset.list_files(missing)

    def bad_generator():
        yield [1, 2, 3]

    for side, error in ((tf.data, tf.errors.InvalidArgumentError), (hdd, InvalidArgumentError)):
        sig = spec(side, [2], "int64")
        with pytest.raises(error, match="shape"):
            elements(side.Dataset.from_generator(bad_generator, output_signature=sig))
    gone = [files[0], str(tmp_path / "gone.tfrecord")]
    with pytest.raises(tf.errors.NotFoundError):
        elements(tf.data.TFRecordDataset(gone))
    with pytest.raises(NotFoundError, match=r"gone\.tfrecord"):
        elements(hdd.TFRecordDataset(gone))


def test_parallel_map_over_parsed_records_matches_tf(tmp_path):
    path = str(tmp_path / "examples.tfrecord")
    with hdio.TFRecordWriter(path) as writer:
        for i in range(10):
            example = hdio.example_proto.Example()
            example.features.feature["x"].float_list.value.extend([i, i / 2])
            example.features.feature["y"].int64_list.value.append(i)
            writer.write(example.SerializeToString())
    tf_spec = {
        "x": tf.io.FixedLenFeature([2], tf.float32),
        "y": tf.io.FixedLenFeature([], tf.int64),
    }
    hd_spec = {"x": hdio.FixedLenFeature([2], np.float32), "y": hdio.FixedLenFeature([], np.int64)}
    tf_out = elements(
        tf.data.TFRecordDataset(path)
        .batch(4)
        .map(lambda r: tf.io.parse_example(r, tf_spec), num_parallel_calls=tf.data.AUTOTUNE)
    )
    hd_out = elements(
        hdd.TFRecordDataset(path)
        .batch(4)
        .map(lambda r: hdio.parse_example(r, hd_spec), num_parallel_calls=hdd.AUTOTUNE)
    )
    assert hd_out == tf_out
