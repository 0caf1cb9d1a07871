"""Several MonitoredTrainingSessions, one after another, in one TF1 program (2 ps + 2 workers).

Usage: ``mpiexec -n 4 python tf1_consecutive_sessions.py CHECKPOINT_DIR SESSIONS STEPS``.
Ranks 0-1 run the ps tasks, ranks 2-3 the workers. Each worker opens ``SESSIONS`` sessions in
turn, each on a new ``tf.Graph()`` with the same variables and on the same servers and
checkpoint directory, the k-th with ``StopAtStepHook(last_step=k * STEPS)``; both workers train
asynchronously. When a session is created, before this worker's first run in it, a hook reads
the global step and the weights, and prints (one line per session)::

    worker T session K start_step S w W0,W1,W2,W3 b B
    worker T session K runs R end_step E

From the second session on, the chief's scaffold has an ``init_fn`` that takes 2 s (as one
loading pretrained values would) and worker 1 opens its session 0.5 s late, so that it looks
at the ps memory while the chief creates its session. TF runs ``init_fn`` only when no
checkpoint is restored. In TF a non-chief's session becomes ready once its variables are
initialized: the ps tasks still hold the trained values, and the chief restores its last
checkpoint, so each session starts at the previous session's final step with the trained
weights on every worker.
"""

import sys
import time

import numpy as np

import hpcdist as hd
import hpcdist.compat.v1 as tf

CHECKPOINT_DIR, SESSIONS, STEPS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
PS = ["localhost:2222", "localhost:2223"]
WORKERS = ["localhost:2224", "localhost:2225"]
TRUE_W = np.array([[1.0], [-2.0], [3.0], [0.5]], np.float32)


class StartProbe(tf.train.SessionRunHook):
    """Reads the global step and the weights when the session is created."""

    def __init__(self, task: int, session: int, fetches: list) -> None:
        self.task, self.session, self.fetches = task, session, fetches

    def after_create_session(self, session, coord):
        step, w, b = session.run(self.fetches)
        weights = ",".join(f"{x:.9g}" for x in np.ravel(w))
        print(
            f"worker {self.task} session {self.session} start_step {int(step)} w {weights} "
            f"b {float(b):.9g}",
            flush=True,
        )


def train_session(server, cluster, task: int, session: int) -> None:
    """Build a new graph and train it in one MonitoredTrainingSession up to ``session * STEPS``."""
    with tf.Graph().as_default():
        with tf.device(
            tf.train.replica_device_setter(
                worker_device=f"/job:worker/task:{task}", cluster=cluster
            )
        ):
            w = tf.Variable(tf.zeros([4, 1]), name="w")
            b = tf.Variable(0.0, name="b")
            rng = np.random.default_rng(100 * session + task)

            def loss():
                x = rng.uniform(-1, 1, size=(32, 4)).astype(np.float32)
                y = x @ TRUE_W + 0.25
                return tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))

            global_step = tf.train.get_or_create_global_step()
            train_op = tf.train.AdagradOptimizer(0.5).minimize(loss, global_step=global_step)
        hooks = [
            tf.train.StopAtStepHook(last_step=session * STEPS),
            StartProbe(task, session, [global_step, w, b]),
        ]
        scaffold = None
        if session > 1:
            scaffold = tf.train.Scaffold(init_fn=lambda scaffold, sess: time.sleep(2.0))
            if task != 0:
                time.sleep(0.5)
        runs = 0
        with tf.train.MonitoredTrainingSession(
            master=server.target,
            is_chief=task == 0,
            checkpoint_dir=CHECKPOINT_DIR,
            hooks=hooks,
            scaffold=scaffold,
            max_wait_secs=60,
        ) as sess:
            while not sess.should_stop():
                sess.run(train_op)
                runs += 1
        with tf.Session(server.target) as plain:
            end = int(plain.run(global_step))
        print(f"worker {task} session {session} runs {runs} end_step {end}", flush=True)


def main() -> None:
    resolver = hd.cluster.resolve(jobs={"ps": len(PS), "worker": len(WORKERS)})
    cluster = tf.train.ClusterSpec({"ps": PS, "worker": WORKERS})
    server = tf.train.Server(cluster, job_name=resolver.task_type, task_index=resolver.task_id)
    if resolver.task_type == "ps":
        server.join()
        return
    for session in range(1, SESSIONS + 1):
        train_session(server, cluster, resolver.task_id, session)


if __name__ == "__main__":
    main()
