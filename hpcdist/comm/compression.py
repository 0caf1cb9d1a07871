"""16-bit wire formats for all-reduce, fp16 (IEEE half) and bf16 (bfloat16), as a wrapper.

`CompressedBackend` wraps any backend's all-reduce, like torch DDP's ``fp16_compress_hook``:
encode the input into 16-bit words, all-reduce the words with the wrapped backend, decode. The
wrapped backend must reduce the format (its ``compression`` attribute): NCCL natively
(float16, bfloat16); on the host, where MPI has no half-precision types and cannot add them,
hpcdist's ring (`hpcdist.comm.ring`), which adds in float32 and rounds each partial sum back to
16 bits. numpy has no bfloat16: it is the upper half of a float32, rounded to nearest even.
Codecs work on numpy and CuPy arrays alike.

Error bound (documented and tested): with unit roundoff ``u`` (``2**-11`` for fp16, ``2**-8`` for
bf16), an all-reduce over ``n`` ranks rounds each input once and each partial sum once per ring
hop, so each element satisfies ``|result - exact| <= (n + 1) * u * sum_r |x_r|`` (first order
in ``u``). fp16 covers magnitudes up to 65504 (larger values become inf); bf16 has float32's
range.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.comm.backend import Backend, DelegatingBackend
from hpcdist.comm.checks import Header
from hpcdist.comm.deadline import Deadline
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.utils.xp import array_module

__all__ = ["Codec", "CompressedBackend", "get_codec", "unit_roundoff"]


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

    def encode(self, x: Any) -> Any:
        """Round ``x`` (numpy or CuPy) to the wire format (a new array of 16-bit words)."""
        if self.name == "fp16":
            return x.astype(np.float16)
        xp = array_module(x)
        bits = xp.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        rounding = ((bits >> 16) & np.uint32(1)) + np.uint32(0x7FFF)
        rounded = (bits + rounding) >> 16
        if xp is np:  # keep NaN a NaN (rounding could carry it into inf); no GPU sync for it
            nan = np.isnan(x)
            if nan.any():
                rounded[nan] = 0x7FC0
        return rounded.astype(np.uint16)

    def decode(self, words: Any, dtype: Any) -> Any:
        """Return the values of 16-bit words (numpy or CuPy) as ``dtype``."""
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


class CompressedBackend(DelegatingBackend):
    """A backend whose all-reduce travels in a 16-bit wire format; other collectives pass through.

    Args:
        inner: The backend that reduces the words; ``codec.name`` must be in its
            ``compression``.
        codec: The wire format.

    Raises:
        TypeError: ``inner`` cannot reduce the format.
    """

    dtypes = frozenset("efd")

    def __init__(self, inner: Backend, codec: Codec) -> None:
        if codec.name not in inner.compression:
            raise TypeError(f"the {inner.name} backend cannot reduce {codec.name} words")
        self.fallback = inner
        self.codec = codec
        self.name = f"{inner.name}+{codec.name}"
        self.collectives = inner.collectives
        self.devices = inner.devices

    def allreduce(
        self,
        src: Any,
        dst: Any,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
        codec: Codec | None = None,
    ) -> None:
        """Encode ``src``, all-reduce the words with the wrapped backend, decode into ``dst``."""
        if codec is not None:
            raise TypeError(f"the {self.name} backend already compresses its all-reduce")
        words = self.codec.encode(src)
        self.fallback.allreduce(words, words, op, header, deadline, self.codec)
        dst[...] = self.codec.decode(words, dst.dtype)
