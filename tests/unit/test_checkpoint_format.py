"""The checkpoint file format: CRC-32C checksums, version 1 files, mapped reads, corruption."""

import os
import zlib

import h5py
import numpy as np
import pytest

import hpcdist as hd
from hpcdist.checkpoint import Checkpoint, CheckpointCorruptError
from hpcdist.checkpoint.checksum import ALGORITHMS, expected_checksum
from hpcdist.checkpoint.format import VERSION, read_arrays, write_arrays

BIG = 1 << 19  # float32 elements: 2 MiB, above the size read by mapping the file


def _var(value):
    return hd.get_strategy().Variable(value)


def _values(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "big": rng.random(BIG, dtype=np.float32),
        "table": rng.random((1024, 300)),  # 2.3 MiB of float64
        "small": rng.random(5),
        "count": np.int64(41 + seed),
    }


def _write_version_1(path, values):
    """A file as hpcdist wrote them before CRC-32C: version 1, zlib's CRC-32 per dataset."""
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "hpcdist-checkpoint"
        f.attrs["version"] = 1
        for name, value in values.items():
            array = np.asarray(value)
            dset = f.create_dataset(name, data=array)
            dset.attrs["crc32"] = zlib.crc32(np.ascontiguousarray(array).tobytes()) & 0xFFFFFFFF


def _flip_byte(path, name, index):
    """Change one byte of a dataset in the file, leaving its checksum attribute alone."""
    with h5py.File(path, "r") as f:
        offset = f[name].id.get_offset()
    with open(path, "r+b") as handle:
        handle.seek(offset + index)
        byte = handle.read(1)
        handle.seek(offset + index)
        handle.write(bytes([byte[0] ^ 0xFF]))


def test_the_checksums_are_the_standard_crc32c_and_crc32():
    # The check values of the two CRCs (RFC 3720 for CRC-32C; zlib's CRC-32): "123456789".
    assert ALGORITHMS["crc32c"](b"123456789", 0) == 0xE3069283
    assert ALGORITHMS["crc32"](b"123456789", 0) == 0xCBF43926
    # Chained over pieces as over the whole.
    assert ALGORITHMS["crc32c"](b"6789", ALGORITHMS["crc32c"](b"12345", 0)) == 0xE3069283


def test_files_carry_crc32c_of_every_dataset(tmp_path):
    values = _values()
    path = Checkpoint(**{k: _var(v) for k, v in values.items()}).write(str(tmp_path / "c"))
    with h5py.File(path, "r") as f:
        assert f.attrs["version"] == VERSION == 2
        for name, value in values.items():
            data = np.ascontiguousarray(value).tobytes()
            assert "crc32" not in f[name].attrs
            assert expected_checksum(f[name].attrs) == ("crc32c", ALGORITHMS["crc32c"](data, 0))


def test_version_1_files_with_crc32_still_restore(tmp_path):
    values = _values()
    path = str(tmp_path / "old.h5")
    _write_version_1(path, values)
    variables = {k: _var(np.zeros_like(v)) for k, v in values.items()}
    Checkpoint(**variables).read(path).assert_consumed()
    for name, value in values.items():
        assert np.array_equal(variables[name].numpy(), value), name


