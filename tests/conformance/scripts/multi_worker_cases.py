"""The variable table under MultiWorkerMirroredStrategy on 2 workers x 1 replica, one library.

Usage: ``python multi_worker_cases.py tf OUT_DIR`` in each of two processes with ``TF_CONFIG``
naming the worker (TensorFlow), or ``mpiexec -n 2 python multi_worker_cases.py hpcdist OUT_DIR``.
Each worker writes ``OUT_DIR/task<N>.json`` (two ranks' long lines would interleave on a shared
stdout): for every case of tests/conformance/variable_table.py
(``sync/agg/action``) what this worker recorded, with arrays as lists and a raised exception as
``{"raised": [its class and bases' names], "message": ...}``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from tests.conformance import variable_table


@dataclass
class Raised:
    """A step that raised, as the names of its exception's class and bases."""

    names: list[str]
    message: str


def plain(x: Any) -> Any:
    """Tensors, variables and arrays as lists; containers recursively."""
    if isinstance(x, Raised | str | bytes | type(None) | bool):
        return x
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    if callable(getattr(x, "numpy", None)):
        return np.asarray(x.numpy()).tolist()
    if isinstance(x, int | float | np.generic | np.ndarray) or hasattr(x, "__array__"):
        return np.asarray(x).tolist()
    return x


def attempt(fn: Any) -> Any:
    """``fn()`` as plain data, or `Raised`."""
    try:
        return plain(fn())
    except Exception as error:  # recorded, compared by family by the test
        return Raised([c.__name__ for c in type(error).__mro__], f"{type(error).__name__}: {error}")


def encode(x: Any) -> Any:
    """`Raised` as a JSON object, containers recursively."""
    if isinstance(x, Raised):
        return {"raised": x.names, "message": x.message[:300]}
    if isinstance(x, dict):
        return {k: encode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [encode(v) for v in x]
    return x


def main() -> None:
    which = sys.argv[1]
    if which == "tf":
        import tensorflow as tf

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        lib = SimpleNamespace(tf=tf, distribute=tf.distribute)
        task = strategy.cluster_resolver.task_id
    else:
        import hpcdist as hd

        strategy = hd.MultiWorkerMirroredStrategy()
        lib = SimpleNamespace(tf=hd, distribute=hd)
        task = strategy.cluster_resolver.task_id
    out = {}
    for sync in variable_table.SYNCS:
        for agg in variable_table.AGGS:
            for action in variable_table.ACTIONS:
                out[f"{sync}/{agg}/{action}"] = encode(
                    variable_table.table_case(
                        lib, strategy, sync, agg, action, attempt, plain, Raised
                    )
                )
    out["num_replicas_in_sync"] = strategy.num_replicas_in_sync
    path = os.path.join(sys.argv[2], f"task{task}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
