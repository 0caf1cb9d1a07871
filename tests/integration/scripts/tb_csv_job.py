"""Model.fit with TensorBoard and CSVLogger on every rank. argv: mwms|ps OUT_DIR [EPOCHS].

Every rank gives the callbacks paths of its own (``OUT/tb_rank<r>``, ``OUT/rank<r>.csv``), so
the files show which ranks wrote. ``mwms``: MultiWorkerMirroredStrategy, EPOCHS (2) epochs of
64 examples in global batches of 16, with validation and a learning rate of 0.05 * 0.8**epoch.
``ps``: ParameterServerStrategy (run with HPCDIST_NUM_PS=1), 3 epochs of 5 steps of 16
examples each on the workers. The process that ran ``fit`` writes its History to
``OUT/history_<r>.json``.
"""

import json
import os
import sys

import numpy as np
from mpi4py import MPI

import hpcdist as hd

mode, out = sys.argv[1], sys.argv[2]
epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 2
strategy = hd.MultiWorkerMirroredStrategy() if mode == "mwms" else hd.ParameterServerStrategy()
rank = MPI.COMM_WORLD.Get_rank()
rng = np.random.default_rng(0)
x = rng.standard_normal((64, 4)).astype(np.float32)
y = (x @ np.array([[1.0], [-1.0], [0.5], [2.0]], np.float32)).astype(np.float32)
hd.nn.set_random_seed(0)
with strategy.scope():
    model = hd.nn.Sequential([hd.nn.layers.Dense(1, input_shape=(4,))])
    model.compile(hd.nn.optimizers.SGD(0.05), "mse", metrics=["mse"])
callbacks = [
    hd.nn.callbacks.TensorBoard(os.path.join(out, f"tb_rank{rank}"), update_freq="batch"),
    hd.nn.callbacks.CSVLogger(os.path.join(out, f"rank{rank}.csv")),
]
if mode == "mwms":
    callbacks.append(hd.nn.callbacks.LearningRateScheduler(lambda epoch: 0.05 * 0.8**epoch))
    history = model.fit(
        x, y, batch_size=16, epochs=epochs, verbose=0, validation_data=(x, y), callbacks=callbacks
    )
else:
    history = model.fit(
        x, y, batch_size=16, epochs=3, steps_per_epoch=5, verbose=0, callbacks=callbacks
    )
with open(os.path.join(out, f"history_{rank}.json"), "w") as f:
    json.dump({"history": history.history, "epoch": history.epoch}, f)
print(f"rank {rank} done", flush=True)
