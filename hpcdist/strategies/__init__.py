"""Strategies with tf.distribute semantics (API section 3)."""

from hpcdist.strategies.context import (
    experimental_set_strategy,
    get_replica_context,
    get_strategy,
    has_strategy,
    in_cross_replica_context,
)
from hpcdist.strategies.default import DefaultStrategy, OneDeviceStrategy
from hpcdist.strategies.input import DistributedDataset, DistributedIterator
from hpcdist.strategies.multi_worker import MultiWorkerMirroredStrategy
from hpcdist.strategies.replica_context import ReplicaContext
from hpcdist.strategies.strategy import Strategy, StrategyExtended, ValueContext
from hpcdist.strategies.values import DistributedValues, Mirrored, PerReplica

__all__ = [
    "DefaultStrategy",
    "DistributedDataset",
    "DistributedIterator",
    "DistributedValues",
    "Mirrored",
    "MultiWorkerMirroredStrategy",
    "OneDeviceStrategy",
    "PerReplica",
    "ReplicaContext",
    "Strategy",
    "StrategyExtended",
    "ValueContext",
    "experimental_set_strategy",
    "get_replica_context",
    "get_strategy",
    "has_strategy",
    "in_cross_replica_context",
]
