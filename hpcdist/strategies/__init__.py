"""Strategies with tf.distribute semantics."""

from hpcdist.core.context import (
    experimental_set_strategy,
    get_replica_context,
    get_strategy,
    has_strategy,
    in_cross_replica_context,
)
from hpcdist.core.variables import Variable, VariableAggregation, VariableSynchronization
from hpcdist.strategies.central_storage import CentralStorageStrategy
from hpcdist.strategies.cross_device_ops import (
    CrossDeviceOps,
    HierarchicalCopyAllReduce,
    NcclAllReduce,
    ReductionToOneDevice,
)
from hpcdist.strategies.default import DefaultStrategy, OneDeviceStrategy
from hpcdist.strategies.input import DistributedDataset, DistributedIterator
from hpcdist.strategies.mirrored import MirroredStrategy
from hpcdist.strategies.multi_worker import MultiWorkerMirroredStrategy
from hpcdist.strategies.ps.coordinator import (
    ClusterCoordinator,
    PerWorkerDataset,
    PerWorkerValues,
    RemoteValue,
    RemoteValueStatus,
)
from hpcdist.strategies.ps.strategy import ParameterServerStrategy
from hpcdist.strategies.ps.variables import PSVariable, ShardedVariable
from hpcdist.strategies.replica_context import ReplicaContext
from hpcdist.strategies.strategy import Strategy, StrategyExtended, ValueContext
from hpcdist.strategies.values import DistributedValues, Mirrored, PerReplica
from hpcdist.strategies.variables import MirroredVariable, ReplicaCopy, SyncOnReadVariable

__all__ = [
    "CentralStorageStrategy",
    "ClusterCoordinator",
    "CrossDeviceOps",
    "DefaultStrategy",
    "DistributedDataset",
    "DistributedIterator",
    "DistributedValues",
    "HierarchicalCopyAllReduce",
    "Mirrored",
    "MirroredStrategy",
    "MirroredVariable",
    "MultiWorkerMirroredStrategy",
    "NcclAllReduce",
    "OneDeviceStrategy",
    "PSVariable",
    "ParameterServerStrategy",
    "PerReplica",
    "PerWorkerDataset",
    "PerWorkerValues",
    "ReductionToOneDevice",
    "RemoteValue",
    "RemoteValueStatus",
    "ReplicaContext",
    "ReplicaCopy",
    "ShardedVariable",
    "Strategy",
    "StrategyExtended",
    "SyncOnReadVariable",
    "ValueContext",
    "Variable",
    "VariableAggregation",
    "VariableSynchronization",
    "experimental_set_strategy",
    "get_replica_context",
    "get_strategy",
    "has_strategy",
    "in_cross_replica_context",
]
