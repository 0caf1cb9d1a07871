"""File sources (list_files, from_hdf5), auto-sharding decisions and iterator checkpoints."""

import tracemalloc

import h5py
import numpy as np
import pytest

import hpcdist as hd
import hpcdist.io as hdio
from hpcdist.data import AutoShardPolicy, Dataset, Options, TFRecordDataset, hdf5_source
from hpcdist.data.autoshard import auto_shard
from hpcdist.data.iterator import DatasetIterator
from hpcdist.errors import DataLossError, InvalidArgumentError, NotFoundError


def write_records(directory, files=4, records=3, compression=None):
    paths = []
    for k in range(files):
        path = str(directory / f"part-{k:02d}.tfrecord")
        with hdio.TFRecordWriter(path, hdio.TFRecordOptions(compression)) as writer:
            for j in range(records):
                writer.write(f"{k}-{j}".encode())
        paths.append(path)
    return paths


def texts(dataset):
    return [x.decode() for x in dataset]


def policy(dataset, name):
    options = Options()
    options.experimental_distribute.auto_shard_policy = getattr(AutoShardPolicy, name)
    return dataset.with_options(options)


# -- list_files ------------------------------------------------------------------------------


def test_list_files_sorted_shuffled_and_seeded(tmp_path):
    paths = write_records(tmp_path, files=5)
    pattern = str(tmp_path / "part-*.tfrecord")
    names = Dataset.list_files(pattern, shuffle=False)
    assert texts(names) == paths and names.cardinality() == 5
    assert texts(Dataset.list_files([paths[3], paths[1]], shuffle=False)) == [paths[1], paths[3]]
    a = texts(Dataset.list_files(pattern, seed=7))
    b = texts(Dataset.list_files(pattern, seed=7))
    assert a == b and sorted(a) == paths
    seeded = Dataset.list_files(pattern, seed=7)
    epochs = [texts(seeded) for _ in range(4)]
    assert any(e != epochs[0] for e in epochs)  # reshuffled every iteration
    with pytest.raises(InvalidArgumentError, match="No files matched pattern"):
        Dataset.list_files(str(tmp_path / "nothing-*"))


def test_list_files_then_readers(tmp_path):
    paths = write_records(tmp_path, files=3, records=2)
    names = Dataset.list_files(str(tmp_path / "*.tfrecord"), shuffle=False)
    assert texts(TFRecordDataset(names)) == ["0-0", "0-1", "1-0", "1-1", "2-0", "2-1"]
    interleaved = names.interleave(TFRecordDataset, cycle_length=3, num_parallel_calls=3)
    assert texts(interleaved) == ["0-0", "1-0", "2-0", "0-1", "1-1", "2-1"]
    assert len(paths) == 3


# -- from_hdf5 --------------------------------------------------------------------------------


def write_h5(path, rows, start=0, **extra):
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(start, start + rows * 3, dtype=np.float32).reshape(rows, 3)
        f["y"] = np.arange(start, start + rows, dtype=np.int64)
        for key, value in extra.items():
            f[key] = value
    return str(path)


def test_from_hdf5_rows_structures_and_chunks(tmp_path, monkeypatch):
    path = write_h5(tmp_path / "a.h5", 10)
    monkeypatch.setattr(hdf5_source, "CHUNK_BYTES", 40)  # a few rows per read: chunk borders
    ds = Dataset.from_hdf5(path, ("x", "y"))
    rows = list(ds)
    assert ds.cardinality() == 10 and len(rows) == 10
    np.testing.assert_array_equal(rows[4][0], [12, 13, 14])
    assert int(rows[4][1]) == 4
    as_dict = next(iter(Dataset.from_hdf5(path, {"label": "y", "features": "x"})))
    assert set(as_dict) == {"label", "features"}
    batches = list(Dataset.from_hdf5(path, "y").batch(4))
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_from_hdf5_several_files_follow_one_another(tmp_path):
    a = write_h5(tmp_path / "a.h5", 3)
    b = write_h5(tmp_path / "b.h5", 2, start=100)
    ds = Dataset.from_hdf5([a, b], "y")
    assert [int(v) for v in ds] == [0, 1, 2, 100, 101] and ds.cardinality() == 5
    pairs = Dataset.from_hdf5([a, b], ("x", "y"))
    read_whole = list(pairs.batch(2))  # one slice per key and file
    stacked = list(pairs.map(lambda x, y: (x, y)).batch(2))  # element by element
    assert len(read_whole) == len(stacked) == 3
    for (x1, y1), (x2, y2) in zip(read_whole, stacked, strict=True):
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)
        assert x1.dtype == x2.dtype == np.float32
    assert [len(y) for _, y in pairs.batch(2, drop_remainder=True)] == [2, 2]
    files = Dataset.list_files(str(tmp_path / "*.h5"), shuffle=False)
    interleaved = files.interleave(lambda f: Dataset.from_hdf5(f, "y"), cycle_length=2)
    assert [int(v) for v in interleaved] == [0, 100, 1, 101, 2]


