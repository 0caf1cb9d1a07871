"""Input pipelines: a lazy numpy `Dataset`, ``tf.data.Options``, tf.distribute's input options."""

from hpcdist.data.dataset import INFINITE, UNKNOWN, Dataset
from hpcdist.data.dataset_options import (
    AutotuneOptions,
    DistributeOptions,
    ExternalStatePolicy,
    OptimizationOptions,
    Options,
    ThreadingOptions,
    auto_shard_policy_of,
)
from hpcdist.data.options import AutoShardPolicy, InputContext, InputOptions
from hpcdist.data.spec import TensorSpec
from hpcdist.data.tfrecord import TFRecordDataset

INFINITE_CARDINALITY = INFINITE
UNKNOWN_CARDINALITY = UNKNOWN
AUTOTUNE = -1  # tf.data.AUTOTUNE: `prefetch(AUTOTUNE)` picks the buffer size

__all__ = [
    "AUTOTUNE",
    "INFINITE_CARDINALITY",
    "UNKNOWN_CARDINALITY",
    "AutoShardPolicy",
    "AutotuneOptions",
    "Dataset",
    "DistributeOptions",
    "ExternalStatePolicy",
    "InputContext",
    "InputOptions",
    "OptimizationOptions",
    "Options",
    "TFRecordDataset",
    "TensorSpec",
    "ThreadingOptions",
    "auto_shard_policy_of",
]
