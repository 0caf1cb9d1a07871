"""Write keras_options_tf2.21.json: Keras 3 / TF 2.21 values for clipping, amsgrad, label smoothing.

Run with tensorflow-cpu 2.21 installed (not a dependency of hpcdist):
``python tests/unit/data/keras_options_reference.py > tests/unit/data/keras_options_tf2.21.json``.
"""

import json

import numpy as np
import tensorflow as tf

out = {}


def run(opt, steps=3):
    v0 = tf.Variable([1.0, 2.0])
    v1 = tf.Variable([[3.0], [4.0]])
    gs = [
        ([0.3, -0.4], [[0.5], [1.2]]),
        ([0.1, 0.2], [[-2.0], [0.1]]),
        ([-0.5, 0.05], [[0.0], [0.3]]),
    ]
    hist = []
    for i in range(steps):
        g0, g1 = gs[i]
        opt.apply_gradients([(tf.constant(g0), v0), (tf.constant(g1), v1)])
        hist.append([v0.numpy().tolist(), v1.numpy().tolist()])
    return hist


out["sgd_clipnorm"] = run(tf.keras.optimizers.SGD(0.1, clipnorm=0.25))
out["sgd_clipvalue"] = run(tf.keras.optimizers.SGD(0.1, clipvalue=0.2))
out["sgd_global_clipnorm"] = run(tf.keras.optimizers.SGD(0.1, global_clipnorm=0.5))
out["adam_amsgrad"] = run(tf.keras.optimizers.Adam(0.1, amsgrad=True))
try:
    tf.keras.optimizers.SGD(0.1, clipnorm=1.0, clipvalue=1.0)
except ValueError as e:
    out["both_error"] = str(e)
yt = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], np.float32)
yp = np.array([[0.9, 0.2], [0.3, 0.6], [0.7, 0.99]], np.float32)
out["bce_ls"] = float(tf.keras.losses.BinaryCrossentropy(label_smoothing=0.2)(yt, yp))
logits = np.array([[2.0, -1.0], [0.5, 0.3], [-1.0, 3.0]], np.float32)
out["bce_ls_logits"] = float(
    tf.keras.losses.BinaryCrossentropy(from_logits=True, label_smoothing=0.1)(yt, logits)
)
ct = np.array([[1, 0, 0], [0, 0, 1]], np.float32)
cp = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]], np.float32)
out["cce_ls"] = float(tf.keras.losses.CategoricalCrossentropy(label_smoothing=0.3)(ct, cp))
cl = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 1.5]], np.float32)
out["cce_ls_logits"] = float(
    tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.3)(ct, cl)
)
print(json.dumps(out))
