"""Tensor fusion: group many small tensors into few large all-reduces.

The packing rule is TensorFlow's (``group_by_size``): walk the tensors in order and start a new
pack once the current pack holds more than ``bytes_per_pack`` bytes, so packs err on the side of
few and large. Tensors of different dtypes never share a pack (their order within a dtype is
kept). ``bytes_per_pack=0`` puts all tensors of a dtype in one pack.

On one node, packs that the shared-memory backend reduces as they are skip the pack buffer:
`hpcdist.comm.shm_backend.ShmBackend.allreduce_gather` copies the tensors straight into the
segment, chunk by chunk, and reduces each chunk into the results. There, a dtype's tensors
form one pack whatever ``bytes_per_pack`` says (`plan_packs` with ``whole``): the segment's
chunks already bound what moves per barrier, and each extra pack costs a header check and a
result buffer without moving data any sooner.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from hpcdist.utils.xp import array_module

__all__ = ["group_by_size", "pack", "plan_packs", "unpack"]


def group_by_size(sizes: Sequence[int], bytes_per_pack: int) -> list[list[int]]:
    """Return index groups of tensors with byte sizes ``sizes`` (TF's rule).

    Args:
        sizes: Byte size of each tensor, in order.
        bytes_per_pack: Threshold; 0 means one pack.

    Returns:
        Lists of indices, one per pack, in order.
    """
    if not sizes:
        return []
    if bytes_per_pack == 0:
        return [list(range(len(sizes)))]
    packs: list[list[int]] = []
    last = 0
    for i, size in enumerate(sizes):
        if not packs or last > bytes_per_pack:
            packs.append([])
            last = 0
        packs[-1].append(i)
        last += size
    return packs


def plan_packs(
    arrays: Sequence[np.ndarray],
    bytes_per_pack: int,
    whole: Callable[[np.dtype, int], bool] | None = None,
) -> list[list[int]]:
    """Group arrays by dtype (first-seen order), then by size within each dtype.

    Args:
        arrays: The arrays, in order.
        bytes_per_pack: TF's threshold (`group_by_size`); 0 means one pack per dtype.
        whole: Called with a dtype and the bytes of its arrays; True keeps them in one pack
            (a backend that streams a pack in its own chunks gains nothing from smaller ones).

    Returns:
        Lists of indices into ``arrays``; each list shares one dtype.
    """
    by_dtype: dict[np.dtype, list[int]] = {}
    for i, a in enumerate(arrays):
        by_dtype.setdefault(a.dtype, []).append(i)
    plan = []
    for dtype, indices in by_dtype.items():
        if bytes_per_pack == 0 or (
            whole is not None and whole(dtype, sum(arrays[i].nbytes for i in indices))
        ):
            plan.append(indices)
            continue
        groups = group_by_size([arrays[i].nbytes for i in indices], bytes_per_pack)
        plan.extend([indices[j] for j in group] for group in groups)
    return plan


def pack(arrays: Sequence[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    """Concatenate the flattened arrays into one 1-D buffer."""
    total = sum(a.size for a in arrays)
    if out is None:
        out = array_module(arrays[0]).empty(total, dtype=arrays[0].dtype)
    offset = 0
    for a in arrays:
        out[offset : offset + a.size] = a.reshape(-1)
        offset += a.size
    return out


def unpack(buffer: np.ndarray, like: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Split a packed buffer into arrays shaped like ``like`` (views of ``buffer``)."""
    out, offset = [], 0
    for a in like:
        size = a.size
        part = buffer[offset : offset + size]
        out.append(part if a.ndim == 1 else part.reshape(a.shape))
        offset += size
    return out
