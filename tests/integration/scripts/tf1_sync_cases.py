"""TF's sync_replicas_optimizer_test on MPI: one worker per rank, ps ranks first.

Usage: ``mpiexec -n N python tf1_sync_cases.py CASE NUM_WORKERS``; CASE is ``2workers``,
``3workers1backup`` or ``1of2``. Each worker asserts TF's numbers and prints ``CASE ok``.
"""

import sys
import time

import numpy as np
from mpi4py import MPI

import hpcdist.compat.v1 as tf

case, num_workers = sys.argv[1], int(sys.argv[2])
world = MPI.COMM_WORLD
num_ps = world.size - num_workers
rank = world.rank
job, task = ("ps", rank) if rank < num_ps else ("worker", rank - num_ps)
cluster = tf.train.ClusterSpec(
    {
        "ps": [f"localhost:{2222 + i}" for i in range(num_ps)],
        "worker": [f"localhost:{3333 + i}" for i in range(num_workers)],
    }
)
server = tf.train.Server(cluster, job_name=job, task_index=task)
workers = world.Split(0 if job == "worker" else MPI.UNDEFINED, rank)
if job == "ps":
    server.join()
    sys.exit(0)

replicas = 1 if case == "1of2" else 2
with tf.device("/job:ps/task:0"):
    global_step = tf.Variable(0, name="global_step", trainable=False)
    v0 = tf.Variable(0.0, name="v0")
with tf.device(f"/job:ps/task:{min(1, num_ps - 1)}"):
    v1 = tf.Variable(1.0, name="v1")
    v_sparse = tf.Variable([[3.0], [4.0]], name="v_sparse")
with tf.device(f"/job:worker/task:{task}"):
    grads_0 = tf.constant(0.1 + task * 0.2)
    grads_1 = tf.constant(0.9 + task * 0.2)
    grads_sparse = tf.IndexedSlices(
        np.array([[0.1 + task * 0.2]], np.float32), np.array([1]), (2, 1)
    )
    sync_rep_opt = tf.train.SyncReplicasOptimizer(
        tf.train.GradientDescentOptimizer(2.0),
        replicas_to_aggregate=replicas,
        total_num_replicas=num_workers,
    )
    train_op = sync_rep_opt.apply_gradients(
        zip([grads_0, grads_1, grads_sparse], [v0, v1, v_sparse], strict=True),
        global_step=global_step,
    )
    tokens = -1 if case == "1of2" else num_workers
    hook = sync_rep_opt.make_session_run_hook(task == 0, num_tokens=tokens)
sess = tf.train.MonitoredTrainingSession(master=server.target, is_chief=task == 0, hooks=[hook])
local_step = next(v for v in tf.local_variables() if v.name == "sync_rep_local_step")


def close(actual, expected):
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)


def in_turn(*order):
    """Each worker of ``order`` runs train_op once, one after the other."""
    for who in order:
        if task == who:
            sess.run(train_op)
        workers.Barrier()


workers.Barrier()
close(sess.run(v0), 0.0)
close(sess.run(v1), 1.0)
close(sess.run(v_sparse), [[3.0], [4.0]])
assert sess.run(global_step) == 0 and sess.run(local_step) == 0
workers.Barrier()

if case == "2workers":
    in_turn(0, 1)
    assert sess.run(global_step) == 1
    close(sess.run(v0), 0 - (0.1 + 0.3) / 2 * 2.0)
    close(sess.run(v1), 1 - (0.9 + 1.1) / 2 * 2.0)
    close(sess.run(v_sparse), [[3.0], [4.0 - (0.1 + 0.3) / 2 * 2.0]])
    assert sess.run(local_step) == 0
    workers.Barrier()
    in_turn(0, 1)
    assert sess.run(global_step) == 1 and sess.run(local_step) == 1
    close(sess.run(v0), -0.4)
    close(sess.run(v1), -1.0)
    workers.Barrier()
    sess.run(train_op)  # both at once: the token queue is empty, they need each other
    workers.Barrier()
    assert sess.run(global_step) == 2
    close(sess.run(v0), 0 - 2 * (0.1 + 0.3) / 2 * 2.0)
    close(sess.run(v1), 1 - 2 * (0.9 + 1.1) / 2 * 2.0)
elif case == "3workers1backup":
    in_turn(0, 2)
    assert sess.run(global_step) == 1
    close(sess.run(v0), 0 - (0.1 + 0.5) / 2 * 2.0)
    close(sess.run(v1), 1 - (0.9 + 1.3) / 2 * 2.0)
    in_turn(1)  # stale: dropped
    in_turn(0, 1, 2)
    assert sess.run(global_step) == 1
    if task == 1:
        assert sess.run(local_step) == 1
    workers.Barrier()
    if task == 0:
        sess.run(train_op)  # waits for a second gradient
    elif task == 1:
        time.sleep(0.3)
        assert sess.run(global_step) == 1  # worker 0 alone cannot finish the step
        sess.run(train_op)
    workers.Barrier()
    assert sess.run(global_step) == 2
    close(sess.run(v0), -0.6 - (0.1 + 0.3) / 2 * 2.0)
    close(sess.run(v1), -1.2 - (0.9 + 1.1) / 2 * 2.0)
elif case == "1of2":
    in_turn(0)
    assert sess.run(global_step) == 1
    close(sess.run(v0), -0.2)
    close(sess.run(v1), -0.8)
    close(sess.run(v_sparse)[1], [3.8])
    in_turn(1, 0)  # both stale
    assert sess.run(global_step) == 1
    in_turn(1)
    assert sess.run(global_step) == 2
    close(sess.run(v0), -0.8)
    close(sess.run(v1), -3.0)
    close(sess.run(v_sparse)[1], [3.2])
else:
    raise SystemExit(f"unknown case {case!r}")
workers.Barrier()
sess.close()
print(f"{case} ok worker {task}", flush=True)
