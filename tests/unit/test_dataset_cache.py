"""``Dataset.cache(filename)``: an HDF5 file written by the first full pass (TF's file cache)."""

from __future__ import annotations

import collections
import os
import re
import tracemalloc

import h5py
import numpy as np
import pytest

import hpcdist as hd
from hpcdist.data import Dataset
from hpcdist.data.cache import READ_BLOCK_BYTES, cache_path

# TF's DataLossError: hpcdist.errors' (hpcdist.data.cache's until errors has it)
DataLossError = hd.errors.DataLossError
Pair = collections.namedtuple("Pair", ["image", "label"])


def counted(ds: Dataset, reads: list[int]) -> Dataset:
    """``ds`` with every element read from the source recorded in ``reads``."""

    def note(*element):
        reads.append(1)
        return element if len(element) > 1 else element[0]

    return ds.map(note)


def files_in(directory) -> list[str]:
    return sorted(os.listdir(directory))


def test_the_first_full_pass_writes_the_file_and_later_passes_read_it(tmp_path):
    reads: list[int] = []
    prefix = tmp_path / "train"
    ds = counted(Dataset.range(10), reads).cache(str(prefix))
    assert ds.cardinality() == 10
    assert files_in(tmp_path) == []  # nothing before the first iteration
    assert [int(v) for v in ds] == list(range(10))
    assert files_in(tmp_path) == ["train.h5"] and cache_path(str(prefix)) == f"{prefix}.h5"
    assert [int(v) for v in ds] == list(range(10))
    assert len(reads) == 10  # the second pass came from the file
    with h5py.File(tmp_path / "train.h5", "r") as f:
        assert f.attrs["num_elements"] == 10  # an HDF5 file of arrays, no pickle


def test_the_next_run_reuses_the_file_without_reading_the_source(tmp_path):
    prefix = str(tmp_path / "cache" / "x")  # the directory is created, as TF does
    x = np.arange(60, dtype=np.float32).reshape(20, 3)
    first = list(Dataset.from_tensor_slices((x, np.arange(20))).cache(prefix))
    reads: list[int] = []
    rebuilt = counted(Dataset.from_tensor_slices((x, np.arange(20))), reads).cache(prefix)
    again = list(rebuilt)
    assert reads == []
    assert len(again) == len(first) == 20
    for (a, b), (c, d) in zip(first, again, strict=True):
        assert a.dtype == c.dtype == np.float32 and a.shape == c.shape == (3,)
        np.testing.assert_array_equal(a, c)
        assert b == d and type(d) is np.int64  # scalars come back as numpy scalars


def test_a_pass_stopped_early_leaves_no_file(tmp_path):
    reads: list[int] = []
    ds = counted(Dataset.range(6), reads).cache(str(tmp_path / "c"))
    assert [int(v) for v in ds.take(3)] == [0, 1, 2]
    assert files_in(tmp_path) == []  # no cache and no temporary file left behind
    it = iter(ds)
    next(it)
    del it
    assert files_in(tmp_path) == []

    def fail_at_two(v):
        if v == 2:
            raise RuntimeError("source failed")
        return v

    with pytest.raises(RuntimeError, match="source failed"):
        list(Dataset.range(4).map(fail_at_two).cache(str(tmp_path / "c")))
    assert files_in(tmp_path) == []
    assert [int(v) for v in ds] == list(range(6))
    assert files_in(tmp_path) == ["c.h5"]


def test_structures_dtypes_and_shapes_come_back_exactly(tmp_path):
    images = np.arange(7 * 2 * 2, dtype=np.float64).reshape(7, 2, 2)
    source = Dataset.from_tensor_slices(
        {
            "pair": Pair(images, np.arange(7, dtype=np.int32)),
            "flag": np.arange(7) % 2 == 0,
            "name": np.array([f"n{i}" * i for i in range(7)]),
            "raw": np.array([b"\x00\xff" * i for i in range(7)], dtype=object),
        }
    ).batch(3)  # batches of 3, 3 and 1 rows: shapes and string widths vary per element
    want = list(source)
    ds = source.cache(str(tmp_path / "s"))
    list(ds)
    got = list(ds)
    assert len(got) == 3
    for g, w in zip(got, want, strict=True):
        assert list(g) == list(w)  # key order
        assert type(g["pair"]).__name__ == "Pair" and g["pair"]._fields == ("image", "label")
        np.testing.assert_array_equal(g["pair"].image, w["pair"].image)
        assert g["pair"].image.dtype == np.float64 and g["pair"].label.dtype == np.int32
        assert g["flag"].dtype == bool and g["flag"].tolist() == w["flag"].tolist()
        assert g["name"].tolist() == w["name"].tolist()
        assert g["raw"].tolist() == [bytes(v) for v in w["raw"].tolist()]


def test_an_empty_dataset_caches_as_empty(tmp_path):
    ds = Dataset.range(0).cache(str(tmp_path / "e"))
    assert list(ds) == [] and list(ds) == []
    assert files_in(tmp_path) == ["e.h5"]


def test_reading_is_lazy(tmp_path):
    rows = 8 * READ_BLOCK_BYTES // (1024 * 4)  # 64 MiB of float32 rows
    x = np.ones((rows, 1024), dtype=np.float32)
    ds = Dataset.from_tensor_slices(x).batch(1024).cache(str(tmp_path / "big"))
    for _ in ds:
        pass
    del x
    tracemalloc.start()
    try:
        first = next(iter(ds))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first.shape == (1024, 1024)
    assert peak < 2 * READ_BLOCK_BYTES + first.nbytes  # one block, not the 64 MiB file


@pytest.mark.parametrize("damage", ["garbage", "truncated", "short-data"])
def test_a_corrupt_or_truncated_file_is_a_data_loss_error_naming_it(tmp_path, damage):
    prefix = str(tmp_path / "bad")
    x = np.random.default_rng(0).random((4096, 256)).astype(np.float32)
    ds = Dataset.from_tensor_slices(x).batch(256).cache(prefix)
    list(ds)
    path = f"{prefix}.h5"
    if damage == "garbage":
        with open(path, "wb") as f:
            f.write(b"not an hdf5 file" * 100)
    elif damage == "truncated":
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(size // 2)
    else:
        with h5py.File(path, "r+") as f:
            f["leaf0/data"].resize((100,))
    with pytest.raises(DataLossError, match=re.escape(f"{prefix}.h5")) as raised:
        list(ds)
    assert "corrupt or truncated" in str(raised.value)


def test_cache_without_a_file_name_stays_in_memory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for ds in (Dataset.range(3).cache(), Dataset.range(3).cache("")):
        assert [int(v) for v in ds] == [0, 1, 2] == [int(v) for v in ds]
    assert files_in(tmp_path) == []


def test_a_file_cache_then_shuffle_and_batch(tmp_path):
    ds = Dataset.from_tensor_slices(np.arange(50)).cache(str(tmp_path / "c"))
    pipeline = ds.shuffle(50, seed=5).batch(16)
    first = np.concatenate(list(pipeline))
    second = np.concatenate(list(pipeline))
    assert sorted(first.tolist()) == sorted(second.tolist()) == list(range(50))
    assert first.tolist() != second.tolist()


def test_elements_that_change_structure_are_refused(tmp_path):
    ds = Dataset.range(3).map(lambda v: (v,) if v < 1 else (v, v))
    with pytest.raises(ValueError, match="element 1 has the structure"):
        list(ds.cache(str(tmp_path / "mixed")))
    assert files_in(tmp_path) == []
