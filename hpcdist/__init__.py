"""hpcdist: tf.distribute's programming model on MPI clusters.

``import hpcdist as hd``; see the README and ``docs/`` for the tour.

The package is lazy (PEP 562): ``import hpcdist`` loads nothing else, and each name below loads
its subpackage on first use, so ``import hpcdist.comm`` costs mpi4py and numpy only, never
h5py or the models. The layers and what each may import: ``docs/architecture.md``.

TensorFlow's core names live here too (``hd.function``, ``hd.Variable``, ``hd.constant``,
``hd.cast``, ``hd.float32``, ``hd.random``, ``hd.config``, ``hd.latest_checkpoint``, ...): the
mapping from TF's names is in ``docs/porting.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hpcdist._version import __version__

if TYPE_CHECKING:
    from hpcdist import (
        checkpoint,
        cluster,
        comm,
        core,
        data,
        errors,
        nn,
        partitioners,
        settings,
        strategies,
        tfcore,
        utils,
    )
    from hpcdist.checkpoint import (
        Checkpoint,
        CheckpointManager,
        CheckpointOptions,
        PreemptionCheckpointHandler,
        latest_checkpoint,
    )
    from hpcdist.comm import (
        CommunicationImplementation,
        CommunicationOptions,
        Communicator,
        ReduceOp,
    )
    from hpcdist.core import GradientTape, IndexedSlices, Tensor, dtypes, random
    from hpcdist.core import math_ops as math
    from hpcdist.core.dtypes import (
        as_dtype,
        bool,
        complex64,
        complex128,
        double,
        float16,
        float32,
        float64,
        half,
        int8,
        int16,
        int32,
        int64,
        string,
        uint8,
        uint16,
        uint32,
        uint64,
    )
    from hpcdist.core.math_ops import (
        abs,
        add,
        add_n,
        cast,
        clip_by_value,
        divide,
        equal,
        exp,
        gather,
        greater,
        greater_equal,
        less,
        less_equal,
        log,
        matmul,
        maximum,
        multiply,
        negative,
        not_equal,
        reduce_mean,
        reduce_sum,
        reshape,
        sigmoid,
        sqrt,
        square,
        subtract,
        tanh,
    )
    from hpcdist.core.tensors import constant, convert_to_tensor
    from hpcdist.data import InputContext, InputOptions
    from hpcdist.strategies import (
        CentralStorageStrategy,
        ClusterCoordinator,
        DefaultStrategy,
        HierarchicalCopyAllReduce,
        Mirrored,
        MirroredStrategy,
        MirroredVariable,
        MultiWorkerMirroredStrategy,
        NcclAllReduce,
        OneDeviceStrategy,
        ParameterServerStrategy,
        PerReplica,
        PerWorkerValues,
        ReductionToOneDevice,
        RemoteValue,
        RemoteValueStatus,
        ReplicaContext,
        ShardedVariable,
        SyncOnReadVariable,
        VariableAggregation,
        VariableSynchronization,
        experimental_set_strategy,
        get_replica_context,
        get_strategy,
        has_strategy,
        in_cross_replica_context,
    )
    from hpcdist.tfcore import config
    from hpcdist.tfcore.function import Function, function
    from hpcdist.tfcore.variable import Variable

_SUBPACKAGES = frozenset(
    {
        "checkpoint",
        "cluster",
        "comm",
        "core",
        "data",
        "errors",
        "nn",
        "partitioners",
        "settings",
        "strategies",
        "tfcore",
        "timeline",
        "utils",
    }
)

# TF namespaces that are modules of another name: tf.random, tf.dtypes, tf.math, tf.config
_MODULES = {
    "config": "hpcdist.tfcore.config",
    "dtypes": "hpcdist.core.dtypes",
    "math": "hpcdist.core.math_ops",
    "random": "hpcdist.core.random",
}

_DTYPES = [
    "as_dtype",
    "bool",
    "complex64",
    "complex128",
    "double",
    "float16",
    "float32",
    "float64",
    "half",
    "int8",
    "int16",
    "int32",
    "int64",
    "string",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]
_MATH = [
    "abs",
    "add",
    "add_n",
    "cast",
    "clip_by_value",
    "divide",
    "equal",
    "exp",
    "gather",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "log",
    "matmul",
    "maximum",
    "multiply",
    "negative",
    "not_equal",
    "reduce_mean",
    "reduce_sum",
    "reshape",
    "sigmoid",
    "sqrt",
    "square",
    "subtract",
    "tanh",
]

# public name -> the module that defines it
_NAMES = {
    **dict.fromkeys(
        [
            "Checkpoint",
            "CheckpointManager",
            "CheckpointOptions",
            "PreemptionCheckpointHandler",
            "latest_checkpoint",
        ],
        "hpcdist.checkpoint",
    ),
    **dict.fromkeys(["GradientTape", "IndexedSlices", "Tensor"], "hpcdist.core"),
    **dict.fromkeys(_DTYPES, "hpcdist.core.dtypes"),
    **dict.fromkeys(_MATH, "hpcdist.core.math_ops"),
    **dict.fromkeys(["constant", "convert_to_tensor"], "hpcdist.core.tensors"),
    **dict.fromkeys(["InputContext", "InputOptions"], "hpcdist.data"),
    **dict.fromkeys(["Function", "function"], "hpcdist.tfcore.function"),
    "Variable": "hpcdist.tfcore.variable",
    **dict.fromkeys(
        ["CommunicationImplementation", "CommunicationOptions", "Communicator", "ReduceOp"],
        "hpcdist.comm",
    ),
    **dict.fromkeys(
        [
            "CentralStorageStrategy",
            "ClusterCoordinator",
            "DefaultStrategy",
            "HierarchicalCopyAllReduce",
            "Mirrored",
            "MirroredStrategy",
            "MirroredVariable",
            "MultiWorkerMirroredStrategy",
            "NcclAllReduce",
            "OneDeviceStrategy",
            "ParameterServerStrategy",
            "PerReplica",
            "PerWorkerValues",
            "ReductionToOneDevice",
            "RemoteValue",
            "RemoteValueStatus",
            "ReplicaContext",
            "ShardedVariable",
            "SyncOnReadVariable",
            "VariableAggregation",
            "VariableSynchronization",
            "experimental_set_strategy",
            "get_replica_context",
            "get_strategy",
            "has_strategy",
            "in_cross_replica_context",
        ],
        "hpcdist.strategies",
    ),
}

__all__ = [
    "CentralStorageStrategy",
    "Checkpoint",
    "CheckpointManager",
    "CheckpointOptions",
    "ClusterCoordinator",
    "CommunicationImplementation",
    "CommunicationOptions",
    "Communicator",
    "DefaultStrategy",
    "Function",
    "GradientTape",
    "HierarchicalCopyAllReduce",
    "IndexedSlices",
    "InputContext",
    "InputOptions",
    "Mirrored",
    "MirroredStrategy",
    "MirroredVariable",
    "MultiWorkerMirroredStrategy",
    "NcclAllReduce",
    "OneDeviceStrategy",
    "ParameterServerStrategy",
    "PerReplica",
    "PerWorkerValues",
    "PreemptionCheckpointHandler",
    "ReduceOp",
    "ReductionToOneDevice",
    "RemoteValue",
    "RemoteValueStatus",
    "ReplicaContext",
    "ShardedVariable",
    "SyncOnReadVariable",
    "Tensor",
    "Variable",
    "VariableAggregation",
    "VariableSynchronization",
    "__version__",
    "abs",
    "add",
    "add_n",
    "as_dtype",
    "bool",
    "cast",
    "checkpoint",
    "clip_by_value",
    "cluster",
    "comm",
    "complex64",
    "complex128",
    "config",
    "constant",
    "convert_to_tensor",
    "core",
    "data",
    "divide",
    "double",
    "dtypes",
    "equal",
    "errors",
    "exp",
    "experimental_set_strategy",
    "float16",
    "float32",
    "float64",
    "function",
    "gather",
    "get_replica_context",
    "get_strategy",
    "greater",
    "greater_equal",
    "half",
    "has_strategy",
    "in_cross_replica_context",
    "int8",
    "int16",
    "int32",
    "int64",
    "latest_checkpoint",
    "less",
    "less_equal",
    "log",
    "math",
    "matmul",
    "maximum",
    "multiply",
    "negative",
    "nn",
    "not_equal",
    "partitioners",
    "random",
    "reduce_mean",
    "reduce_sum",
    "reshape",
    "settings",
    "sigmoid",
    "sqrt",
    "square",
    "strategies",
    "string",
    "subtract",
    "tanh",
    "tfcore",
    "timeline",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "utils",
]


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"hpcdist.{name}")
    if name in _MODULES:
        value = importlib.import_module(_MODULES[name])
        globals()[name] = value
        return value
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'hpcdist' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_NAMES, *_SUBPACKAGES, *_MODULES})
