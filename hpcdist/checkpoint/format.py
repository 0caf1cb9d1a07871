"""The on-disk format: one HDF5 file per checkpoint, written atomically, checked on read.

Layout: every saved array is a dataset at its path (``model/weights/0``,
``optimizer/slots/m/model/weights/0``, ...); the root has ``format`` and ``version``
attributes. Integrity: each dataset carries a ``crc32c`` attribute, the CRC-32C of its bytes
(version 2; version 1 files carry zlib's ``crc32`` and are still read), checked on read; see
`hpcdist.checkpoint.checksum`. HDF5's Fletcher-32 filter measured 4x slower than zlib here and
needs chunked storage, which halves h5py's own throughput. No pickle anywhere: loading an
untrusted checkpoint cannot run code. A file becomes visible only once complete: it is written
under a temporary name in the same directory, flushed, fsynced, then renamed (and the directory
fsynced). The file's mode follows the umask, like any file the process creates.

Reading maps large contiguous datasets into memory (``mmap`` of the file h5py opened) instead of
copying them: the checksum reads the file's cached pages in place, and a restore copies them
once, into the variables. hpcdist never rewrites a checkpoint file in place (a new file is
renamed over it), so the mapped pages stay those of the file that was checked.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import mmap
import os
import re
import secrets
from collections.abc import Iterator, Mapping

import h5py
import numpy as np

from hpcdist.checkpoint.checksum import WRITTEN, Checksums, expected_checksum
from hpcdist.checkpoint.writeback import forget_cached, start_writeback
from hpcdist.errors import HpcdistError, NotFoundError

__all__ = [
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointMismatchError",
    "CheckpointNotFoundError",
    "CheckpointWriteError",
    "atomic_write_text",
    "read_arrays",
    "write_arrays",
]

FORMAT = "hpcdist-checkpoint"
#: 2: CRC-32C checksums (``crc32c``); 1: zlib's CRC-32 (``crc32``), still read.
VERSION = 2

#: Datasets at least this large are read by mapping the file; smaller ones are copied.
_MAP_MIN_BYTES = 1 << 20


class CheckpointError(HpcdistError, ValueError):
    """A checkpoint could not be written, read or restored (the subclasses say why)."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint file is missing, truncated, corrupt or not an hpcdist checkpoint.

    The only error `CheckpointManager.restore_or_initialize` skips (to an older checkpoint).
    """


class CheckpointNotFoundError(CheckpointCorruptError, NotFoundError):
    """The checkpoint file does not exist (also a TF ``NotFoundError``, a ``FileNotFoundError``)."""


class CheckpointMismatchError(CheckpointError):
    """A readable checkpoint does not fit the objects (shapes, state keys, format version).

    Nothing was changed: a restore checks every value before it assigns any.
    """


class CheckpointWriteError(CheckpointError, OSError):
    """Writing a checkpoint failed (disk full, permissions, ...); ``errno`` says why.

    Args:
        code: The errno (0 when unknown).
        message: What failed, naming the file.
        filename: The file that could not be written.
    """

    def __init__(self, code: int, message: str, filename: str | None) -> None:
        OSError.__init__(self, code, message, filename)
        self.message = message

    def __str__(self) -> str:
        return self.message  # already names the file and the errno


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_arrays(
    path: str, arrays: Mapping[str, np.ndarray], attrs: Mapping[str, object] = ()
) -> None:
    """Write ``arrays`` to ``path`` atomically (temporary file, fsync, rename).

    Args:
        path: Destination file.
        arrays: Dataset path -> array, or an object with ``shape``, ``dtype`` and ``slices()``
            yielding consecutive pieces along the first axis (a sharded variable): written
            piece by piece, never whole in memory.
        attrs: Extra root attributes (numbers or strings).

    Raises:
        CheckpointWriteError: The file could not be written (names it and the errno; a full
            disk is errno 28, ENOSPC); ``path`` is left as it was.
    """
    try:
        _write(path, arrays, attrs)
    except (OSError, RuntimeError) as exc:
        raise _write_error(path, exc) from exc


def _write_error(path: str, exc: BaseException) -> CheckpointWriteError:
    """h5py reports a failed write as OSError or RuntimeError, the errno in the text at times."""
    code = getattr(exc, "errno", None)
    if not code:
        found = re.search(r"errno = (\d+)", str(exc))
        code = int(found.group(1)) if found else 0
    reason = os.strerror(code) if code else type(exc).__name__
    detail = str(exc).split("\n", 1)[0][:300]
    return CheckpointWriteError(
        code, f"cannot write {path!r}: {reason} (errno {code}): {detail}", path
    )


def _write(path: str, arrays: Mapping[str, np.ndarray], attrs: Mapping[str, object]) -> None:
    """Write every dataset straight from the caller's arrays, checksums on worker threads."""
    forget_cached(path)  # the file this one replaces: its pages make room for the new ones
    with (
        _atomic(path, suffix=".h5") as tmp,
        Checksums() as sums,
        h5py.File(tmp, "w") as f,
    ):
        f.attrs["format"] = FORMAT
        f.attrs["version"] = VERSION
        for key, value in dict(attrs).items():
            f.attrs[key] = value
        pending: list[tuple[h5py.Dataset, concurrent.futures.Future]] = []
        for name, array in arrays.items():
            if hasattr(array, "slices"):
                dset = _write_slices(f, name, array, sums)
            else:
                array = np.asarray(array, order="C")
                future = sums.submit(array)  # runs while h5py writes the same bytes
                dset = f.create_dataset(name, data=array)
                pending.append((dset, future))
            _start_writeback(f, dset)
        for dset, future in pending:
            dset.attrs[WRITTEN] = future.result()
        f.flush()


