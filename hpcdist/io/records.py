"""`TFRecordWriter`: writes TFRecord files (``tf.io.TFRecordWriter``).

The framing and its masked CRC-32C are `hpcdist.data.tfrecord_format`'s (shared with the
reader, ``hpcdist.data.TFRecordDataset``); a compressed file is the whole record stream run
through one ``zlib`` compressor with the `TFRecordOptions` settings.
"""

from __future__ import annotations

import os
import zlib
from types import TracebackType
from typing import Any, BinaryIO

from hpcdist.data.tfrecord_format import DEFAULT_BUFFER_BYTES, encode_record, open_file
from hpcdist.data.tfrecord_options import TFRecordOptions, as_options

__all__ = ["TFRecordWriter"]


class TFRecordWriter:
    """Writes records to a TFRecord file (TF's ``tf.io.TFRecordWriter``); a context manager.

    Args:
        path: The file to write (replaced if it exists).
        options: `TFRecordOptions`, or a compression type: None, ``""``, ``"ZLIB"``, ``"GZIP"``.

    Raises:
        NotFoundError: The file's directory does not exist.
        InvalidArgumentError: ``options`` names an unknown compression or bad zlib settings.
    """

    def __init__(self, path: str | os.PathLike[str], options: Any = None) -> None:
        self._options: TFRecordOptions = as_options(options)
        self._path = os.fspath(path)
        self._compressor = self._options.compressor()
        self._flush_mode = (
            zlib.Z_NO_FLUSH if self._options.flush_mode is None else self._options.flush_mode
        )
        size = self._options.output_buffer_size or DEFAULT_BUFFER_BYTES
        self._file: BinaryIO | None = open_file(self._path, "wb", size)

    def _sink(self) -> BinaryIO:
        if self._file is None:
            raise ValueError(f"TFRecordWriter for {self._path} is closed: cannot write")
        return self._file

    def write(self, record: bytes | str) -> None:
        """Append one record (``str`` is written as UTF-8, as TF writes it)."""
        data = record.encode() if isinstance(record, str) else bytes(record)
        out = self._sink()
        block = encode_record(data)
        if self._compressor is None:
            out.write(block)
        elif self._flush_mode == zlib.Z_NO_FLUSH:
            out.write(self._compressor.compress(block))
        else:
            out.write(self._compressor.compress(block) + self._compressor.flush(self._flush_mode))

    def flush(self) -> None:
        """Push what was written to the file (a zlib sync flush when compressed)."""
        out = self._sink()
        if self._compressor is not None:
            out.write(self._compressor.flush(zlib.Z_SYNC_FLUSH))
        out.flush()

    def close(self) -> None:
        """Finish the compressed stream and close the file; closing twice does nothing."""
        if self._file is None:
            return
        try:
            if self._compressor is not None:
                self._file.write(self._compressor.flush(zlib.Z_FINISH))
        finally:
            self._file.close()
            self._file = None

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            self.close()
