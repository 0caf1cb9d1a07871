"""16-bit wire formats for all-reduce: fp16 (IEEE half) and bf16 (bfloat16).

MPI has no half-precision datatypes and cannot add them, so compressed values travel as 16-bit
words and are accumulated in the input's precision by hpcdist's ring algorithm
(`hpcdist.comm.ring`). numpy has no bfloat16: it is the upper half of a float32, rounded to
nearest even.

Error bound (documented and tested): with unit roundoff ``u`` (``2**-11`` for fp16, ``2**-8`` for
bf16), an all-reduce over ``n`` ranks rounds each input once, each partial sum once per ring
hop and the final sum once, so each element satisfies
``|result - exact| <= (n + 1) * u * sum_r |x_r|`` (first order in ``u``). fp16 covers
magnitudes up to 65504 (larger values become inf); bf16 has float32's range.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Codec", "get_codec", "unit_roundoff"]


class Codec:
    """Encodes float arrays into 16-bit words and back.

    Args:
        name: ``"fp16"`` or ``"bf16"``.
    """

    def __init__(self, name: str) -> None:
        if name not in ("fp16", "bf16"):
            raise ValueError(f"unknown compression {name!r}; expected 'fp16' or 'bf16'")
        self.name = name
        self.wire_dtype = np.dtype(np.float16) if name == "fp16" else np.dtype(np.uint16)

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Round ``x`` to the wire format (a new array of 16-bit words)."""
        if self.name == "fp16":
            return x.astype(np.float16)
        bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
        rounded = (bits + rounding) >> 16
        nan = np.isnan(x)
        if nan.any():  # keep NaN a NaN (rounding could carry it into inf)
            rounded[nan] = 0x7FC0
        return rounded.astype(np.uint16)

    def decode(self, words: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """Return the values of 16-bit words as ``dtype``."""
        if self.name == "fp16":
            return words.astype(dtype)
        return (words.astype(np.uint32) << 16).view(np.float32).astype(dtype, copy=False)


_CODECS = {name: Codec(name) for name in ("fp16", "bf16")}


def get_codec(name: str) -> Codec:
    """Return the codec for ``"fp16"`` or ``"bf16"``."""
    try:
        return _CODECS[name]
    except KeyError:
        raise ValueError(f"unknown compression {name!r}; expected 'fp16' or 'bf16'") from None


def unit_roundoff(name: str) -> float:
    """Unit roundoff of a wire format: ``2**-11`` (fp16) or ``2**-8`` (bf16)."""
    return {"fp16": 2.0**-11, "bf16": 2.0**-8}[name]