def _start_writeback(f: h5py.File, dset: h5py.Dataset) -> None:
    """Let the disk write a dataset's bytes while the next one is written (see `writeback`)."""
    offset = dset.id.get_offset()
    if offset is not None and f.driver == "sec2":
        start_writeback(f.id.get_vfd_handle(), offset, dset.id.get_storage_size())


def _write_slices(f: h5py.File, name: str, value: object, sums: Checksums) -> h5py.Dataset:
    """One dataset of the full logical shape, filled slice by slice (the checksum chained).

    Each slice's checksum runs while it is written and ends before the next slice is asked for,
    so a `SlicedValue` may reuse one buffer for its slices.
    """
    dset = f.create_dataset(name, shape=value.shape, dtype=value.dtype)
    crc, lo = 0, 0
    for part in value.slices():
        part = np.asarray(part, dtype=value.dtype, order="C")
        future = sums.submit(part, crc)
        dset[lo : lo + len(part)] = part
        crc = future.result()
        lo += len(part)
    if lo != value.shape[0]:
        raise ValueError(f"{name}: slices cover {lo} of {value.shape[0]} rows")
    dset.attrs[WRITTEN] = crc
    return dset


def read_arrays(path: str) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    """Read every array of a checkpoint and check it.

    Arrays of 1 MiB or more are read-only views of the file mapped into memory (copy one to
    keep it past the restore, or to change it); smaller ones are ordinary arrays. Every
    checksum has passed when this returns.

    Returns:
        ``(arrays, root attributes)``.

    Raises:
        CheckpointCorruptError: Missing, unreadable, truncated, foreign or corrupt (a dataset
            without a checksum, or failing it); names the file.
        CheckpointMismatchError: Written by a newer format version than this one reads.
    """
    if not os.path.exists(path):
        raise CheckpointNotFoundError(f"checkpoint file {path!r} does not exist")
    arrays: dict[str, np.ndarray] = {}
    checks: list[tuple[str, _Check | None]] = []
    with Checksums() as sums:  # each checksum runs while the next dataset is mapped
        try:
            with h5py.File(path, "r") as f:
                if f.attrs.get("format") != FORMAT:
                    raise CheckpointCorruptError(
                        f"{path!r} is not an hpcdist checkpoint (no format attribute)"
                    )
                _check_version(path, f.attrs.get("version"))
                attrs = {k: v for k, v in f.attrs.items() if k not in ("format", "version")}
                datasets: list[tuple[str, h5py.Dataset]] = []

                def visit(name: str, obj: object) -> None:
                    if isinstance(obj, h5py.Dataset):
                        datasets.append((name, obj))

                f.visititems(visit)
                mapping = _FileMap(f)
                for name, dset in datasets:
                    array = mapping.view(dset)
                    arrays[name] = dset[()] if array is None else array
                    expected = expected_checksum(dset.attrs)
                    if expected is None:
                        checks.append((name, None))
                        continue
                    algorithm, value = expected
                    data = np.asarray(arrays[name], order="C")
                    checks.append((name, _Check(sums.submit(data, algorithm=algorithm), value)))
        except CheckpointError:
            raise
        except (OSError, KeyError, ValueError, RuntimeError) as exc:
            raise CheckpointCorruptError(
                f"checkpoint file {path!r} is unreadable or truncated: {exc}"
            ) from None
        for name, check in checks:
            if check is None:
                raise CheckpointCorruptError(
                    f"checkpoint {path!r}: dataset {name!r} has no checksum"
                )
            if not check.passed():
                raise CheckpointCorruptError(
                    f"checkpoint {path!r}: dataset {name!r} fails its checksum"
                )
    return arrays, attrs


