"""N ranks train like one process; a few of the strategy's reduce and variable semantics.

MultiWorkerMirroredStrategy, a small MLP, SGD with momentum, the same global batches as one
process (the reference is trained in every rank's own process, without a strategy): after two
epochs the weights agree at float32 tolerance (max abs difference < 1e-5) and the loss history
matches. Then checks of tests/strategy_cases.py: reduce semantics, the mirrored and sync-on-read
variable tables, reductions of variables.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from common import report

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import hpcdist as hd
from tests import strategy_cases

GLOBAL_BATCH = 256


def data(n: int = 1024):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 8)).astype(np.float32)
    y = (x @ rng.standard_normal((8, 3))).argmax(axis=1)
    return x, y


def build(strategy=None):
    hd.nn.set_random_seed(1)
    scope = strategy.scope() if strategy is not None else hd.get_strategy().scope()
    with scope:
        model = hd.nn.Sequential(
            [
                hd.nn.layers.Dense(32, activation="tanh", input_shape=(8,)),
                hd.nn.layers.Dense(16, activation="relu"),
                hd.nn.layers.Dense(3),
            ]
        )
        model.compile(
            optimizer=hd.nn.optimizers.SGD(0.1, momentum=0.9),
            loss=hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    return model


x, y = data()
reference = build()
ref = reference.fit(x, y, batch_size=GLOBAL_BATCH, epochs=2, verbose=0, shuffle=False)
strategy = hd.MultiWorkerMirroredStrategy()
model = build(strategy)
hist = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=2, verbose=0, shuffle=False)
diff = max(
    float(np.abs(a - b).max())
    for a, b in zip(reference.get_weights(), model.get_weights(), strict=True)
)
assert diff < 1e-5, f"rank {strategy.cluster_resolver.task_id}: weights differ by {diff}"
np.testing.assert_allclose(hist.history["loss"], ref.history["loss"], rtol=1e-5)
checks = [
    strategy_cases.check_reduce_semantics,
    strategy_cases.check_mirrored_variable_table,
    strategy_cases.check_sync_on_read_table,
    strategy_cases.check_reduce_of_variables,
]
for check in checks:
    check(strategy)
report(
    hd.comm.world(),
    "train",
    replicas=strategy.num_replicas_in_sync,
    max_weight_diff=diff,
    checks=[c.__name__ for c in checks],
)
