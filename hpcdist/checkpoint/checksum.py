"""Checksums of checkpoint datasets: CRC-32C (written), zlib's CRC-32 (read in older files).

Every dataset carries one attribute naming its algorithm: ``crc32c`` (format version 2, as
TensorFlow's checkpoints use; the ``crc32c`` package runs it on the CPU's CRC instruction at
about 11 GB/s here, against 2.3 GB/s for zlib's CRC-32) or ``crc32`` (version 1 files, still
read). Both libraries release the GIL, so `Checksums` computes them on worker threads while the
caller writes or maps the next dataset.
"""

from __future__ import annotations

import concurrent.futures
import os
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import crc32c
import numpy as np

__all__ = ["ALGORITHMS", "WRITTEN", "Checksums", "byte_view", "expected_checksum"]

#: Arrays smaller than this are checksummed on the calling thread (a task costs more).
_INLINE_BYTES = 1 << 20

#: The attribute written with every dataset.
WRITTEN = "crc32c"

#: Attribute name -> function ``(buffer, running value) -> value``, preferred first.
ALGORITHMS: dict[str, Callable[[Any, int], int]] = {
    "crc32c": lambda data, value: crc32c.crc32c(data, value),
    "crc32": lambda data, value: zlib.crc32(data, value) & 0xFFFFFFFF,
}


def byte_view(array: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array, without a copy (one byte per element)."""
    return memoryview(array.reshape(-1).view(np.uint8))


def expected_checksum(attrs: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(algorithm, value)`` recorded in a dataset's attributes, or None when there is none."""
    for name in ALGORITHMS:
        if name in attrs:
            try:
                return name, int(attrs[name])
            except (TypeError, ValueError):
                return None
    return None


class Checksums:
    """Checksums computed on worker threads; used as a context manager.

    Args:
        algorithm: A key of `ALGORITHMS` for `submit` without one.
        workers: Threads (default: 2, or 1 on a one-core machine).
    """

    def __init__(self, algorithm: str = WRITTEN, workers: int | None = None) -> None:
        self.algorithm = algorithm
        count = workers or max(1, min(2, os.cpu_count() or 1))
        self._pool = concurrent.futures.ThreadPoolExecutor(count, "hpcdist-checksum")

    def __enter__(self) -> Checksums:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def submit(
        self, array: np.ndarray, value: int = 0, algorithm: str | None = None
    ) -> concurrent.futures.Future:
        """Start the checksum of ``array``'s bytes (C-contiguous), continuing from ``value``.

        The array must stay unchanged until the future is done.
        """
        function = ALGORITHMS[algorithm or self.algorithm]
        if array.nbytes >= _INLINE_BYTES:
            return self._pool.submit(function, byte_view(array), value)
        done: concurrent.futures.Future = concurrent.futures.Future()
        done.set_result(function(byte_view(array), value))
        return done
