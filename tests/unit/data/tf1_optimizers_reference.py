"""Write tf1_optimizers_tf2.21.json: TF1 optimizers' values after 3 steps, from TensorFlow.

Run in an environment with tensorflow-cpu 2.21 (not a dependency of hpcdist):
``python tests/unit/data/tf1_optimizers_reference.py > tests/unit/data/tf1_optimizers_tf2.21.json``
(the first line of the output is the JSON).
"""

import json

import tensorflow.compat.v1 as tf

tf.disable_eager_execution()
out = {}


def run(name, make_opt, steps=3, sparse=False):
    g = tf.Graph()
    with g.as_default():
        v0 = tf.Variable([1.0, 2.0])
        v1 = tf.Variable([3.0, 4.0])
        g0 = tf.constant([0.1, 0.1])
        g1 = tf.constant([0.01, 0.01])
        opt = make_opt()
        op = opt.apply_gradients([(g0, v0), (g1, v1)])
        with tf.Session() as s:
            s.run(tf.global_variables_initializer())
            hist = []
            for _ in range(steps):
                s.run(op)
                hist.append([s.run(v0).tolist(), s.run(v1).tolist()])
            slots = {n: s.run(opt.get_slot(v0, n)).tolist() for n in opt.get_slot_names()}
            names = sorted(v.op.name for v in tf.global_variables())
    out[name] = {"history": hist, "slots": slots, "names": names}


run("gd", lambda: tf.train.GradientDescentOptimizer(3.0))
run("adagrad", lambda: tf.train.AdagradOptimizer(3.0, initial_accumulator_value=0.1))
run("momentum", lambda: tf.train.MomentumOptimizer(2.0, 0.9))
run("nesterov", lambda: tf.train.MomentumOptimizer(2.0, 0.9, use_nesterov=True))
run("adam", lambda: tf.train.AdamOptimizer(0.1))
run("rmsprop", lambda: tf.train.RMSPropOptimizer(0.1, decay=0.9, momentum=0.5, epsilon=1e-6))
run(
    "rmsprop_centered",
    lambda: tf.train.RMSPropOptimizer(0.1, decay=0.9, momentum=0.5, epsilon=1e-6, centered=True),
)
# hello
print(json.dumps(out))
s = tf.Session(tf.train.Server.create_local_server().target)
print(repr(s.run(tf.constant("Hello, distributed TensorFlow!"))))
