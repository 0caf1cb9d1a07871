"""File pipelines across ranks: FILE and row sharding, iterator checkpoints, bad input, any size."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

import hpcdist as hd
import hpcdist.io as hdio
from hpcdist.data import AutoShardPolicy, Dataset, Options, TFRecordDataset

pytestmark = pytest.mark.mpi(min_size=2)

RECORDS = 5  # per file


@pytest.fixture(scope="module")
def strategy():
    return hd.MultiWorkerMirroredStrategy()


def shared_dir(comm, tmp_path) -> str:
    return comm.broadcast_object(str(tmp_path))


def write_files(comm, directory, count, compression=None) -> list[str]:
    """``count`` TFRecord files of tf.train.Examples (file k, record j: id 100 * k + j)."""
    paths = [
        os.path.join(directory, f"train-{k:03d}-of-{count:03d}.tfrecord") for k in range(count)
    ]
    if comm.rank == 0:
        for k, path in enumerate(paths):
            with hdio.TFRecordWriter(path, hdio.TFRecordOptions(compression)) as writer:
                for j in range(RECORDS):
                    example = hdio.example_proto.Example()
                    example.features.feature["id"].int64_list.value.append(100 * k + j)
                    example.features.feature["x"].float_list.value.extend([k, j])
                    writer.write(example.SerializeToString())
    comm.barrier()
    return paths


SPEC = {
    "id": hdio.FixedLenFeature([], np.int64),
    "x": hdio.FixedLenFeature([2], np.float32),
}


def pipeline(directory, batch=4, options=None):
    names = Dataset.list_files(os.path.join(directory, "*.tfrecord"), shuffle=False)
    ds = names.interleave(TFRecordDataset, cycle_length=2).batch(batch)
    ds = ds.map(lambda records: hdio.parse_example(records, SPEC), num_parallel_calls=2)
    return ds if options is None else ds.with_options(options)


def ids_of(distributed):
    out = []
    for batch in distributed:
        assert (batch["x"][:, 1] == batch["id"] % 100).all()
        out += batch["id"].tolist()
    return out


def test_file_sharding_reads_every_record_once_with_whole_files_per_rank(comm, strategy, tmp_path):
    directory = shared_dir(comm, tmp_path)
    count = 2 * comm.size + 1  # uneven: some ranks read one file more
    write_files(comm, directory, count)
    distributed = strategy.experimental_distribute_dataset(pipeline(directory))
    assert distributed.shard_policy == "FILE"
    mine = ids_of(distributed)
    files = {i // 100 for i in mine}
    assert files == set(range(comm.rank, count, comm.size))  # files i, i + N, ...
    everything = sorted(x for ids in comm.allgather_object(mine) for x in ids)
    assert everything == sorted(100 * k + j for k in range(count) for j in range(RECORDS))


def test_datasets_from_function_shard_files_by_input_context(comm, strategy, tmp_path):
    directory = shared_dir(comm, tmp_path)
    count = comm.size + 1
    write_files(comm, directory, count)

    def dataset_fn(context):
        names = Dataset.list_files(os.path.join(directory, "*.tfrecord"), shuffle=False)
        names = names.shard(context.num_input_pipelines, context.input_pipeline_id)
        assert names.cardinality() == len(range(comm.rank, count, comm.size))
        records = names.interleave(TFRecordDataset, cycle_length=2).batch(3)
        return records.map(lambda r: hdio.parse_example(r, SPEC))

    mine = ids_of(strategy.distribute_datasets_from_function(dataset_fn))
    assert {i // 100 for i in mine} == set(range(comm.rank, count, comm.size))
    everything = sorted(x for ids in comm.allgather_object(mine) for x in ids)
    assert everything == sorted(100 * k + j for k in range(count) for j in range(RECORDS))


def test_fewer_files_than_workers_raise_on_every_rank(comm, strategy, tmp_path):
    directory = shared_dir(comm, tmp_path)
    write_files(comm, directory, comm.size - 1)
    message = None
    try:
        strategy.experimental_distribute_dataset(pipeline(directory))
    except hd.errors.InvalidArgumentError as exc:
        message = str(exc)
    messages = comm.allgather_object(message)
    expected = f"{comm.size - 1} file(s), fewer than the {comm.size} workers"
    assert all(m is not None and expected in m and "DATA" in m for m in messages), messages
    options = Options()
    options.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    data = strategy.experimental_distribute_dataset(pipeline(directory, options=options))
    mine = ids_of(data)
    everything = sorted(x for ids in comm.allgather_object(mine) for x in ids)
    assert everything == sorted(100 * k + j for k in range(comm.size - 1) for j in range(RECORDS))


def test_hdf5_rows_are_sharded_in_ranges(comm, strategy, tmp_path):
    directory = shared_dir(comm, tmp_path)
    path = os.path.join(directory, "rows.h5")
    rows = 7 * comm.size + 3
    if comm.rank == 0:
        with h5py.File(path, "w") as f:
            f["y"] = np.arange(rows, dtype=np.int64)
    comm.barrier()
    distributed = strategy.experimental_distribute_dataset(Dataset.from_hdf5(path, "y").batch(4))
    assert distributed.shard_policy == "ROWS"
    mine = [v for batch in distributed for v in batch.tolist()]
    assert mine == sorted(mine) and mine == list(range(mine[0], mine[-1] + 1))  # one range
    everything = sorted(x for part in comm.allgather_object(mine) for x in part)
    assert everything == list(range(rows))


def test_distributed_iterator_over_files_resumes_exactly(comm, strategy, tmp_path):
    directory = shared_dir(comm, tmp_path)
    write_files(comm, directory, 2 * comm.size, compression="GZIP")

    def records():
        names = Dataset.list_files(os.path.join(directory, "*.tfrecord"), shuffle=False)
        ds = names.interleave(lambda f: TFRecordDataset(f, compression_type="GZIP"), 2)
        return ds.batch(2).map(lambda r: hdio.parse_example(r, SPEC)["id"])

    it = iter(strategy.experimental_distribute_dataset(records()))
    before = [next(it).tolist() for _ in range(3)]
    path = hd.Checkpoint(iterator=it).save(os.path.join(directory, "ckpt", "input"))
    rest = [b.tolist() for b in it]
    fresh = iter(strategy.experimental_distribute_dataset(records()))
    hd.Checkpoint(iterator=fresh).restore(path)
    assert [b.tolist() for b in fresh] == rest
    assert before and rest


def test_a_distributed_iterator_in_a_later_epoch_resumes_with_that_epochs_order(
    comm, strategy, tmp_path
):
    directory = shared_dir(comm, tmp_path)
    write_files(comm, directory, 2 * comm.size)

    def records():
        names = Dataset.list_files(os.path.join(directory, "*.tfrecord"), seed=4)
        ds = names.interleave(TFRecordDataset, cycle_length=2).shuffle(8, seed=9)
        return ds.batch(2).map(lambda r: hdio.parse_example(r, SPEC)["id"])

    distributed = strategy.experimental_distribute_dataset(records())
    first_epoch = [b.tolist() for b in distributed]
    it = iter(distributed)  # the second epoch: other orders
    for _ in range(2):
        next(it)
    path = hd.Checkpoint(iterator=it).save(os.path.join(directory, "ckpt", "epoch"))
    rest = [b.tolist() for b in it]
    again = strategy.experimental_distribute_dataset(records())  # as in a new process
    fresh = iter(again)
    hd.Checkpoint(iterator=fresh).restore(path)
    assert [b.tolist() for b in fresh] == rest
    assert first_epoch[2:] != rest


def test_plain_iterator_of_a_rank_resumes_exactly(comm, tmp_path):
    directory = shared_dir(comm, tmp_path)
    write_files(comm, directory, comm.size)
    names = Dataset.list_files(os.path.join(directory, "*.tfrecord"), shuffle=False)
    mine = TFRecordDataset(names.shard(comm.size, comm.rank)).shuffle(4, seed=3)
    it = iter(mine)
    for _ in range(2):
        next(it)
    path = hd.Checkpoint(iterator=it).save(os.path.join(directory, "ckpt", "plain"))
    rest = list(it)
    fresh = iter(mine)
    hd.Checkpoint(iterator=fresh).restore(path)
    assert list(fresh) == rest


def corrupt(path: str, at: int) -> None:
    with open(path, "r+b") as file:
        file.seek(at)
        byte = file.read(1)[0]
        file.seek(at)
        file.write(bytes([byte ^ 0xFF]))


@pytest.mark.parametrize(
    "damage", ["corrupt record", "missing file", "truncated gzip", "bad feature"]
)
def test_bad_input_raises_on_every_rank_without_a_hang(comm, strategy, tmp_path, damage):
    directory = shared_dir(comm, tmp_path)
    compression = "GZIP" if damage == "truncated gzip" else None
    paths = write_files(comm, directory, comm.size, compression)
    spec = SPEC if damage != "bad feature" else {"id": hdio.FixedLenFeature([], np.float32)}
    bad = paths[-1]  # the last rank's file
    if comm.rank == 0:
        if damage == "corrupt record":
            corrupt(bad, 40)
        elif damage == "missing file":
            os.remove(bad)
        elif damage == "truncated gzip":
            os.truncate(bad, os.path.getsize(bad) // 2)
    comm.barrier()
    expected = {
        "corrupt record": hd.errors.DataLossError,
        "missing file": hd.errors.NotFoundError,
        "truncated gzip": hd.errors.DataLossError,
        "bad feature": hd.errors.InvalidArgumentError,
    }[damage]
    records = TFRecordDataset(paths, compression_type=compression)
    dataset = records.batch(2).map(lambda r: hdio.parse_example(r, spec))
    raised = None
    try:
        for _ in strategy.experimental_distribute_dataset(dataset):
            pass
    except expected as exc:
        raised = str(exc)
    reports = comm.allgather_object(raised)
    assert all(r is not None for r in reports), reports
    reader = comm.size - 1  # the rank that reads the damaged file names it
    assert os.path.basename(bad) in reports[reader] or damage == "bad feature"
    if damage == "bad feature":
        assert "'id'" in reports[0]
