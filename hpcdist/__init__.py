"""hpcdist: tf.distribute's programming model on MPI clusters.

``import hpcdist as hd``; see the README and ``docs/`` for the tour.

The package is lazy (PEP 562): ``import hpcdist`` loads nothing else, and each name below loads
its subpackage on first use, so ``import hpcdist.comm`` costs mpi4py and numpy only, never
h5py or the models. The layers and what each may import: ``docs/architecture.md``.
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
        utils,
    )
    from hpcdist.checkpoint import (
        Checkpoint,
        CheckpointManager,
        CheckpointOptions,
        PreemptionCheckpointHandler,
    )
    from hpcdist.comm import (
        CommunicationImplementation,
        CommunicationOptions,
        Communicator,
        ReduceOp,
    )
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
        "utils",
    }
)

# public name -> the module that defines it
_NAMES = {
    **dict.fromkeys(
        ["Checkpoint", "CheckpointManager", "CheckpointOptions", "PreemptionCheckpointHandler"],
        "hpcdist.checkpoint",
    ),
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
    "PreemptionCheckpointHandler",
    "ReduceOp",
    "ReductionToOneDevice",
    "RemoteValue",
    "RemoteValueStatus",
    "ReplicaContext",
    "ShardedVariable",
    "SyncOnReadVariable",
    "VariableAggregation",
    "VariableSynchronization",
    "__version__",
    "checkpoint",
    "cluster",
    "comm",
    "core",
    "data",
    "errors",
    "experimental_set_strategy",
    "get_replica_context",
    "get_strategy",
    "has_strategy",
    "in_cross_replica_context",
    "nn",
    "partitioners",
    "settings",
    "strategies",
    "utils",
]


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"hpcdist.{name}")
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'hpcdist' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_NAMES, *_SUBPACKAGES})
