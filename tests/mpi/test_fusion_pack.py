"""Tensor fusion gathered straight into the shared-memory segment (one node) and its fallbacks.

On one node, a pack of tensors that the shared-memory backend reduces as they are goes through
the segment without a pack buffer (`ShmBackend.allreduce_gather`); the results must be those of
one all-reduce per tensor, bit for bit, at every ``bytes_per_pack``, for packs that span many
segment chunks, tensors split across chunk boundaries, empty and non-contiguous tensors. Across
nodes (4 ranks in 2 fake nodes) fusion keeps the pack-then-reduce path through the hierarchical
backend. Runs at any world size.
"""

from __future__ import annotations

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.errors import CollectiveMismatchError
from tests.fusion_cases import MPI_OPTS, tensors

pytestmark = pytest.mark.mpi(min_size=2)

PACKS = [64 << 10, 1 << 20, 4 << 20, 64 << 20, 0]


@pytest.mark.parametrize("bytes_per_pack", PACKS)
@pytest.mark.parametrize(
    ("dtype", "op"),
    [
        (np.float32, "sum"),
        (np.float64, "mean"),
        (np.int32, "max"),
        (np.int64, "min"),
        (np.float16, "sum"),
        (np.complex64, "sum"),
    ],
)
def test_fused_equals_one_allreduce_per_tensor(comm, bytes_per_pack, dtype, op) -> None:
    xs = tensors(comm.rank, dtype)
    opts = hd.CommunicationOptions(bytes_per_pack=bytes_per_pack)
    got = comm.grouped_allreduce(xs, op, opts)
    for i, (x, g) in enumerate(zip(xs, got, strict=True)):
        want = comm.allreduce(x, op, MPI_OPTS)
        assert g.shape == x.shape and g.dtype == x.dtype, i
        np.testing.assert_array_equal(g, want, err_msg=f"tensor {i}")
    # and against numpy, from every rank's inputs
    every = [tensors(r, dtype) for r in range(comm.size)]
    for i, g in enumerate(got):
        stack = np.stack([e[i] for e in every])
        ref = {
            "sum": lambda s: s.sum(0, dtype=s.dtype),
            "mean": lambda s: s.sum(0) / comm.size,
            "max": lambda s: s.max(0),
            "min": lambda s: s.min(0),
        }[op](stack)
        np.testing.assert_array_equal(g, ref.astype(dtype), err_msg=f"tensor {i}")


def test_every_rank_gets_the_same_bits(comm) -> None:
    rng = np.random.default_rng(comm.rank)
    xs = [rng.standard_normal(s).astype(np.float32) for s in (300_000, 5, 70_000, 1 << 19)]
    got = comm.grouped_allreduce(xs, options=hd.CommunicationOptions(bytes_per_pack=0))
    flat = np.concatenate([g.ravel() for g in got])
    everyone = comm.allgather(flat[None, :])
    for r in range(comm.size):
        assert everyone[r].tobytes() == flat.tobytes(), r


def test_held_results_survive_the_next_fusion(comm) -> None:
    """Results are views of reused buffers: a held one is never written by a later call."""
    first = comm.grouped_allreduce([np.full(1 << 18, 1.0, np.float32) for _ in range(3)])
    for step in range(2, 6):
        comm.grouped_allreduce([np.full(1 << 18, float(step), np.float32) for _ in range(3)])
    for g in first:
        np.testing.assert_array_equal(g, np.full(1 << 18, comm.size, np.float32))


def test_a_layout_mismatch_raises_everywhere_and_the_next_call_works(comm) -> None:
    sizes = [1000, 3000, 1 << 18]
    if comm.rank == comm.size - 1:
        sizes[1] = 2999
    with pytest.raises(CollectiveMismatchError):
        comm.grouped_allreduce([np.ones(s, np.float32) for s in sizes])
    got = comm.grouped_allreduce([np.ones(s, np.float32) for s in (1000, 3000, 1 << 18)])
    assert all((g == comm.size).all() for g in got)


def test_gathered_only_on_one_node_through_shared_memory(comm) -> None:
    gathers = comm.backends.gathers
    auto, f32 = hd.CommunicationImplementation.AUTO, np.dtype(np.float32)
    one_node = comm.num_nodes == 1
    assert gathers(f32, 1 << 20, auto, None) is one_node
    assert gathers(f32, 1 << 20, hd.CommunicationImplementation.SHM, None) is one_node
    assert not gathers(f32, 1 << 20, hd.CommunicationImplementation.MPI, None)
    assert not gathers(f32, 1 << 20, auto, "fp16")
    assert not gathers(np.dtype(bool), 8, auto, None)
    assert not gathers(np.dtype(">f4"), 32, auto, None)


def test_one_pack_per_dtype_through_the_segment(comm) -> None:
    """On one node the shared-memory path ignores bytes_per_pack: one collective per dtype."""
    xs = [np.ones(n, np.float32) for n in (20_000, 30_000, 40_000)] + [np.ones(9, np.int64)]
    before = comm._env.seq
    comm.grouped_allreduce(xs, options=hd.CommunicationOptions(bytes_per_pack=1024))
    packs = comm._env.seq - before
    assert packs == (2 if comm.num_nodes == 1 else 4)


@pytest.mark.parametrize("impl", ["mpi", "ring", "auto"])
def test_other_backends_and_conversions_keep_the_packed_path(comm, impl) -> None:
    """bool (widened), compressed and MPI/ring packs take the pack-then-reduce path."""
    opts = hd.CommunicationOptions(implementation=impl, bytes_per_pack=1 << 16)
    flags = [np.array([comm.rank == 0, True, False]), np.ones(70_000, bool)]
    got = comm.grouped_allreduce(flags, "max", opts)
    assert got[0].tolist() == [True, True, False] and got[1].all()
    xs = [np.full(n, comm.rank + 1, np.float32) for n in (10, 100_000, 300_000)]
    comp = hd.CommunicationOptions(implementation=impl, compression="fp16", bytes_per_pack=0)
    for opt in (opts, comp):
        for g in comm.grouped_allreduce(xs, "sum", opt):
            assert (g == comm.size * (comm.size + 1) / 2).all()
