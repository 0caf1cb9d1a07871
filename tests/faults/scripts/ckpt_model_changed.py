"""A model that changed under its checkpoints: restore raises, no file or weight changes.

argv: DIRECTORY OUT. Saves three checkpoints of a model (two kept), then builds the model with a
wider last layer (its first layer still matches) and calls `restore_or_initialize`. Each
rank writes its lines to ``OUT/rank<r>.txt``.
"""

import hashlib
import os
import sys

import numpy as np

import hpcdist as hd
from hpcdist.checkpoint import CheckpointError, checkpoint_communicator

directory, out = sys.argv[1], sys.argv[2]
strategy = hd.MultiWorkerMirroredStrategy()
rank = checkpoint_communicator().rank
os.makedirs(out, exist_ok=True)
report = open(os.path.join(out, f"rank{rank}.txt"), "w")  # noqa: SIM115


def build(outputs: int):
    """A compiled model with ``outputs`` units in its last layer, with its manager."""
    with strategy.scope():
        model = hd.nn.Sequential(
            [hd.nn.layers.Dense(4, input_shape=(3,)), hd.nn.layers.Dense(outputs)]
        )
        model.compile(optimizer=hd.nn.optimizers.SGD(0.1, momentum=0.9), loss="mse")
        ckpt = hd.Checkpoint(model=model, optimizer=model.optimizer)
        return model, hd.CheckpointManager(ckpt, directory, max_to_keep=2)


def digest() -> dict[str, str]:
    return {
        name: hashlib.sha256(open(os.path.join(directory, name), "rb").read()).hexdigest()
        for name in sorted(os.listdir(directory))
    }


model, manager = build(2)
x = np.arange(24, dtype=np.float32).reshape(8, 3) / 10
for _ in range(3):
    model.fit(x, x[:, :2], batch_size=4, epochs=1, verbose=0)
    manager.save()
before = digest()
changed, changed_manager = build(3)
weights = changed.get_weights()
try:
    changed_manager.restore_or_initialize()
except CheckpointError as exc:
    print(f"rank {rank}: {type(exc).__name__}: {exc}", file=report, flush=True)
else:
    print(f"rank {rank}: no error", file=report, flush=True)
untouched = all(np.array_equal(a, b) for a, b in zip(weights, changed.get_weights(), strict=True))
print(f"rank {rank}: weights untouched={untouched}", file=report, flush=True)
print(
    f"rank {rank}: files {sorted(before)} unchanged={digest() == before}", file=report, flush=True
)
