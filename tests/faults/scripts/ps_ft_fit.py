"""``Model.fit`` under a fault-tolerant ParameterServerStrategy with a worker SIGKILLed mid-epoch.

``hpcdist run --ps 2 --workers 2 --worker-restarts 1 ps_ft_fit.py OUT_DIR``: 3 epochs of 30
steps; in epoch 1, after its 10th step is scheduled, the callback SIGKILLs worker 0. Every epoch
must complete its steps (``join`` at its end) and run its callbacks. Steps are at-least-once:
``optimizer.iterations`` counts every step applied, so ``iterations - epochs * steps`` steps
reran (``MEASURE fit_steps_reran``).
"""

import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

import hpcdist as hd
from hpcdist.strategies.ps.runtime import coordinator_runtime

OUT = Path(sys.argv[1])
EPOCHS, STEPS = 3, 30
strategy = hd.ParameterServerStrategy()
coordinator = hd.ClusterCoordinator(strategy)
rt = coordinator_runtime()


def check(name, ok, detail=""):
    print(f"CHECK {name} {'PASS' if ok else 'FAIL ' + str(detail)}", flush=True)


def slow_pid():
    time.sleep(0.05)
    return os.getpid()


pids = set()
while len(pids) < len(rt.roles.workers):
    pids |= {rv.fetch() for rv in [coordinator.schedule(slow_pid) for _ in range(8)]}
victim = min(pids)


class KillMidEpoch(hd.nn.callbacks.Callback):
    """Kill worker ``victim`` in epoch 1; record the hooks that ran."""

    def __init__(self):
        super().__init__()
        self.epoch, self.begun, self.ended = 0, [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self.begun.append(epoch)

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == 1 and batch == 9:
            os.kill(victim, signal.SIGKILL)

    def on_epoch_end(self, epoch, logs=None):
        self.ended.append(epoch)


rng = np.random.default_rng(0)
x = rng.standard_normal((512, 6)).astype(np.float32)
y = (x @ rng.standard_normal((6, 1))).astype(np.float32)
with strategy.scope():
    model = hd.nn.Sequential([hd.nn.layers.Dense(16, activation="relu", input_shape=(6,))])
    model.add(hd.nn.layers.Dense(1))
    model.compile(optimizer=hd.nn.optimizers.SGD(0.02), loss="mse")
callback = KillMidEpoch()
deaths = rt.deaths
history = model.fit(
    x, y, batch_size=32, epochs=EPOCHS, steps_per_epoch=STEPS, callbacks=[callback], verbose=0
)
losses = history.history["loss"]
iterations = int(model.optimizer.iterations.numpy())
print(f"MEASURE fit_steps_reran {iterations - EPOCHS * STEPS}", flush=True)
check("fit_worker_died", rt.deaths > deaths, rt.deaths)
check("fit_every_epoch", callback.begun == callback.ended == list(range(EPOCHS)), callback.ended)
check("fit_every_step", iterations >= EPOCHS * STEPS, iterations)
check("fit_losses", len(losses) == EPOCHS and all(np.isfinite(losses)), losses)
print("DONE", flush=True)
