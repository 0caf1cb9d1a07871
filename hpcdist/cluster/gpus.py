"""GPU discovery without importing a GPU framework unless one is installed."""

from __future__ import annotations

import importlib.util
import os

__all__ = ["bind_gpu", "parse_visible_devices", "pick_gpu", "visible_gpu_count"]


def parse_visible_devices(value: str | None) -> list[str] | None:
    """Parse ``CUDA_VISIBLE_DEVICES``; None when unset, ``[]`` when set but empty."""
    if value is None:
        return None
    return [d.strip() for d in value.split(",") if d.strip()]


def visible_gpu_count() -> int:
    """Return the number of CUDA devices this process can use (0 without CuPy or devices)."""
    visible = parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if visible == []:
        return 0
    if importlib.util.find_spec("cupy") is None:
        return 0
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no driver, no device: CuPy raises its own runtime errors
        return 0


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
        from hpcdist.cluster.resolve import resolve

        local_rank = resolve().local_rank
    from hpcdist.settings import get_settings

    device = pick_gpu(local_rank, count, get_settings().gpu)
    import cupy

    cupy.cuda.Device(device).use()
    return device
