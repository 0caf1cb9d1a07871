"""hpcdist: tf.distribute's programming model on MPI clusters.

``import hpcdist as hd``; see the README and ``docs/`` for the tour.

The package is lazy (PEP 562): ``import hpcdist`` loads nothing else, and each name below loads
its subpackage on first use, so ``import hpcdist.comm`` costs mpi4py and numpy only, never
h5py or the models. The layers and what each may import: ``docs/architecture.md``.

The public names are listed once, in `_SUBPACKAGES`, `_MODULES` and `_NAMES`; ``__all__``,
the lazy lookup and ``dir()`` are derived from them.

TensorFlow's core names live here too (``hd.function``, ``hd.Variable``, ``hd.constant``,
``hd.cast``, ``hd.float32``, ``hd.random``, ``hd.config``, ``hd.latest_checkpoint``, ...): the
mapping from TF's names is in ``docs/porting.md``.
"""

# ruff: noqa: F401
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hpcdist._version import __version__

# For static type checkers only (nothing runs): the names of the tables below, imported where
# they are defined; tests/unit/test_root_names.py checks that both say the same. (ruff cannot
# read the derived __all__, hence the file's F401 exemption.)
if TYPE_CHECKING:
    from hpcdist import (
        checkpoint,
        cluster,
        comm,
        compat,
        core,
        data,
        errors,
        io,
        nn,
        partitioners,
        settings,
        strategies,
        tf_toplevel,
        timeline,
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
    from hpcdist.tf_toplevel import config
    from hpcdist.tf_toplevel.function import Function, function
    from hpcdist.tf_toplevel.variable import Variable

# hd.<name> -> the subpackage or module hpcdist.<name>
_SUBPACKAGES = (
    "checkpoint",
    "cluster",
    "comm",
    "compat",
    "core",
    "data",
    "errors",
    "io",
    "nn",
    "partitioners",
    "settings",
    "strategies",
    "tf_toplevel",
    "timeline",
    "utils",
)
# Loaded with a subpackage, so that its attribute exists as in TF: hd.compat.v1 (tf.compat.v1)
_WITH_SUBPACKAGE = {"compat": "hpcdist.compat.v1"}

# TF namespaces that are modules of another name: tf.config, tf.dtypes, tf.math, tf.random
_MODULES = {
    "config": "hpcdist.tf_toplevel.config",
    "dtypes": "hpcdist.core.dtypes",
    "math": "hpcdist.core.math_ops",
    "random": "hpcdist.core.random",
}

# module -> the public names the root takes from it
_NAMES = {
    "hpcdist.checkpoint": (
        "Checkpoint",
        "CheckpointManager",
        "CheckpointOptions",
        "PreemptionCheckpointHandler",
        "latest_checkpoint",
    ),
    "hpcdist.comm": (
        "CommunicationImplementation",
        "CommunicationOptions",
        "Communicator",
        "ReduceOp",
    ),
    "hpcdist.core": ("GradientTape", "IndexedSlices", "Tensor"),
    "hpcdist.core.dtypes": (
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
    ),
    "hpcdist.core.math_ops": (
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
    ),
    "hpcdist.core.tensors": ("constant", "convert_to_tensor"),
    "hpcdist.data": ("InputContext", "InputOptions"),
    "hpcdist.strategies": (
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
    ),
    "hpcdist.tf_toplevel.function": ("Function", "function"),
    "hpcdist.tf_toplevel.variable": ("Variable",),
}

# public name -> the module that defines it
_DEFINED_IN = {name: module for module, names in _NAMES.items() for name in names}

__all__ = sorted({"__version__", *_SUBPACKAGES, *_MODULES, *_DEFINED_IN})


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        value = importlib.import_module(f"hpcdist.{name}")
        if name in _WITH_SUBPACKAGE:
            importlib.import_module(_WITH_SUBPACKAGE[name])
        return value
    if name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    elif name in _DEFINED_IN:
        value = getattr(importlib.import_module(_DEFINED_IN[name]), name)
    else:
        raise AttributeError(f"module 'hpcdist' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
