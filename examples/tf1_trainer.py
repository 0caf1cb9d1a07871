r"""The trainer.py of TensorFlow's "Distributed TensorFlow" guide, on MPI with hpcdist.

Two ps tasks hold the variables, two workers train them asynchronously (or synchronously with
``--sync``), and the chief checkpoints to ``--checkpoint_dir``; a second run continues from the
newest checkpoint. Changes from the guide: the import, ``loss = ...`` written as a function,
the model filled in (a linear model learning y = x.w + b from uniform batches of 32), a few
flags with defaults, and the roles taken from the MPI rank when ``--job_name`` is not given
(ps ranks first):

    mpiexec -n 4 python examples/tf1_trainer.py              # ranks 0-1 ps, 2-3 workers
    mpiexec -n 4 python examples/tf1_trainer.py --sync       # SyncReplicasOptimizer
    mpiexec -n 2 python examples/tf1_trainer.py --job_name=ps --task_index=0 : \\
            -n 2 python examples/tf1_trainer.py --job_name=worker --task_index=...  # MPMD
"""

import argparse
import json
import sys

import numpy as np

import hpcdist as hd
import hpcdist.compat.v1 as tf

FLAGS = None


def main(_):
    ps_hosts = FLAGS.ps_hosts.split(",")
    worker_hosts = FLAGS.worker_hosts.split(",")

    # Create a cluster from the parameter server and worker hosts.
    cluster = tf.train.ClusterSpec({"ps": ps_hosts, "worker": worker_hosts})
    if not FLAGS.job_name:  # SPMD launch: the rank decides (ps ranks first, as TF's Slurm rule)
        resolver = hd.cluster.resolve(jobs={"ps": len(ps_hosts), "worker": len(worker_hosts)})
        FLAGS.job_name, FLAGS.task_index = resolver.task_type, resolver.task_id

    # Create and start a server for the local task.
    server = tf.train.Server(cluster, job_name=FLAGS.job_name, task_index=FLAGS.task_index)

    if FLAGS.job_name == "ps":
        server.join()
    elif FLAGS.job_name == "worker":
        # Assigns ops to the local worker by default.
        with tf.device(
            tf.train.replica_device_setter(
                worker_device="/job:worker/task:%d" % FLAGS.task_index,  # noqa: UP031 - the guide's
                cluster=cluster,
            )
        ):
            # Build model...
            w = tf.Variable(tf.zeros([4, 1]), name="w")
            b = tf.Variable(0.0, name="b")
            rng = np.random.default_rng(FLAGS.task_index)
            true_w = np.array([[1.0], [-2.0], [3.0], [0.5]], np.float32)

            def loss():
                x = rng.uniform(-1, 1, size=(32, 4)).astype(np.float32)
                y = x @ true_w + 0.25
                return tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))

            global_step = tf.contrib.framework.get_or_create_global_step()
            opt = tf.train.AdagradOptimizer(FLAGS.learning_rate)
            hooks = [tf.train.StopAtStepHook(last_step=FLAGS.last_step)]
            if FLAGS.sync:
                workers = len(worker_hosts)
                opt = tf.train.SyncReplicasOptimizer(opt, workers, total_num_replicas=workers)
                hooks.append(opt.make_session_run_hook(FLAGS.task_index == 0))
            train_op = opt.minimize(loss, global_step=global_step)

        placement = {v.name: v.device for v in tf.global_variables()}
        print(f"worker {FLAGS.task_index} placement {json.dumps(placement)}", flush=True)

        # The MonitoredTrainingSession takes care of session initialization,
        # restoring from a checkpoint, saving to a checkpoint, and closing when done
        # or an error occurs.
        runs, first, last = 0, None, None
        with tf.train.MonitoredTrainingSession(
            master=server.target,
            is_chief=(FLAGS.task_index == 0),
            checkpoint_dir=FLAGS.checkpoint_dir,
            hooks=hooks,
        ) as mon_sess:
            while not mon_sess.should_stop():
                # Run a training step asynchronously.
                _, value = mon_sess.run([train_op, loss])
                first = value if first is None else first
                last, runs = value, runs + 1
        with tf.Session(server.target) as sess:
            final = int(sess.run(global_step))
        print(
            f"worker {FLAGS.task_index} runs {runs} first_loss {first:.4g} last_loss {last:.4g} "
            f"global_step {final}",
            flush=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.register("type", "bool", lambda v: v.lower() == "true")
    # Flags for defining the tf.train.ClusterSpec
    parser.add_argument(
        "--ps_hosts",
        type=str,
        default="localhost:2222,localhost:2223",
        help="Comma-separated list of hostname:port pairs",
    )
    parser.add_argument(
        "--worker_hosts",
        type=str,
        default="localhost:2224,localhost:2225",
        help="Comma-separated list of hostname:port pairs",
    )
    parser.add_argument("--job_name", type=str, default="", help="One of 'ps', 'worker'")
    # Flags for defining the tf.train.Server
    parser.add_argument("--task_index", type=int, default=0, help="Index of task within the job")
    parser.add_argument("--checkpoint_dir", type=str, default="/tmp/train_logs")
    parser.add_argument("--last_step", type=int, default=200)
    parser.add_argument("--learning_rate", type=float, default=0.5)
    parser.add_argument("--sync", action="store_true", help="SyncReplicasOptimizer")
    FLAGS, unparsed = parser.parse_known_args()
    tf.app.run(main=main, argv=[sys.argv[0]] + unparsed)  # noqa: RUF005 - the guide's
