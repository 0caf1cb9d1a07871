"""Freed arrays' memory kept for reuse: glibc malloc's thresholds set for array workloads.

By default glibc hands a freed block of 128 KiB or more back to the kernel (an ``mmap``'d chunk,
or the trimmed top of the heap; its thresholds adapt upwards only slowly), so the next array of
that size is faulted in again, page by page, each page zeroed. A training step that makes and
drops the same temporaries every step paid 1,900 minor page faults per step on the MNIST CNN at
batch 32, 4,100 at 128, 7,100 on ResNet-20 (``benchmarks/peers/models.py``' models); TF's and
torch's own caching allocators keep what they freed instead.

`keep_freed_memory` sets fixed thresholds with ``mallopt(3)``: blocks up to `MMAP_THRESHOLD`
(32 MiB, glibc's largest allowed value on 64-bit) come from the heap, whose free top is given
back only beyond `TRIM_THRESHOLD` (1 GiB), and which grows `TOP_PAD` (64 MiB) at a time. What a
step frees the next step reuses: no faults after the first step. The process's peak memory is
unchanged; its resident memory stays near that peak while it runs. Applied once per process,
when `hpcdist.core` is imported, unless ``HPCDIST_KEEP_FREED_MEMORY=0``
(`Settings.keep_freed_memory`) or one of glibc's own malloc variables is set (the user's choice
wins), and only with glibc (elsewhere nothing changes).
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["MMAP_THRESHOLD", "TOP_PAD", "TRIM_THRESHOLD", "keep_freed_memory", "status"]

MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 1 << 30
TOP_PAD = 64 << 20
# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
#: glibc's own malloc variables: when one is set, its thresholds are left alone.
GLIBC_VARIABLES = (
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_MMAP_MAX_",
    "GLIBC_TUNABLES",
)

_status: str | None = None  # None: not tried yet


def keep_freed_memory(enabled: bool = True) -> bool:
    """Set glibc's thresholds so that freed arrays' memory stays for reuse (once per process).

    Args:
        enabled: False records that the setting turned this off, and changes nothing.

    Returns:
        Whether the thresholds are set (False: not glibc, a glibc malloc variable is set, or
        ``mallopt`` refused).
    """
    global _status
    if _status is None:
        _status = _apply() if enabled else "left to glibc (HPCDIST_KEEP_FREED_MEMORY=0)"
    return _status.startswith("kept")


def status() -> str:
    """What `keep_freed_memory` did in this process, in words (for ``hpcdist info``)."""
    return "not applied (hpcdist.core not imported)" if _status is None else _status


def _apply() -> str:
    chosen = [name for name in GLIBC_VARIABLES if name in os.environ]
    if chosen:
        return f"left to glibc ({', '.join(chosen)} set)"
    try:
        libc = ctypes.CDLL(None)  # the process's own C library
        version = libc.gnu_get_libc_version  # glibc only
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):  # TypeError: Windows' CDLL needs a name
        return "left to the C library (not glibc)"
    version.restype = ctypes.c_char_p
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    values = ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    for done, (param, value) in enumerate((*values, (_M_TOP_PAD, TOP_PAD))):
        if mallopt(param, value) != 1:
            what = "partly set" if done else "left to glibc"
            return f"{what} (glibc {version().decode()} refused mallopt({param}, {value}))"
    return (
        f"kept (glibc {version().decode()}: blocks up to {MMAP_THRESHOLD >> 20} MiB from the "
        f"heap, its top trimmed beyond {TRIM_THRESHOLD >> 20} MiB)"
    )
