"""hpcdist: tf.distribute's programming model on MPI clusters.

``import hpcdist as hd``; see the README and ``docs/`` for the tour.
"""

from hpcdist import checkpoint, cluster, comm, data, errors, nn, settings, strategies
from hpcdist._version import __version__
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
    DefaultStrategy,
    HierarchicalCopyAllReduce,
    Mirrored,
    MirroredStrategy,
    MirroredVariable,
    MultiWorkerMirroredStrategy,
    NcclAllReduce,
    OneDeviceStrategy,
    PerReplica,
    ReductionToOneDevice,
    ReplicaContext,
    SyncOnReadVariable,
    VariableAggregation,
    VariableSynchronization,
    experimental_set_strategy,
    get_replica_context,
    get_strategy,
    has_strategy,
    in_cross_replica_context,
)

__all__ = [
    "CentralStorageStrategy",
    "Checkpoint",
    "CheckpointManager",
    "CheckpointOptions",
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
    "PerReplica",
    "PreemptionCheckpointHandler",
    "ReduceOp",
    "ReductionToOneDevice",
    "ReplicaContext",
    "SyncOnReadVariable",
    "VariableAggregation",
    "VariableSynchronization",
    "__version__",
    "checkpoint",
    "cluster",
    "comm",
    "data",
    "errors",
    "experimental_set_strategy",
    "get_replica_context",
    "get_strategy",
    "has_strategy",
    "in_cross_replica_context",
    "nn",
    "settings",
    "strategies",
]
