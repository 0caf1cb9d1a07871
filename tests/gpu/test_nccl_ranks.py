"""The NCCL path across ranks: run under mpiexec, one GPU per rank.

On real GPUs this needs one GPU per rank; in CI it runs on the device simulator
(``PYTHONPATH=tests/devicesim``, see scripts/test.sh), whose NCCL reduces over MPI the buffers
hpcdist hands it by pointer.
"""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.cluster.gpus import bind_gpu
from hpcdist.comm.nccl_backend import NcclBackend
from hpcdist.errors import ClusterConfigError, CollectiveMismatchError
from hpcdist.settings import Settings
from hpcdist.utils.split import balanced_sizes

cupy = pytest.importorskip("cupy", reason="CuPy is not installed (GPU tests need it)")
pytestmark = pytest.mark.mpi(min_size=2)
NCCL = hd.CommunicationOptions(implementation="nccl")


@pytest.fixture(scope="module")
def comm():
    world = hd.comm.world()
    if world.size < 2:  # also without pytest-mpi, which skips mpi-marked tests itself
        pytest.skip("run under mpiexec with at least 2 ranks")
    if cupy.cuda.runtime.getDeviceCount() < world.local_size:
        pytest.skip(f"needs {world.local_size} GPUs per node, one per rank")
    bind_gpu(world.local_rank)
    return hd.Communicator(options=NCCL)


def _reference(comm, make, op):
    stacked = np.stack([make(r) for r in range(comm.size)]).astype(np.float64)
    return {
        "sum": stacked.sum(0),
        "mean": stacked.mean(0),
        "min": stacked.min(0),
        "max": stacked.max(0),
        "prod": stacked.prod(0),
    }[op]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64", "uint8"])
@pytest.mark.parametrize("op", ["sum", "mean", "min", "max", "prod"])
def test_allreduce_across_ranks(comm, dtype, op):
    def make(r):
        return (np.arange(30) % 4 + r + 1).astype(dtype).reshape(5, 6)

    x = cupy.asarray(make(comm.rank))
    out = comm.allreduce(x, op)
    assert isinstance(out, cupy.ndarray) and out.dtype == x.dtype
    expected = _reference(comm, make, op)
    if np.dtype(dtype).kind in "iu" and op == "mean":
        expected = np.floor(expected)
    cupy.testing.assert_allclose(out, expected.astype(dtype), rtol=2e-3)


def test_fused_compressed_and_in_place_across_ranks(comm):
    xs = [cupy.full((k, 2), comm.rank + 1.0, dtype=cupy.float32) for k in range(1, 30)]
    total = sum(range(1, comm.size + 1))
    out = comm.grouped_allreduce(xs, "sum", hd.CommunicationOptions(bytes_per_pack=128))
    for a, b in zip(xs, out, strict=True):
        cupy.testing.assert_allclose(b, cupy.full(a.shape, total))
    x = cupy.linspace(-2, 2, 101, dtype=cupy.float32) * (comm.rank + 1)
    for codec, tol in (("fp16", 2e-3), ("bf16", 2e-2)):
        opts = hd.CommunicationOptions(implementation="nccl", compression=codec)
        got = comm.allreduce(x, "mean", opts)
        want = np.linspace(-2, 2, 101) * total / comm.size
        cupy.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    y = cupy.ones(7, dtype=cupy.int64) * comm.rank
    assert comm.allreduce_(y, "max") is y
    cupy.testing.assert_array_equal(y, cupy.full(7, comm.size - 1))


def test_broadcast_uneven_allgather_and_reduce_scatter(comm):
    x = cupy.arange(6, dtype=cupy.float64) + 10 * comm.rank
    cupy.testing.assert_array_equal(comm.broadcast(x, root=1), np.arange(6) + 10)
    rows = cupy.full((comm.rank + 1, 3), comm.rank, dtype=cupy.int32)  # rank r has r+1 rows
    gathered = comm.allgather(rows)
    expected = np.concatenate([np.full((r + 1, 3), r) for r in range(comm.size)])
    cupy.testing.assert_array_equal(gathered, expected)
    z = cupy.arange(5 * 2, dtype=cupy.float32).reshape(5, 2) * (comm.rank + 1)
    mine = comm.reduce_scatter(z, "sum")
    full = np.arange(10, dtype=np.float32).reshape(5, 2) * sum(range(1, comm.size + 1))
    start = sum(balanced_sizes(5, comm.size)[: comm.rank])
    count = balanced_sizes(5, comm.size)[comm.rank]
    cupy.testing.assert_array_equal(mine, full[start : start + count])