@pytest.mark.parametrize("fmt", ["version 1", "version 2"])
@pytest.mark.parametrize("damaged", ["big", "table", "small"])
def test_a_corrupt_dataset_raises_and_changes_no_variable(tmp_path, fmt, damaged):
    values = _values()
    if fmt == "version 1":
        path = str(tmp_path / "c.h5")
        _write_version_1(path, values)
    else:
        path = Checkpoint(**{k: _var(v) for k, v in values.items()}).write(str(tmp_path / "c"))
    _flip_byte(path, damaged, index=np.asarray(values[damaged]).nbytes // 2 + 1)
    before = _values(seed=1)
    variables = {k: _var(v) for k, v in before.items()}
    with pytest.raises(CheckpointCorruptError, match=rf"dataset '{damaged}' fails its checksum"):
        Checkpoint(**variables).read(path)
    for name, value in before.items():  # none changed, not even those read before the damage
        assert np.array_equal(variables[name].numpy(), value), name


def test_a_dataset_without_checksum_is_corrupt(tmp_path):
    path = Checkpoint(big=_var(_values()["big"])).write(str(tmp_path / "c"))
    with h5py.File(path, "r+") as f:
        del f["big"].attrs["crc32c"]
    with pytest.raises(CheckpointCorruptError, match="'big' has no checksum"):
        read_arrays(path)


def test_a_truncated_file_raises_instead_of_mapping_past_its_end(tmp_path):
    values = _values()
    path = Checkpoint(**{k: _var(v) for k, v in values.items()}).write(str(tmp_path / "c"))
    with h5py.File(path, "r") as f:
        end = f["big"].id.get_offset() + values["big"].nbytes
    os.truncate(path, end - 4096)
    big = _var(np.zeros(BIG, np.float32))
    with pytest.raises(CheckpointCorruptError, match=r"c\.h5"):
        Checkpoint(big=big).read(path)
    assert not big.numpy().any()


def test_large_values_are_read_only_views_and_restored_values_are_copies(tmp_path):
    values = _values()
    path = Checkpoint(**{k: _var(v) for k, v in values.items()}).write(str(tmp_path / "c"))
    arrays, _ = read_arrays(path)
    assert not arrays["big"].flags.writeable and not arrays["table"].flags.writeable
    assert arrays["small"].flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        arrays["big"][0] = 1.0
    del arrays
    variables = {k: _var(np.zeros_like(v)) for k, v in values.items()}
    Checkpoint(**variables).read(path)
    os.unlink(path)  # the variables hold their own values, not the file's pages
    for name, value in values.items():
        assert np.array_equal(variables[name].numpy(), value), name
    variables["big"].assign_add(np.ones(BIG, np.float32))
    assert np.array_equal(variables["big"].numpy(), values["big"] + 1)


class _Pieces:
    def __init__(self, full, rows):
        self.full, self.rows = full, rows
        self.shape, self.dtype = full.shape, full.dtype

    def slices(self):
        buffer = np.empty((self.rows, *self.full.shape[1:]), self.full.dtype)
        for lo in range(0, len(self.full), self.rows):
            part = buffer[: len(self.full[lo : lo + self.rows])]
            part[...] = self.full[lo : lo + self.rows]
            yield part  # the same buffer every time, as a reader of shards may do


def test_sliced_values_reusing_one_buffer_get_the_checksum_of_the_whole(tmp_path):
    full = np.random.default_rng(2).random((3000, 200))  # 4.6 MiB in slices of 1000 rows
    path = str(tmp_path / "s.h5")
    write_arrays(path, {"table": _Pieces(full, rows=1000)})
    with h5py.File(path, "r") as f:
        crc = int(f["table"].attrs["crc32c"])
    assert crc == ALGORITHMS["crc32c"](full.tobytes(), 0)
    arrays, _ = read_arrays(path)
    assert np.array_equal(arrays["table"], full)


def test_deferred_values_do_not_depend_on_the_file(tmp_path):
    # A model not built yet keeps its values waiting; they must be the restore's own copies,
    # not views of the mapped file (emptying the file in place would fault on such a view).
    x = np.random.default_rng(3).normal(size=(2, 600)).astype(np.float32)

    def model():
        return hd.nn.Sequential([hd.nn.layers.Dense(600), hd.nn.layers.Dense(2)])

    saved = model()
    saved(x)  # kernel 0: 600 x 600 float32, 1.4 MiB: read by mapping
    path = Checkpoint(model=saved).write(str(tmp_path / "c"))
    target = model()
    status = Checkpoint(model=target).read(path)
    assert "model/weights/0" in status.unused
    os.truncate(path, 0)
    np.testing.assert_array_equal(target(x).numpy(), saved(x).numpy())
    for got, want in zip(target.get_weights(), saved.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    status.assert_consumed()
