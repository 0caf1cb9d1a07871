"""One conformance test for every backend object: the `Backend` contract, run against each."""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.comm import Backend
from hpcdist.comm.checks import Deadline, Header
from hpcdist.errors import CollectiveMismatchError

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture(scope="module")
def comm():
    return hd.comm.world()


def backends(comm):
    out = {"mpi": comm._mpi, "ring": comm._ring, "hierarchical": comm._hier}
    if comm.num_nodes == 1:
        out["shm"] = comm._shm
    return out


NAMES = ["mpi", "ring", "hierarchical", "shm"]


@pytest.mark.parametrize("name", NAMES)
def test_backend_contract(comm, name):
    backend = backends(comm).get(name)
    if backend is None:
        pytest.skip("the plain shared-memory backend spans one node only")
    assert isinstance(backend, Backend)
    assert backend.name == name
    ops = [hd.ReduceOp.SUM, hd.ReduceOp.MIN, hd.ReduceOp.MAX, hd.ReduceOp.PROD]
    for seq, count in enumerate([0, 1, 5, 1000, 70001, 600000]):
        for dtype in (np.float64, np.int32, np.float32):
            for op in ops:
                if op is hd.ReduceOp.PROD and count > 1000:
                    continue
                src = (np.arange(count) % 7 + comm.rank).astype(dtype)
                keep = src.copy()
                dst = np.empty_like(src)
                header = Header(seq, 1, op.code, ord(src.dtype.char), src.shape)
                backend.allreduce(src, dst, op, header, Deadline(30, None))
                stacked = np.stack(
                    [(np.arange(count) % 7 + r).astype(np.float64) for r in range(comm.size)]
                )
                ref = {
                    "SUM": stacked.sum(0),
                    "MIN": stacked.min(0),
                    "MAX": stacked.max(0),
                    "PROD": stacked.prod(0),
                }[op.name]
                np.testing.assert_allclose(dst, ref, rtol=1e-6)
                assert np.array_equal(src, keep)
                inplace = src.copy()
                backend.allreduce(inplace, inplace, op, None, Deadline(30, None))
                np.testing.assert_allclose(inplace, ref, rtol=1e-6)
        buf = np.full(count, comm.rank, np.float64)
        backend.broadcast(
            buf,
            comm.size - 1,
            Header(seq, 3, 0, ord("d"), buf.shape, comm.size),
            Deadline(30, None),
        )
        assert (buf == comm.size - 1).all()


@pytest.mark.parametrize("name", NAMES)
def test_backend_reports_mismatch_everywhere(comm, name):
    backend = backends(comm).get(name)
    if backend is None:
        pytest.skip("the plain shared-memory backend spans one node only")
    n = 4 if comm.rank else 5
    src = np.ones(n)
    header = Header(1, 1, 1, ord("d"), src.shape)
    with pytest.raises(
        CollectiveMismatchError, match=r"float64\[4\].*float64\[5\]|float64\[5\].*float64\[4\]"
    ):
        backend.allreduce(src, np.empty_like(src), hd.ReduceOp.SUM, header, Deadline(30, None))
    ok = np.ones(3)
    backend.allreduce(ok, ok, hd.ReduceOp.SUM, Header(2, 1, 1, ord("d"), (3,)), Deadline(30, None))
    assert (ok == comm.size).all()
