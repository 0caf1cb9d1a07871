"""Save on one world size, restore on another. argv: save|restore DIRECTORY."""

import sys

import numpy as np

import hpcdist as hd

mode, directory = sys.argv[1], sys.argv[2]
strategy = hd.MultiWorkerMirroredStrategy()
hd.nn.set_random_seed(1 if mode == "save" else 2)  # different initial weights on purpose
with strategy.scope():
    model = hd.nn.Sequential([hd.nn.layers.Dense(4, input_shape=(3,)), hd.nn.layers.Dense(2)])
    model.compile(optimizer=hd.nn.optimizers.SGD(0.1, momentum=0.9), loss="mse")
    metric = hd.nn.metrics.Mean()
    ckpt = hd.Checkpoint(model=model, optimizer=model.optimizer, metric=metric)
    manager = hd.CheckpointManager(ckpt, directory, max_to_keep=1)
n = strategy.num_replicas_in_sync
if mode == "save":
    x = np.arange(24, dtype=np.float32).reshape(8, 3) / 10
    model.fit(x, x[:, :2], batch_size=4, epochs=2, verbose=0)
    strategy.run(lambda: metric.update_state(np.ones(3)))  # 3 per replica, 3n in total
    manager.save()
    value = metric.result()  # collective: every rank reads the sync-on-read state
    if strategy.extended.should_checkpoint:
        np.savez(f"{directory}/expected.npz", *model.get_weights(), metric=value, count=3 * n)
else:
    manager.restore_or_initialize()
    expected = np.load(f"{directory}/expected.npz")
    for i, w in enumerate(model.get_weights()):
        assert np.array_equal(w, expected[f"arr_{i}"]), i
    assert metric.result() == float(expected["metric"])
    assert float(metric.count.numpy()) == float(expected["count"])
    slot = model.optimizer.slot(model.trainable_variables[0], "momentum")
    assert np.abs(slot.numpy()).sum() > 0
    if strategy.extended.should_checkpoint:
        print(f"restored on {n} rank(s) what {int(expected['count']) // 3} rank(s) saved")
