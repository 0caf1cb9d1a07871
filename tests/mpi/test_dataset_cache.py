"""``Dataset.cache(filename)`` on several ranks: one file per rank, each with its own shard."""

from __future__ import annotations

import os

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.data.cache import cache_path

# TF's DataLossError: hpcdist.errors' (hpcdist.data.cache's until errors has it)
DataLossError = hd.errors.DataLossError
pytestmark = pytest.mark.mpi(min_size=2)


def test_every_rank_caches_its_own_shard_in_its_own_file(comm, tmp_path):
    directory = comm.broadcast_object(str(tmp_path))  # one shared directory, rank 0's
    prefix = os.path.join(directory, "train")
    rank, size = comm.rank, comm.size
    reads: list[int] = []

    def pipeline() -> hd.data.Dataset:
        def note(v):
            reads.append(int(v))
            return v

        return hd.data.Dataset.range(20).shard(size, rank).map(note).cache(prefix)

    mine = [int(v) for v in pipeline()]
    assert mine == list(range(rank, 20, size))
    assert cache_path(prefix) == f"{prefix}.rank{rank}-of-{size}.h5"
    comm.barrier()
    names = sorted(os.listdir(directory))
    assert names == sorted(f"train.rank{r}-of-{size}.h5" for r in range(size))
    again = [int(v) for v in pipeline()]  # the next run: read back, the source untouched
    assert again == mine and reads == mine
    everything = sorted(v for part in comm.allgather_object(again) for v in part)
    assert everything == list(range(20))
    comm.barrier()


def test_a_damaged_file_raises_on_the_rank_that_reads_it(comm, tmp_path):
    directory = comm.broadcast_object(str(tmp_path))
    prefix = os.path.join(directory, "damaged")
    ds = hd.data.Dataset.from_tensor_slices(np.arange(8.0)).cache(prefix)
    list(ds)
    comm.barrier()
    if comm.rank == comm.size - 1:
        with open(cache_path(prefix), "wb") as f:
            f.write(b"\x00" * 64)
        with pytest.raises(DataLossError, match=f"rank {comm.rank} of {comm.size}"):
            list(ds)
    else:
        assert [float(v) for v in ds] == list(np.arange(8.0))
    comm.barrier()
