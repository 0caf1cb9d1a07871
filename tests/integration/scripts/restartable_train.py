"""A training loop that survives restarts. argv: CHECKPOINT_DIR OUT.npz [KILL_AT_STEP].

TOTAL steps under MultiWorkerMirroredStrategy, each on a fixed global batch of that step; a
checkpoint after every step (model, optimizer, step counter). On the first attempt
(``HPCDIST_RESTART_COUNT`` 0) with KILL_AT_STEP the last rank SIGKILLs itself during that step.
On a restart the loop resumes from the newest checkpoint (resharded if the world size changed).
At the end rank 0 writes the weights and the loss of every step it ran.
"""

import os
import signal
import sys

import numpy as np

import hpcdist as hd

TOTAL, GLOBAL_BATCH = 12, 32
directory, out = sys.argv[1], sys.argv[2]
kill_at = int(sys.argv[3]) if len(sys.argv) > 3 else None
attempt = int(os.environ.get("HPCDIST_RESTART_COUNT", "0"))

strategy = hd.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.standard_normal((GLOBAL_BATCH * TOTAL, 5)).astype(np.float32)
y = (x.sum(1) > 0).astype(np.int64)
hd.nn.set_random_seed(0)
with strategy.scope():
    model = hd.nn.Sequential(
        [hd.nn.layers.Dense(16, activation="tanh", input_shape=(5,)), hd.nn.layers.Dense(2)]
    )
    optimizer = hd.nn.optimizers.Adam(0.05)
    step = strategy.Variable(np.int64(0), name="step", trainable=False)
    ckpt = hd.Checkpoint(model=model, optimizer=optimizer, step=step)
    manager = hd.CheckpointManager(ckpt, directory, max_to_keep=2)
restored = manager.restore_or_initialize()
loss_object = hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
rank = strategy.extended.worker_index
last_rank = strategy.num_replicas_in_sync - 1
print(f"attempt {attempt} rank {rank} of {last_rank + 1} starts at step {int(step.numpy())}")


def replica(inputs):
    bx, by = inputs
    with hd.nn.GradientTape() as tape:
        loss = hd.nn.compute_average_loss(
            loss_object(by, model(bx, training=True)), global_batch_size=GLOBAL_BATCH
        )
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return loss


losses = []
while int(step.numpy()) < TOTAL:
    s = int(step.numpy())
    if s == kill_at and attempt == 0 and rank == last_rank and last_rank > 0:
        os.kill(os.getpid(), signal.SIGKILL)
    lo = s * GLOBAL_BATCH
    batch = hd.data.Dataset.from_tensors((x[lo : lo + GLOBAL_BATCH], y[lo : lo + GLOBAL_BATCH]))
    inputs = next(iter(strategy.experimental_distribute_dataset(batch)))
    per_replica = strategy.run(replica, args=(inputs,))
    losses.append(float(strategy.reduce("SUM", per_replica, axis=None)))
    step.assign_add(1)
    manager.save(checkpoint_number=s + 1)
if rank == 0:
    np.savez(out, *model.get_weights(), losses=np.array(losses), attempt=attempt)
