"""A distributed sanity check: every collective on every rank, verified against numpy.

Run: ``mpiexec -n 4 python examples/allreduce_check.py``. Exits non-zero on any wrong result.
"""

import time

import numpy as np

import hpcdist as hd


def main() -> None:
    comm = hd.comm.world()
    rank, size = comm.rank, comm.size
    rng = np.random.default_rng(1234)
    data = rng.standard_normal((size, 1 << 20)).astype(np.float32)  # same on every rank
    mine = data[rank]

    t0 = time.perf_counter()
    total = comm.allreduce(mine)
    elapsed = time.perf_counter() - t0
    assert np.allclose(total, data.sum(axis=0), atol=1e-4), "allreduce SUM is wrong"
    assert np.array_equal(comm.allreduce(mine, "max"), data.max(axis=0)), "allreduce MAX is wrong"
    gathered = comm.allgather(np.full((rank + 1, 2), rank))
    assert gathered.shape == (size * (size + 1) // 2, 2), "allgather shape is wrong"
    assert comm.broadcast(np.arange(4) * (rank + 1), root=size - 1).tolist() == [
        i * size for i in range(4)
    ], "broadcast is wrong"
    grads = [rng.standard_normal(n).astype(np.float32) for n in (10, 1000, 50000)]
    fused = comm.grouped_allreduce(grads, op="mean")
    assert all(np.allclose(f, g, atol=1e-5) for f, g in zip(fused, grads, strict=True)), (
        "fused MEAN is wrong"
    )
    comm.barrier()
    if rank == 0:
        mib = mine.nbytes / 2**20
        print(
            f"allreduce check passed on {size} ranks ({comm.num_nodes} node(s)): "
            f"{mib:.0f} MiB all-reduce in {elapsed * 1e3:.1f} ms"
        )


if __name__ == "__main__":
    main()