def test_from_hdf5_bad_input(tmp_path):
    path = write_h5(tmp_path / "a.h5", 3, z=np.zeros(4))
    with pytest.raises(NotFoundError, match=r"missing\.h5"):
        Dataset.from_hdf5(str(tmp_path / "missing.h5"), "x")
    with pytest.raises(InvalidArgumentError, match="'nope'"):
        Dataset.from_hdf5(path, ("x", "nope"))
    with pytest.raises(InvalidArgumentError, match=r"\[3, 4\] rows"):
        Dataset.from_hdf5(path, ("y", "z"))
    broken = tmp_path / "broken.h5"
    broken.write_bytes(b"not an hdf5 file at all")
    with pytest.raises(DataLossError, match=r"broken\.h5"):
        Dataset.from_hdf5(str(broken), "x")


# -- auto-sharding ----------------------------------------------------------------------------


def test_file_sharding_gives_whole_files_round_robin(tmp_path):
    paths = write_records(tmp_path, files=5)
    names = Dataset.list_files(str(tmp_path / "*.tfrecord"), shuffle=False)
    pipeline = names.interleave(TFRecordDataset, cycle_length=2).map(lambda r: r).batch(2)
    seen = []
    for i in range(3):
        plan = auto_shard(pipeline, 3, i)
        assert plan.policy == "FILE" and plan.files == 5
        mine = [r.decode() for batch in plan.dataset for r in batch]
        assert {r.split("-")[0] for r in mine} == {str(k) for k in range(i, 5, 3)}
        seen += mine
    assert sorted(seen) == sorted(texts(TFRecordDataset(paths)))


def test_shuffled_file_lists_shard_the_sorted_list(tmp_path):
    write_records(tmp_path, files=4)
    names = Dataset.list_files(str(tmp_path / "*.tfrecord"))  # shuffled, unseeded
    shares = [set(texts(auto_shard(TFRecordDataset(names), 2, i).dataset)) for i in range(2)]
    assert not shares[0] & shares[1]
    assert {r[0] for r in shares[0]} == {"0", "2"}


def test_data_off_and_too_few_files(tmp_path):
    paths = write_records(tmp_path, files=2)
    data = auto_shard(policy(TFRecordDataset(paths), "DATA"), 2, 1)
    assert data.policy == "DATA" and texts(data.dataset) == ["0-1", "1-0", "1-2"]
    off = auto_shard(policy(TFRecordDataset(paths), "OFF"), 2, 1)
    assert off.policy == "OFF" and len(texts(off.dataset)) == 6
    for name in ("AUTO", "FILE"):
        with pytest.raises(InvalidArgumentError, match=r"2 file\(s\), fewer than the 3 workers"):
            auto_shard(policy(TFRecordDataset(paths), name), 3, 2)
    with pytest.raises(NotFoundError, match="unshardable"):
        auto_shard(policy(Dataset.range(4), "FILE"), 2, 0)
    assert auto_shard(policy(Dataset.range(4), "FILE"), 1, 0).policy == "NONE"
    assert auto_shard(Dataset.range(5), 2, 1).policy == "DATA"


