"""TFRecord files: TensorFlow's record framing and the checked reading of its records.

A file is a sequence of records, each (TF's ``record_writer.cc`` / ``record_reader.cc``)::

    uint64 length            little endian
    uint32 masked_crc32c(length's 8 bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

with ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8`` modulo 2**32. A compressed
file (``"ZLIB"``/``"GZIP"``) is that whole stream compressed; it is read through a streaming
decompressor, a bounded chunk at a time, so neither a file nor a record's length field decides
how much memory is taken before the bytes are there.

Errors: a missing file is `NotFoundError`; a bad checksum, a partial record at the end, a length
that claims more bytes than the file holds, or a truncated or corrupt compressed stream is
`DataLossError`, naming the file and the byte offset of the record, after every good record
before it.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from typing import Any, BinaryIO

import crc32c

from hpcdist.data.tfrecord_options import as_options
from hpcdist.errors import DataLossError, InvalidArgumentError, NotFoundError

__all__ = ["encode_record", "masked_crc32c", "open_file", "read_records"]


_MASK_DELTA = 0xA282EAD8
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
HEADER_BYTES = 12  # length + its CRC
FOOTER_BYTES = 4  # the data's CRC
DEFAULT_BUFFER_BYTES = 256 * 1024  # TF's TFRecordDataset default
_CHUNK = 16 * 1024 * 1024  # most bytes taken from a compressed stream at once
_BLOCK = 1 << 20  # bytes of records read from the stream at a time


def masked_crc32c(data: bytes | memoryview) -> int:
    """TF's masked CRC-32C of ``data`` (``crc32c::Mask``)."""
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def encode_record(data: bytes | memoryview) -> bytes:
    """One record's bytes: header, ``data``, footer."""
    length = _LENGTH.pack(len(data))
    return b"".join(
        (length, _CRC.pack(masked_crc32c(length)), data, _CRC.pack(masked_crc32c(data)))
    )


def open_file(path: str, mode: str, buffering: int) -> BinaryIO:
    """``open(path, mode)``, a missing file or directory raised as `NotFoundError`."""
    try:
        return open(path, mode, buffering=buffering)
    except FileNotFoundError:
        what = "file" if "r" in mode else "directory of the file"
        raise NotFoundError(f"{path}: no such {what} (opening a TFRecord file)") from None


