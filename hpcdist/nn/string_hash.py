"""TensorFlow's string hashes, so that hashed ids equal TF's.

``tf.strings.to_hash_bucket_fast`` is FarmHash's ``Fingerprint64`` of a string's bytes modulo
the number of buckets (from the ``pyfarmhash`` package, which wraps Google's FarmHash);
``tf.strings.to_hash_bucket_strong`` is SipHash-2-4 keyed by two 64-bit integers (TF's
``StrongKeyedHash``), written here in Python. Strings are bytes as TF holds them: numpy
``str`` arrays and Python ``str`` are UTF-8 encoded, ``bytes`` are taken as they are, and
integers are written in decimal first (``tf.strings.as_string``), as Keras' `Hashing` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import farmhash
import numpy as np

__all__ = [
    "fingerprint64",
    "siphash64",
    "to_hash_bucket_fast",
    "to_hash_bucket_strong",
    "unique_keys",
]

_MASK = (1 << 64) - 1


def fingerprint64(data: bytes) -> int:
    """FarmHash ``Fingerprint64`` of ``data`` (TF's ``tf.fingerprint``), as an unsigned int."""
    return farmhash.fingerprint64(data)


def _rotl(x: int, bits: int) -> int:
    return ((x << bits) | (x >> (64 - bits))) & _MASK


def _sip_round(v0: int, v1: int, v2: int, v3: int) -> tuple[int, int, int, int]:
    v0 = (v0 + v1) & _MASK
    v1 = _rotl(v1, 13) ^ v0
    v0 = _rotl(v0, 32)
    v2 = (v2 + v3) & _MASK
    v3 = _rotl(v3, 16) ^ v2
    v0 = (v0 + v3) & _MASK
    v3 = _rotl(v3, 21) ^ v0
    v2 = (v2 + v1) & _MASK
    v1 = _rotl(v1, 17) ^ v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


def siphash64(key: Sequence[int], data: bytes) -> int:
    """SipHash-2-4 of ``data`` under the 128-bit key ``(key[0], key[1])`` (TF's strong hash)."""
    k0, k1 = int(key[0]) & _MASK, int(key[1]) & _MASK
    v0, v1 = 0x736F6D6570736575 ^ k0, 0x646F72616E646F6D ^ k1
    v2, v3 = 0x6C7967656E657261 ^ k0, 0x7465646279746573 ^ k1
    size = len(data)
    end = size - size % 8
    for start in range(0, end, 8):
        m = int.from_bytes(data[start : start + 8], "little")
        v3 ^= m
        v0, v1, v2, v3 = _sip_round(*_sip_round(v0, v1, v2, v3))
        v0 ^= m
    last = ((size & 0xFF) << 56) | int.from_bytes(data[end:], "little")
    v3 ^= last
    v0, v1, v2, v3 = _sip_round(*_sip_round(v0, v1, v2, v3))
    v0 ^= last
    v2 ^= 0xFF
    for _ in range(4):
        v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
    return v0 ^ v1 ^ v2 ^ v3


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"expected str or bytes values, got {type(value).__name__} {value!r}")


def unique_keys(values: Any, kind: str) -> tuple[list[Any], np.ndarray, tuple[int, ...]]:
    """The distinct values of ``values`` as TF's keys, and where each element's key is.

    Args:
        values: An array, list or scalar of strings (``kind="string"``) or integers
            (``kind="int"``; ``"hash"`` also takes floats, truncated to integers as Keras'
            `Hashing` does, and strings).
        kind: ``"string"``, ``"int"`` or ``"hash"``.

    Returns:
        ``(keys, inverse, shape)``: the distinct keys (``bytes`` for strings, ``int`` for
        integers), the index into ``keys`` of each element (flat) and the input's shape.

    Raises:
        TypeError: Values of another kind.
    """
    array = np.asarray(values.numpy() if hasattr(values, "numpy") else values)
    shape = array.shape
    flat = array.reshape(-1)
    code = array.dtype.kind
    if code in "US" or (code == "O" and kind != "int"):
        if code == "O":
            flat = np.array([_as_bytes(v) for v in flat], dtype=object)
        if kind == "int":
            raise TypeError(f"expected integer values, got strings of dtype {array.dtype}")
        uniq, inverse = np.unique(flat, return_inverse=True)
        keys = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in uniq]
        return keys, inverse.reshape(-1), shape
    if code == "f" and kind == "hash":
        flat = flat.astype(np.int64)
    elif code not in "iub" and not (code == "O" and kind == "int"):
        raise TypeError(f"expected {kind} values, got an array of dtype {array.dtype}")
    uniq, inverse = np.unique(flat.astype(np.int64), return_inverse=True)
    return [int(v) for v in uniq], inverse.reshape(-1), shape


def _key_bytes(key: Any) -> bytes:
    return key if isinstance(key, bytes) else str(int(key)).encode("ascii")


def to_hash_bucket_fast(keys: Sequence[Any], num_buckets: int) -> np.ndarray:
    """``tf.strings.to_hash_bucket_fast``: ``Fingerprint64(key) % num_buckets`` (int64).

    Integer keys are hashed as their decimal strings (``tf.strings.as_string``).
    """
    n = int(num_buckets)
    return np.array([fingerprint64(_key_bytes(k)) % n for k in keys], dtype=np.int64)


def to_hash_bucket_strong(keys: Sequence[Any], num_buckets: int, key: Sequence[int]) -> np.ndarray:
    """``tf.strings.to_hash_bucket_strong``: ``SipHash(key, s) % num_buckets`` (int64)."""
    n = int(num_buckets)
    return np.array([siphash64(key, _key_bytes(k)) % n for k in keys], dtype=np.int64)