def test_hdf5_sharding_by_rows_and_by_file(tmp_path):
    a = write_h5(tmp_path / "a.h5", 7)
    b = write_h5(tmp_path / "b.h5", 4, start=100)
    one = Dataset.from_hdf5(a, "y").batch(2)
    plans = [auto_shard(one, 3, i) for i in range(3)]
    assert {p.policy for p in plans} == {"ROWS"}
    shares = [[int(v) for batch in p.dataset for v in batch] for p in plans]
    assert shares == [[0, 1, 2], [3, 4], [5, 6]]
    assert [p.dataset.cardinality() for p in plans] == [2, 1, 1]
    with pytest.raises(InvalidArgumentError, match="fewer than the 2 workers"):
        auto_shard(policy(Dataset.from_hdf5(a, "y"), "FILE"), 2, 0)
    two = Dataset.from_hdf5([a, b], "y")
    by_file = [auto_shard(two, 2, i) for i in range(2)]
    assert [p.policy for p in by_file] == ["FILE", "FILE"]
    assert [int(v) for v in by_file[1].dataset] == [100, 101, 102, 103]
    by_rows = auto_shard(policy(two, "DATA"), 2, 1)
    assert by_rows.policy == "ROWS"
    assert [int(v) for v in by_rows.dataset] == [6, 100, 101, 102, 103]  # rows 6:11 of 11


def test_distribute_datasets_from_function_shards_files_by_hand(tmp_path):
    write_records(tmp_path, files=4)
    strategy = hd.get_strategy()

    def dataset_fn(context):
        names = Dataset.list_files(str(tmp_path / "*.tfrecord"), shuffle=False)
        names = names.shard(context.num_input_pipelines, context.input_pipeline_id)
        return names.interleave(TFRecordDataset, cycle_length=2).batch(4)

    batches = list(strategy.distribute_datasets_from_function(dataset_fn))
    assert sum(len(b) for b in batches) == 12


# -- iterator checkpoints ---------------------------------------------------------------------


def test_iterator_over_files_resumes_at_the_same_element(tmp_path):
    write_records(tmp_path, files=3, records=4, compression="GZIP")

    def pipeline():
        names = Dataset.list_files(str(tmp_path / "*.tfrecord"), shuffle=True, seed=5)
        records = names.interleave(
            lambda f: TFRecordDataset(f, compression_type="GZIP"), cycle_length=2
        )
        return records.shuffle(5, seed=1).batch(2)

    it = iter(pipeline())
    assert isinstance(it, DatasetIterator)
    for _ in range(2):
        next(it)
    ckpt = hd.Checkpoint(iterator=it)
    path = ckpt.save(str(tmp_path / "ckpt" / "it"))
    expected = [b.tolist() for b in it]
    fresh = iter(pipeline())
    hd.Checkpoint(iterator=fresh).restore(path)
    assert fresh.position == 2
    assert [b.tolist() for b in fresh] == expected
    with pytest.raises(ValueError, match="cannot rewind"):
        fresh.restore_state({"position": np.int64(1)})
    short = iter(Dataset.range(1))
    with pytest.raises(ValueError, match="ends after 1 elements"):
        short.restore_state({"position": np.int64(3)})


def test_a_restored_iterator_draws_the_saved_shuffle_epoch(tmp_path):
    write_records(tmp_path, files=2, records=5)
    names = Dataset.list_files(str(tmp_path / "*.tfrecord"), seed=11)
    dataset = TFRecordDataset(names).shuffle(6, seed=2).prefetch(2)
    first_epoch = texts(dataset)
    it = iter(dataset)  # the second epoch: other orders than the first
    taken = [next(it) for _ in range(3)]
    state = {k: np.array(v) for k, v in it.checkpoint_state().items()}
    rest = texts(it)
    assert texts(taken) + rest != first_epoch
    fresh = iter(dataset)  # a third epoch, until restored
    fresh.restore_state(state)
    assert texts(fresh) == rest
    started = iter(dataset)
    next(started)
    with pytest.raises(ValueError, match="another shuffle epoch"):
        started.restore_state(state)


def test_from_hdf5_reads_a_chunk_at_a_time_not_the_whole_dataset(tmp_path):
    path = str(tmp_path / "big.h5")
    rows, width = 8192, 1024  # 32 MiB of float32
    with h5py.File(path, "w") as f:
        f.create_dataset("x", (rows, width), np.float32, chunks=(256, width))
        for start in range(0, rows, 1024):
            f["x"][start : start + 1024] = np.full((1024, width), start, np.float32)
    ds = Dataset.from_hdf5(path, "x")
    tracemalloc.start()
    try:
        it = iter(ds)
        first = next(it)
        for _ in range(2000):  # across several chunks
            last = next(it)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first[0] == 0 and last[0] == 1024 and last.shape == (width,)
    assert peak < 3 * hdf5_source.CHUNK_BYTES, f"peak {peak} bytes while reading 32 MiB"
