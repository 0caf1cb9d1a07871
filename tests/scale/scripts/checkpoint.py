"""A checkpoint saved on one world size and restored on another. argv: save|restore DIRECTORY.

``save`` (64 ranks in the scale step) trains a small model with MultiWorkerMirroredStrategy,
updates a sync-on-read metric on every replica and saves model, optimizer and metric with a
`CheckpointManager`; the chief also writes the expected values. ``restore`` (3 ranks) builds
the model from other initial weights, restores, and checks weights, metric and momentum slots
bit for bit.
"""

from __future__ import annotations

import sys

import numpy as np
from common import report

import hpcdist as hd

mode, directory = sys.argv[1], sys.argv[2]
strategy = hd.MultiWorkerMirroredStrategy()
hd.nn.set_random_seed(1 if mode == "save" else 2)  # different initial weights on purpose
with strategy.scope():
    model = hd.nn.Sequential([hd.nn.layers.Dense(16, input_shape=(5,)), hd.nn.layers.Dense(2)])
    model.compile(optimizer=hd.nn.optimizers.SGD(0.05, momentum=0.9), loss="mse")
    metric = hd.nn.metrics.Mean()
    ckpt = hd.Checkpoint(model=model, optimizer=model.optimizer, metric=metric)
    manager = hd.CheckpointManager(ckpt, directory, max_to_keep=1)
n = strategy.num_replicas_in_sync
if mode == "save":
    x = np.linspace(-1, 1, 640 * 5, dtype=np.float32).reshape(640, 5)
    model.fit(x, x[:, :2] * 2, batch_size=128, epochs=2, verbose=0)
    strategy.run(lambda: metric.update_state(np.ones(3)))  # 3 per replica, 3n in total
    path = manager.save()
    value = metric.result()
    if strategy.extended.should_checkpoint:
        np.savez(f"{directory}/expected.npz", *model.get_weights(), metric=value, count=3 * n)
    report(hd.comm.world(), "checkpoint_save", saved_by=n, path=path)
else:
    path = manager.restore_or_initialize()
    expected = np.load(f"{directory}/expected.npz")
    for i, w in enumerate(model.get_weights()):
        assert np.array_equal(w, expected[f"arr_{i}"]), f"weight {i} differs after restore"
    assert metric.result() == float(expected["metric"])
    assert float(metric.count.numpy()) == float(expected["count"])
    slot = model.optimizer.slot(model.trainable_variables[0], "momentum")
    assert np.abs(slot.numpy()).sum() > 0, "momentum slots not restored"
    report(
        hd.comm.world(),
        "checkpoint_restore",
        restored_on=n,
        saved_by=int(expected["count"]) // 3,
        path=path,
    )
