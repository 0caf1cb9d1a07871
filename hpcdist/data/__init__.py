"""Input pipelines: a lazy numpy `Dataset` and tf.distribute's input options."""

from hpcdist.data.dataset import INFINITE, UNKNOWN, Dataset
from hpcdist.data.options import AutoShardPolicy, InputContext, InputOptions

INFINITE_CARDINALITY = INFINITE
UNKNOWN_CARDINALITY = UNKNOWN

__all__ = [
    "INFINITE_CARDINALITY",
    "UNKNOWN_CARDINALITY",
    "AutoShardPolicy",
    "Dataset",
    "InputContext",
    "InputOptions",
]
