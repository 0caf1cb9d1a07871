"""TF1 distributed training on MPI, used as ``import hpcdist.compat.v1 as tf``.

The names of TensorFlow's "Distributed TensorFlow" guide: ``tf.train.ClusterSpec``,
``tf.train.Server`` (one MPI rank per task), ``tf.device`` and
``tf.train.replica_device_setter`` (variables placed in the ps ranks' RMA windows),
asynchronous training and ``tf.train.SyncReplicasOptimizer``,
``tf.train.MonitoredTrainingSession`` with its hooks and checkpoints. A graph is a registry of
variables; a tensor is a zero-argument function (``def loss(): ...``) that ``session.run``
evaluates. See docs/tf1.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.compat.v1 import app, contrib, errors, nn, train
from hpcdist.compat.v1.array_ops import gather
from hpcdist.compat.v1.devices import DeviceSpec
from hpcdist.compat.v1.graph import (
    Graph,
    GraphKeys,
    Operation,
    add_to_collection,
    colocate_with,
    device,
    get_collection,
    get_collection_ref,
    get_default_graph,
    name_scope,
    reset_default_graph,
)
from hpcdist.compat.v1.initializers import (
    constant_initializer,
    ones_initializer,
    zeros_initializer,
)
from hpcdist.compat.v1.session import (
    Session,
    global_variables_initializer,
    local_variables_initializer,
    variables_initializer,
)
from hpcdist.compat.v1.variables import (
    Placeholder,
    Variable,
    assign,
    assign_add,
    constant,
    get_variable,
    global_variables,
    local_variables,
    placeholder,
    trainable_variables,
)
from hpcdist.core.autodiff import IndexedSlices
from hpcdist.core.math_ops import (
    abs,
    add,
    cast,
    divide,
    exp,
    log,
    matmul,
    maximum,
    multiply,
    negative,
    reduce_mean,
    reduce_sum,
    reshape,
    sigmoid,
    sqrt,
    square,
    subtract,
    tanh,
)

__all__ = [
    "ConfigProto",
    "DeviceSpec",
    "Graph",
    "GraphKeys",
    "IndexedSlices",
    "Operation",
    "Placeholder",
    "Session",
    "Variable",
    "abs",
    "add",
    "add_to_collection",
    "app",
    "assign",
    "assign_add",
    "cast",
    "colocate_with",
    "constant",
    "constant_initializer",
    "contrib",
    "device",
    "disable_eager_execution",
    "disable_v2_behavior",
    "divide",
    "errors",
    "exp",
    "float32",
    "float64",
    "gather",
    "get_collection",
    "get_collection_ref",
    "get_default_graph",
    "get_variable",
    "global_variables",
    "global_variables_initializer",
    "int32",
    "int64",
    "local_variables",
    "local_variables_initializer",
    "log",
    "matmul",
    "maximum",
    "multiply",
    "name_scope",
    "negative",
    "nn",
    "ones",
    "ones_initializer",
    "placeholder",
    "reduce_mean",
    "reduce_sum",
    "reset_default_graph",
    "reshape",
    "sigmoid",
    "sqrt",
    "square",
    "subtract",
    "tanh",
    "train",
    "trainable_variables",
    "variables_initializer",
    "zeros",
    "zeros_initializer",
]

float32, float64, int32, int64 = np.float32, np.float64, np.int32, np.int64


def zeros(shape: Any, dtype: Any = np.float32) -> np.ndarray:
    """An array of zeros (an initial value)."""
    return np.zeros(shape, dtype)


def ones(shape: Any, dtype: Any = np.float32) -> np.ndarray:
    """An array of ones (an initial value)."""
    return np.ones(shape, dtype)


def disable_eager_execution() -> None:
    """Nothing to do: TF1 programs here always build a graph of functions."""


disable_v2_behavior = disable_eager_execution


class ConfigProto:
    """``tf.ConfigProto``: accepted (``device_filters`` and the like have no effect)."""

    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)