def test_nccl_on_some_ranks_and_staging_on_others_is_a_mismatch(comm):
    x = cupy.ones(4, dtype=cupy.float32)
    opts = NCCL if comm.rank == 0 else hd.CommunicationOptions(implementation="mpi")
    with pytest.raises(CollectiveMismatchError, match="nccl_allreduce"):
        comm.allreduce(x, "sum", opts)
    cupy.testing.assert_allclose(comm.allreduce(x, "sum"), comm.size)  # still usable


def test_two_ranks_on_one_gpu_is_an_error_on_every_rank(comm):
    with pytest.raises(ClusterConfigError, match=r"both use GPU .* one GPU per rank"):
        NcclBackend(comm.mpi_comm, 0)


def test_cuda_aware_mpi_path(comm):
    settings = Settings.from_env(cuda_aware_mpi=True)
    cam = hd.Communicator(options=hd.CommunicationOptions(implementation="mpi"), settings=settings)
    x = cupy.arange(8, dtype=cupy.float16) + comm.rank
    out = cam.allreduce(x, "sum")
    assert isinstance(out, cupy.ndarray) and out.dtype == cupy.float16
    want = np.arange(8) * comm.size + sum(range(comm.size))
    cupy.testing.assert_allclose(out, want)
    cam.close()


def test_hierarchical_nccl_over_fake_nodes(comm):
    if comm.size % 2:
        pytest.skip("needs an even number of ranks for 2-rank fake nodes")
    settings = Settings.from_env(nccl_hierarchical=True, ranks_per_node=2)
    hier = hd.Communicator(options=NCCL, settings=settings)
    x = cupy.arange(1000, dtype=cupy.float32) * (hier.rank + 1)
    out = hier.allreduce(x, "sum")
    total = sum(range(1, hier.size + 1))
    cupy.testing.assert_allclose(out, np.arange(1000) * total)
    for codec in ("fp16", "bf16"):  # bf16 crosses the leaders' MPI link as float32
        opts = hd.CommunicationOptions(implementation="nccl", compression=codec)
        got = hier.allreduce(x / 1000, "sum", opts)
        cupy.testing.assert_allclose(got, np.arange(1000) / 1000 * total, rtol=2e-2, atol=2e-2)
    if hier.num_nodes > 1:
        assert type(hier._backends.nccl_hier).__name__ == "HierarchicalNcclBackend"
    hier.close()


def test_async_collective_runs_on_the_callers_gpu(comm):
    device = cupy.cuda.Device().id
    x = cupy.ones(16, dtype=cupy.float32)  # on this rank's GPU, maybe not GPU 0
    assert x.device.id == device
    handle = comm.allreduce_async(x, "sum")
    out = handle.wait()
    assert out.device.id == device
    cupy.testing.assert_allclose(out, comm.size)


def test_multi_worker_training_on_gpus(comm):
    strategy = hd.MultiWorkerMirroredStrategy(communication_options=NCCL)
    assert strategy.extended.worker_devices == (f"gpu:{cupy.cuda.Device().id}",)
    hd.nn.set_random_seed(1)
    with strategy.scope():
        model = hd.nn.Sequential(
            [hd.nn.layers.Dense(16, activation="relu", input_shape=(8,)), hd.nn.layers.Dense(3)]
        )
        model.compile("adam", hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 8)).astype(np.float32)
    y = x[:, :3].argmax(1)
    history = model.fit(x, y, batch_size=32 * comm.size, epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    weights = np.concatenate([w.ravel() for w in model.get_weights()])
    everyone = comm.allgather(weights[None])
    assert np.array_equal(everyone.min(0), everyone.max(0))  # identical on every rank
