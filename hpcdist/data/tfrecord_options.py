"""`TFRecordOptions`: the compression of a TFRecord file (``tf.io.TFRecordOptions``).

A compressed TFRecord file is the whole record stream run through zlib: ``"ZLIB"`` is the zlib
format (RFC 1950), ``"GZIP"`` the gzip format (RFC 1952), both with TF's defaults (window bits
15, memory level 9, the default compression level and strategy). No compression is ``None`` or
``""``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from hpcdist.errors import InvalidArgumentError

__all__ = ["TFRecordCompressionType", "TFRecordOptions", "as_options", "compression_type_string"]


class TFRecordCompressionType:
    """TF1's compression enum (``tf.compat.v1.io.TFRecordCompressionType``)."""

    NONE = 0
    ZLIB = 1
    GZIP = 2


_NAMES = {
    None: "",
    "": "",
    "ZLIB": "ZLIB",
    "GZIP": "GZIP",
    TFRecordCompressionType.NONE: "",
    TFRecordCompressionType.ZLIB: "ZLIB",
    TFRecordCompressionType.GZIP: "GZIP",
}


def compression_type_string(compression_type: Any) -> str:
    """``""``, ``"ZLIB"`` or ``"GZIP"`` for a compression type, a `TFRecordOptions` or None.

    Raises:
        InvalidArgumentError: The compression type is none of these.
    """
    if isinstance(compression_type, TFRecordOptions):
        compression_type = compression_type.compression_type
    key = compression_type.upper() if isinstance(compression_type, str) else compression_type
    try:
        return _NAMES[key]
    except (KeyError, TypeError):
        raise InvalidArgumentError(
            f"unsupported compression_type {compression_type!r}: expected None, '', 'ZLIB' or "
            "'GZIP'"
        ) from None


@dataclass
class TFRecordOptions:
    """How a TFRecord file is compressed (TF's ``tf.io.TFRecordOptions``).

    Args:
        compression_type: None or ``""`` (no compression), ``"ZLIB"`` or ``"GZIP"``.
        flush_mode: zlib's flush mode of every write (TF's default ``Z_NO_FLUSH``).
        input_buffer_size: Bytes read from the file at a time.
        output_buffer_size: Bytes buffered before a write to the file.
        window_bits: zlib's window size, 8-15 (default 15).
        compression_level: 0-9, or -1 for zlib's default (6).
        compression_method: Only ``zlib.DEFLATED`` (8).
        mem_level: zlib's memory level, 1-9 (default 9, as TF).
        compression_strategy: zlib's strategy (default ``Z_DEFAULT_STRATEGY``).
    """

    compression_type: Any = None
    flush_mode: int | None = None
    input_buffer_size: int | None = None
    output_buffer_size: int | None = None
    window_bits: int | None = None
    compression_level: int | None = None
    compression_method: int | None = None
    mem_level: int | None = None
    compression_strategy: int | None = None

    def __post_init__(self) -> None:
        self.compression_type = compression_type_string(self.compression_type)

    @classmethod
    def get_compression_type_string(cls, options: Any) -> str:
        """TF's helper: the compression name of ``options`` (options, a name or None)."""
        return compression_type_string(options)

    def wbits(self) -> int:
        """The ``wbits`` of zlib for this format: +16 selects gzip's header and trailer."""
        bits = self.window_bits if self.window_bits is not None else zlib.MAX_WBITS
        return bits + 16 if self.compression_type == "GZIP" else bits

    def compressor(self) -> Any:
        """A fresh ``zlib.compressobj`` with these settings (None when not compressed).

        Raises:
            InvalidArgumentError: A setting is outside zlib's range.
        """
        if not self.compression_type:
            return None
        try:
            return zlib.compressobj(
                -1 if self.compression_level is None else self.compression_level,
                zlib.DEFLATED if self.compression_method is None else self.compression_method,
                self.wbits(),
                9 if self.mem_level is None else self.mem_level,
                zlib.Z_DEFAULT_STRATEGY
                if self.compression_strategy is None
                else self.compression_strategy,
            )
        except (ValueError, zlib.error) as exc:
            raise InvalidArgumentError(f"invalid zlib settings in {self}: {exc}") from exc


def as_options(options: Any) -> TFRecordOptions:
    """``options`` as `TFRecordOptions` (it may be one, a compression name or None)."""
    if isinstance(options, TFRecordOptions):
        return options
    return TFRecordOptions(compression_type=options)
