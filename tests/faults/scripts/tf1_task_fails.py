"""A TF1 job (1 ps, 2 workers) in which one task dies: the whole job must end at once.

Usage: ``mpiexec -n 3 python tf1_task_fails.py WHO`` with WHO ``worker`` (worker 1 raises
after step 20 while worker 0 trains towards step 100000) or ``ps`` (the ps raises while the
workers train).
"""

import sys
import time

import numpy as np
from mpi4py import MPI

import hpcdist.compat.v1 as tf

rank = MPI.COMM_WORLD.rank
who = sys.argv[1]
cluster = tf.train.ClusterSpec({"ps": ["a:1"], "worker": ["b:1", "c:1"]})
job, task = ("ps", 0) if rank == 0 else ("worker", rank - 1)
server = tf.train.Server(cluster, job_name=job, task_index=task)
if job == "ps":
    if who == "ps":
        time.sleep(1.0)
        raise RuntimeError("the ps fails on purpose")
    server.join()
    sys.exit(0)
with tf.device(tf.train.replica_device_setter(cluster=cluster)):
    w = tf.Variable(np.zeros(3, np.float32), name="w")
    gs = tf.train.get_or_create_global_step()

    def loss():
        if who == "worker" and task == 1 and int(gs.numpy()) > 20:
            raise RuntimeError("worker 1 fails on purpose")
        return tf.reduce_sum(tf.square(w - 1.0))

    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
hooks = [tf.train.StopAtStepHook(last_step=100000)]
with tf.train.MonitoredTrainingSession(master=server.target, is_chief=task == 0, hooks=hooks) as s:
    while not s.should_stop():
        s.run(train)
