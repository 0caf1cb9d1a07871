"""A preemptible custom training loop. argv: CHECKPOINT_DIR OUT.npz [SIGNAL_AT_STEP].

Runs TOTAL steps under MultiWorkerMirroredStrategy through a PreemptionCheckpointHandler; with
SIGNAL_AT_STEP the last rank sends itself SIGUSR2 during that step, so the job checkpoints and
exits with PREEMPTION_EXIT_CODE. Run again, it resumes; at the end rank 0 writes the weights.
"""

import os
import signal
import sys
import time

import numpy as np

import hpcdist as hd

TOTAL, GLOBAL_BATCH = 14, 32
directory, out = sys.argv[1], sys.argv[2]
signal_at = int(sys.argv[3]) if len(sys.argv) > 3 else None

strategy = hd.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.standard_normal((GLOBAL_BATCH * TOTAL, 5)).astype(np.float32)
y = (x.sum(1) > 0).astype(np.int64)
hd.nn.set_random_seed(0)
with strategy.scope():
    model = hd.nn.Sequential(
        [hd.nn.layers.Dense(16, activation="tanh", input_shape=(5,)), hd.nn.layers.Dense(2)]
    )
    optimizer = hd.nn.optimizers.Adam(0.01)
    ckpt = hd.Checkpoint(model=model, optimizer=optimizer)
    manager = hd.CheckpointManager(ckpt, directory, max_to_keep=2)
    handler = hd.PreemptionCheckpointHandler(manager)
loss_object = hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
rank = strategy.extended.worker_index


STEP_SLEEP = float(os.environ.get("STEP_SLEEP", "0"))  # slow steps down for external signals


def train_step(step):
    time.sleep(STEP_SLEEP)
    lo = step * GLOBAL_BATCH
    batch = hd.data.Dataset.from_tensors((x[lo : lo + GLOBAL_BATCH], y[lo : lo + GLOBAL_BATCH]))
    inputs = next(iter(strategy.experimental_distribute_dataset(batch)))
    if step == signal_at and rank == strategy.num_replicas_in_sync - 1:
        os.kill(os.getpid(), signal.SIGUSR2)

    def replica(inputs):
        bx, by = inputs
        with hd.nn.GradientTape() as tape:
            loss = hd.nn.compute_average_loss(
                loss_object(by, model(bx, training=True)), global_batch_size=GLOBAL_BATCH
            )
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    strategy.run(replica, args=(inputs,))


start = handler.total_run_calls
print(f"rank {rank} starting at step {start}", flush=True)
while handler.total_run_calls < TOTAL:
    handler.run(train_step, handler.total_run_calls)
if rank == 0:
    np.savez(out, *model.get_weights(), steps=handler.total_run_calls, start=start)