class _Decompressed:
    """The decompressed bytes of a zlib or gzip file, read a bounded chunk at a time."""

    def __init__(self, file: BinaryIO, path: str, wbits: int, chunk: int) -> None:
        self._file = file
        self._path = path
        self._wbits = wbits
        self._chunk = chunk
        self._inflater = zlib.decompressobj(wbits)
        self._buffer = bytearray()
        self._eof = False
        self._error: DataLossError | None = None

    def _fill(self) -> bool:
        """Decompress more input; False at the clean end of the stream."""
        while not self._eof:
            data = self._inflater.unconsumed_tail or self._file.read(self._chunk)
            if not data:
                if self._inflater.eof:  # a complete stream (gzip: every member) ended
                    self._eof = True
                    return False
                raise DataLossError(
                    f"{self._path}: the compressed stream is truncated (it ends before "
                    f"zlib's end-of-stream marker, {len(self._buffer)} decompressed bytes in)"
                )
            try:
                out = self._inflater.decompress(data, self._chunk)
            except zlib.error as exc:
                raise DataLossError(f"{self._path}: corrupt compressed data ({exc})") from exc
            if self._inflater.eof and self._inflater.unused_data:
                rest = self._inflater.unused_data  # gzip: the next member follows
                self._inflater = zlib.decompressobj(self._wbits)
                out += self._inflater.decompress(rest, self._chunk)
            if out:
                self._buffer += out
                return True
        return False

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes (fewer only at the end), never decompressing far beyond ``n``.

        A damaged stream raises once the bytes decompressed before the damage are read.
        """
        if self._error is not None and not self._buffer:
            raise self._error
        try:
            while len(self._buffer) < n and self._fill():
                pass
        except DataLossError as exc:
            if not self._buffer:
                raise
            self._error = exc  # raised by the next read: the good bytes come first
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out


def _read_exact(stream: Any, n: int) -> bytes:
    """``n`` bytes, or fewer at the end of the stream, in chunks that the data bounds."""
    if n <= _CHUNK:
        return stream.read(n)
    parts = []
    while n > 0:
        part = stream.read(min(n, _CHUNK))
        if not part:
            break
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


def read_records(
    path: str | os.PathLike[str], compression_type: Any = None, buffer_size: int | None = None
) -> Iterator[bytes]:
    """The records of one TFRecord file, checked, in order (a generator).

    Args:
        path: The file.
        compression_type: None, ``""``, ``"ZLIB"``, ``"GZIP"`` or `TFRecordOptions`.
        buffer_size: Bytes read from the file at a time (TF's default 256 KiB).

    Raises:
        NotFoundError: The file does not exist (raised when iteration starts).
        DataLossError: A corrupt or truncated record, or a corrupt or truncated compressed
            stream; the message names the file and the byte offset (of the decompressed
            stream when compressed).
        InvalidArgumentError: ``buffer_size`` is not positive, or the compression is unknown.
    """
    options = as_options(compression_type)
    size = DEFAULT_BUFFER_BYTES if buffer_size is None else int(buffer_size)
    if size <= 0:
        raise InvalidArgumentError(f"buffer_size must be positive, got {buffer_size}")
    name = os.fspath(path)
    file = open_file(name, "rb", size)
    with file:
        if options.compression_type:
            stream: Any = _Decompressed(file, name, options.wbits(), size)
            where = "of the decompressed stream"
            limit = None
        else:
            stream = file
            where = ""
            limit = os.fstat(file.fileno()).st_size
        yield from _records(stream, name, where, limit)


def _records(stream: Any, name: str, where: str, limit: int | None) -> Iterator[bytes]:
    """The records of ``stream``; ``limit`` is its size when known (a plain file).

    The stream is read `_BLOCK` bytes at a time and the records are cut out of the block (a
    record larger than a block is read on its own, in chunks that the data bounds).
    """
    offset = 0
    at = f" {where}" if where else ""
    buf = b""
    pos = 0
    while True:
        if len(buf) - pos < HEADER_BYTES:
            buf, pos = buf[pos:] + stream.read(_BLOCK), 0
        avail = len(buf) - pos
        if not avail:
            return
        if avail < HEADER_BYTES:
            raise DataLossError(
                f"{name}: truncated record at byte offset {offset}{at}: the file ends "
                f"{avail} bytes into the {HEADER_BYTES}-byte header"
            )
        view = memoryview(buf)
        if _CRC.unpack_from(buf, pos + 8)[0] != masked_crc32c(view[pos : pos + 8]):
            raise DataLossError(
                f"{name}: corrupted record at byte offset {offset}{at}: the CRC-32C of the "
                "length field does not match"
            )
        (length,) = _LENGTH.unpack_from(buf, pos)
        need = length + FOOTER_BYTES
        if limit is not None and offset + HEADER_BYTES + need > limit:
            raise DataLossError(
                f"{name}: truncated record at byte offset {offset}{at}: its length field "
                f"claims {length} data bytes but the file has "
                f"{max(0, limit - offset - HEADER_BYTES - FOOTER_BYTES)} after the header"
            )
        total = HEADER_BYTES + need
        if avail < total:
            missing = total - avail
            more = (
                _read_exact(stream, missing) if need > _BLOCK else stream.read(max(_BLOCK, missing))
            )
            del view
            buf, pos = buf[pos:] + more, 0
            view = memoryview(buf)
            if len(buf) < total:
                raise DataLossError(
                    f"{name}: truncated record at byte offset {offset}{at}: its length field "
                    f"claims {length} data bytes but the stream ends "
                    f"{max(0, len(buf) - HEADER_BYTES - FOOTER_BYTES)} bytes in"
                )
        first = pos + HEADER_BYTES
        if _CRC.unpack_from(buf, first + length)[0] != masked_crc32c(view[first : first + length]):
            raise DataLossError(
                f"{name}: corrupted record at byte offset {offset}{at}: the CRC-32C of its "
                f"{length} data bytes does not match"
            )
        del view
        yield buf[first : first + length]
        pos += total
        offset += total
