"""`InputContext`, `InputOptions` and `AutoShardPolicy` (``tf.distribute`` names)."""

from __future__ import annotations

import dataclasses
import enum

__all__ = ["AutoShardPolicy", "InputContext", "InputOptions"]


class AutoShardPolicy(enum.Enum):
    """How a dataset is split across workers.

    OFF: every worker sees the whole dataset. DATA: worker ``i`` keeps every ``n``-th element
    from ``i`` (its share of each global batch; ``from_hdf5``: a range of rows). FILE: worker
    ``i`` reads files ``i, i + n, ...`` of a pipeline that reads files (an error otherwise, as
    in TF). AUTO: FILE when the pipeline reads files, else DATA. HINT: TF's shard hints
    (hpcdist has none: as AUTO). The rules are `hpcdist.data.autoshard`'s.
    """

    AUTO = 0
    FILE = 1
    DATA = 2
    HINT = 3
    OFF = -1


@dataclasses.dataclass(frozen=True)
class InputOptions:
    """Options of distributed input.

    Args:
        experimental_fetch_to_device: Kept for compatibility (arrays stay in host memory).
        experimental_replication_mode: Kept for compatibility.
        experimental_place_dataset_on_device: Kept for compatibility.
        experimental_per_replica_buffer_size: Batches prefetched per replica.
        auto_shard_policy: How `experimental_distribute_dataset` shards across workers.
    """

    experimental_fetch_to_device: bool | None = None
    experimental_replication_mode: str = "PER_WORKER"
    experimental_place_dataset_on_device: bool = False
    experimental_per_replica_buffer_size: int = 1
    auto_shard_policy: AutoShardPolicy = AutoShardPolicy.AUTO


class InputContext:
    """What an input function needs to know about the distribution (TF's ``InputContext``).

    Args:
        num_input_pipelines: Number of input pipelines (workers).
        input_pipeline_id: This pipeline's index.
        num_replicas_in_sync: Replicas taking part in each step.
    """

    def __init__(
        self,
        num_input_pipelines: int = 1,
        input_pipeline_id: int = 0,
        num_replicas_in_sync: int = 1,
    ) -> None:
        if not 0 <= input_pipeline_id < num_input_pipelines:
            raise ValueError(
                f"input_pipeline_id must be in [0, {num_input_pipelines}), got {input_pipeline_id}"
            )
        self._num_input_pipelines = num_input_pipelines
        self._input_pipeline_id = input_pipeline_id
        self._num_replicas_in_sync = num_replicas_in_sync

    @property
    def num_input_pipelines(self) -> int:
        """Number of input pipelines."""
        return self._num_input_pipelines

    @property
    def input_pipeline_id(self) -> int:
        """This pipeline's index."""
        return self._input_pipeline_id

    @property
    def num_replicas_in_sync(self) -> int:
        """Replicas per step."""
        return self._num_replicas_in_sync

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        """Return ``global_batch_size / num_replicas_in_sync``.

        Raises:
            ValueError: The global batch does not divide evenly.
        """
        if global_batch_size % self._num_replicas_in_sync:
            raise ValueError(
                f"The `global_batch_size` {global_batch_size} is not divisible by "
                f"`num_replicas_in_sync` {self._num_replicas_in_sync}"
            )
        return global_batch_size // self._num_replicas_in_sync

    def __repr__(self) -> str:
        return (
            f"InputContext(num_input_pipelines={self._num_input_pipelines}, "
            f"input_pipeline_id={self._input_pipeline_id}, "
            f"num_replicas_in_sync={self._num_replicas_in_sync})"
        )
