"""TF's variable partitioners (``tf.distribute.experimental.partitioners``), as `hd.partitioners`.

They live with the parameter server (`hpcdist.strategies.ps.partitioners`); this module is the
public name.
"""

from hpcdist.strategies.ps.partitioners import (
    FixedShardsPartitioner,
    MaxSizePartitioner,
    MinSizePartitioner,
    Partitioner,
)

__all__ = ["FixedShardsPartitioner", "MaxSizePartitioner", "MinSizePartitioner", "Partitioner"]
