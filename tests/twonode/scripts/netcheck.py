"""Collectives and a short ``Model.fit`` across the nodes; argv[1]: where rank 0 writes the
trained weights (``.npz``), to compare runs at different link rates.

Every collective's result is checked against numpy on every rank (each rank can make every
rank's input from its seed); sizes run from 4 bytes to 4 MiB through every host backend.
"""

import sys
import time

import numpy as np

import hpcdist as hd

comm = hd.comm.world()
n, me = comm.size, comm.rank
start = time.monotonic()
checked = 0
for impl in ("auto", "mpi", "ring"):
    opts = hd.CommunicationOptions(implementation=impl)
    for count in (1, 1000, 65536, 1 << 20):
        inputs = [np.random.default_rng(r * 7 + count).random(count) for r in range(n)]
        out = comm.allreduce(inputs[me].astype(np.float32), options=opts)
        exact = np.sum([x.astype(np.float64) for x in inputs], axis=0)
        assert np.allclose(out, exact, rtol=1e-5), (impl, count, me)
        same = comm.allgather(out[None, :8])
        assert (same == same[0]).all(), f"rank {me}: {impl} results differ across ranks"
        checked += 1
ints = comm.allreduce(np.arange(100_000, dtype=np.int64) * (me + 1))
assert (ints == np.arange(100_000) * n * (n + 1) // 2).all()
root = n - 1
buf = comm.broadcast(np.full(300_000, float(me)), root=root)
assert (buf == root).all()
gathered = comm.allgather(np.full((me + 1, 3), me, dtype=np.int32))
assert [int(v) for v in gathered[:, 0]] == [r for r in range(n) for _ in range(r + 1)]
rows = comm.reduce_scatter(np.ones((4 * n, 2)) * (me + 1))
assert (rows == n * (n + 1) / 2).all() and rows.shape == (4, 2)
swapped = comm.alltoall(np.repeat(np.arange(n, dtype=np.int64) + 10 * me, 1000))
assert (swapped == np.repeat(np.arange(n) * 10 + me, 1000)).all()
checked += 5

strategy = hd.MultiWorkerMirroredStrategy()
hd.nn.set_random_seed(3)
with strategy.scope():
    model = hd.nn.Sequential(
        [hd.nn.layers.Dense(256, activation="relu", input_shape=(32,)), hd.nn.layers.Dense(4)]
    )
    model.compile(optimizer=hd.nn.optimizers.Adam(1e-3), loss="mse")
x = np.random.default_rng(0).random((512, 32), dtype=np.float32)
y = x[:, :4] * 2 - 1
history = model.fit(x, y, batch_size=64, epochs=3, verbose=0)
losses = history.history["loss"]
assert losses[-1] < losses[0], losses
weights = model.get_weights()
for w in weights:
    first = comm.broadcast(w, root=0)
    assert np.array_equal(first, w), f"rank {me}: weights differ from rank 0's"
if me == 0:
    np.savez(sys.argv[1], *weights)
    print(
        f"netcheck: {checked} collective checks and fit on {n} ranks ({comm.num_nodes} nodes) "
        f"ok in {time.monotonic() - start:.1f} s; loss {losses[0]:.4f} -> {losses[-1]:.4f}",
        flush=True,
    )
