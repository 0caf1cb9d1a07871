"""Which GPU a rank uses: the binding rule and binding (discovery: `hpcdist.cluster.devices`)."""

from __future__ import annotations

import os

from hpcdist.cluster.devices import parse_visible_devices, visible_gpu_count
from hpcdist.cluster.resolve import resolve
from hpcdist.settings import get_settings

__all__ = ["bind_gpu", "parse_visible_devices", "pick_gpu", "visible_gpu_count"]


def pick_gpu(local_rank: int, count: int, requested: int | None = None) -> int | None:
    """The CUDA ordinal a rank binds to, among the ``count`` devices it can see.

    The rule (Horovod's ``local_rank`` binding, aware of Slurm's own binding):

    - no device: None;
    - ``requested`` (``HPCDIST_GPU``) wins, and must be a visible ordinal;
    - one visible device: 0 (Slurm's ``--gpus-per-task=1`` or the resolver's
      ``auto_set_gpu`` already bound the task, whatever its local rank);
    - otherwise the local rank modulo ``count`` (ranks share devices only when a node runs
      more ranks than it has GPUs; the NCCL backend refuses that with a clear error).

    Raises:
        ValueError: ``requested`` is not a visible ordinal, or ``local_rank`` is negative.
    """
    if local_rank < 0:
        raise ValueError(f"local rank must be >= 0, got {local_rank}")
    if count <= 0:
        return None
    if requested is not None:
        if not 0 <= requested < count:
            raise ValueError(
                f"HPCDIST_GPU={requested} but this rank sees {count} GPU(s) "
                f"(ordinals 0..{count - 1}; CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})"
            )
        return requested
    if count == 1:
        return 0
    return local_rank % count


def bind_gpu(local_rank: int | None = None) -> int | None:
    """Make this rank's GPU CuPy's current device and return its ordinal (None without GPUs).

    Args:
        local_rank: Rank on this node; default from `hpcdist.cluster.resolve()`.
    """
    count = visible_gpu_count()
    if count == 0:
        return None
    if local_rank is None:
        local_rank = resolve().local_rank
    device = pick_gpu(local_rank, count, get_settings().gpu)
    import cupy

    cupy.cuda.Device(device).use()
    return device