class _Check:
    """A checksum being computed and the value the file records."""

    def __init__(self, future: concurrent.futures.Future, expected: int) -> None:
        self.future, self.expected = future, expected

    def passed(self) -> bool:
        """Wait for the checksum; whether it matches."""
        return self.future.result() == self.expected


class _FileMap:
    """The file h5py opened, mapped read-only once (on the first large dataset), and views of it.

    Mapping the file h5py holds open (not the path) reads that very file, even if a save has
    renamed another over its path since. One mapping per read, whatever the dataset count.
    """

    def __init__(self, f: h5py.File) -> None:
        self._file = f
        self._map: mmap.mmap | None = None
        self._size = -1

    def view(self, dset: h5py.Dataset) -> np.ndarray | None:
        """A read-only view of a large contiguous numeric dataset's bytes, or None.

        None when the dataset is small, chunked, external, of another kind, not allocated, or
        reaches past the end of the file (h5py reads it then, and reports a truncated file), or
        when the file cannot be mapped.
        """
        dtype = dset.dtype
        nbytes = dset.size * dtype.itemsize
        if dtype.kind not in "biuf" or nbytes < _MAP_MIN_BYTES or self._file.driver != "sec2":
            return None
        plist = dset.id.get_create_plist()
        if plist.get_layout() != h5py.h5d.CONTIGUOUS or plist.get_external_count():
            return None
        offset = dset.id.get_offset()
        if dset.id.get_type().get_size() != dtype.itemsize or offset is None or offset < 0:
            return None
        if self._map is None and self._size < 0:
            self._open()
        if self._map is None or offset + nbytes > self._size:
            return None
        start = offset - offset % mmap.PAGESIZE
        with contextlib.suppress(AttributeError, OSError, ValueError):  # read ahead when cold
            self._map.madvise(mmap.MADV_WILLNEED, start, offset + nbytes - start)
        return np.frombuffer(self._map, dtype, dset.size, offset).reshape(dset.shape)

    def _open(self) -> None:
        self._size = 0
        try:
            fd = self._file.id.get_vfd_handle()
            size = os.fstat(fd).st_size
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
            self._size = size
        except (OSError, ValueError):  # an empty file, a file system without mmap
            self._map = None


def _check_version(path: str, version: object) -> None:
    """Accept the versions this module reads (1 to `VERSION`); name the file otherwise."""
    try:
        number = int(version)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise CheckpointCorruptError(
            f"checkpoint {path!r}: format version {version!r} is not a number"
        ) from None
    if number > VERSION:
        raise CheckpointMismatchError(
            f"checkpoint {path!r} has format version {number}; this hpcdist reads versions up "
            f"to {VERSION}: upgrade hpcdist to read it"
        )
    if number < 1:
        raise CheckpointCorruptError(f"checkpoint {path!r}: format version {number} is invalid")


def atomic_write_text(path: str, text: str) -> None:
    """Replace a small text file atomically.

    Raises:
        CheckpointWriteError: The file could not be written (names it and the errno).
    """
    try:
        with _atomic(path) as tmp, open(tmp, "w") as handle:
            handle.write(text)
    except OSError as exc:
        raise _write_error(path, exc) from exc


@contextlib.contextmanager
def _atomic(path: str, suffix: str = "") -> Iterator[str]:
    """Yield a temporary path next to ``path``; on success fsync it and rename it over ``path``.

    The directory is fsynced after the rename; on failure the temporary file is removed.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = _create_temporary(directory, suffix)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        _fsync_dir(directory)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _create_temporary(directory: str, suffix: str) -> str:
    """Create a new empty file in ``directory``, mode 0666 less the umask (as ``open`` does).

    `tempfile.mkstemp` would make it 0600 whatever the umask, and the rename keeps the mode.
    """
    for _ in range(100):
        tmp = os.path.join(directory, f".tmp-{secrets.token_hex(6)}{suffix}")
        try:
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp
    raise FileExistsError(errno.EEXIST, "no free temporary name", directory)
