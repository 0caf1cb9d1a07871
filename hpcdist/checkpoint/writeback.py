"""Page-cache hints for checkpoint writes: write back early, forget a replaced file first.

A checkpoint is fsynced before it is renamed into place. Left alone, the kernel holds most of
the file in dirty pages until that fsync, and the disk idles while the datasets are copied into
the page cache. `start_writeback` asks Linux to begin writing a range now
(``sync_file_range(SYNC_FILE_RANGE_WRITE)``, asynchronous, no durability promise: the fsync
still gives that); the disk then writes one dataset while the next is copied. Measured here on
1 GiB: 1.24-1.28x raw h5py + fsync without it, 0.88-1.08x with it. Elsewhere (no
``sync_file_range``) it does nothing.

A save that replaces a file (``write`` to the same path) fills fresh page cache for the new
file while the old one's pages stay cached until the rename; when memory is short the kernel
reclaims other pages for it (raw h5py's ``"w"`` mode truncates the old file first and reuses
its pages). `forget_cached` drops the old file's clean cached pages before writing (the file on
disk is untouched): 1.75x raw h5py without it, 1.20x with it, same run.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Callable

__all__ = ["forget_cached", "start_writeback"]

_SYNC_FILE_RANGE_WRITE = 2


def _load() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_sync_file_range = _load()


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Start writing bytes ``[offset, offset + nbytes)`` of ``fd`` to disk; a hint only.

    Returns at once (the GIL is released during the call); errors are ignored: the caller's
    fsync reports any real failure.
    """
    if _sync_file_range is None or nbytes <= 0 or offset < 0:
        return
    with contextlib.suppress(OSError, ctypes.ArgumentError):
        _sync_file_range(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)


def forget_cached(path: str) -> None:
    """Drop the clean cached pages of ``path`` (about to be replaced); a hint only.

    The file's contents are unchanged, and a reader still gets them (from disk). Nothing
    happens when the file does not exist or the system has no ``posix_fadvise``.
    """
    if not hasattr(os, "posix_fadvise"):
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass
    finally:
        os.close(fd)
