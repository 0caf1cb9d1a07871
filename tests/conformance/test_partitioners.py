"""Variable partitioners: the number of shards along each axis for shapes and dtypes."""

import pytest

from tests.conformance.helpers import TF, Raised, assert_documented, attempt, both, conform

NONSENSE = (
    "docs/differences-from-tensorflow.md: A partitioner's nonsense arguments are `ValueError`s"
)
ZERO_ROWS = (
    "docs/differences-from-tensorflow.md: `MaxSizePartitioner` of a shape with 0 rows gives one "
    "shard"
)

SHAPES = [(10,), (100, 64), (3, 1000), (1, 5), (7, 3, 2), (1000000,), (4096, 256), (2, 0)]
DTYPES = ["float32", "float64", "int8", "string"]


def shape_of(lib, shape):
    """TF's partitioners take a TensorShape; hpcdist's take a tuple."""
    return lib.tf.TensorShape(shape) if lib is TF else tuple(shape)


PARTITIONERS = {
    "fixed-1": lambda p: p.FixedShardsPartitioner(1),
    "fixed-3": lambda p: p.FixedShardsPartitioner(3),
    "fixed-200": lambda p: p.FixedShardsPartitioner(200),
    "min-default": lambda p: p.MinSizePartitioner(),
    "min-64-shards-4": lambda p: p.MinSizePartitioner(min_shard_bytes=64, max_shards=4),
    "min-1k-shards-8-strings-4": lambda p: p.MinSizePartitioner(
        min_shard_bytes=1024, max_shards=8, bytes_per_string=4
    ),
    "max-64": lambda p: p.MaxSizePartitioner(max_shard_bytes=64),
    "max-1k-shards-3": lambda p: p.MaxSizePartitioner(max_shard_bytes=1024, max_shards=3),
    "max-100k-strings-8": lambda p: p.MaxSizePartitioner(
        max_shard_bytes=100_000, bytes_per_string=8
    ),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(PARTITIONERS))
def test_partitions(name, dtype):
    def case(lib):
        partitioner = PARTITIONERS[name](lib.partitioners)
        out = {}
        for shape in SHAPES:
            out[str(shape)] = attempt(
                lambda s=shape: list(partitioner(shape_of(lib, s), getattr(lib.tf, dtype)))
            )
        return out

    conform(case)


@pytest.mark.parametrize(
    "make",
    [
        lambda p: p.FixedShardsPartitioner(0),
        lambda p: p.MinSizePartitioner(min_shard_bytes=0),
        lambda p: p.MinSizePartitioner(max_shards=0),
        lambda p: p.MaxSizePartitioner(max_shard_bytes=0),
        lambda p: p.MaxSizePartitioner(max_shard_bytes=10, max_shards=0),
        lambda p: p.MinSizePartitioner(bytes_per_string=0),
    ],
    ids=["fixed-0", "min-bytes-0", "min-shards-0", "max-bytes-0", "max-shards-0", "strings-0"],
)
def test_bad_arguments(make, request):
    """Whether construction raises, or else what a call on a (10,) float32 variable gives."""

    def case(lib):
        return list(make(lib.partitioners)(shape_of(lib, (10,)), lib.tf.float32))

    if request.node.callspec.id in ("fixed-0", "max-shards-0"):  # TF answers; hpcdist refuses
        tf_result, hd_result = both(case)
        assert tf_result == {"fixed-0": [0], "max-shards-0": [5]}[request.node.callspec.id]
        assert isinstance(hd_result, Raised) and hd_result.family == "ValueError", hd_result
        assert_documented(NONSENSE)
        return
    conform(case)


@pytest.mark.parametrize("name", list(PARTITIONERS))
def test_zero_rows(name):
    """A variable with no rows along the partitioned axis (TF's MaxSizePartitioner divides by 0)."""

    def case(lib):
        return list(PARTITIONERS[name](lib.partitioners)(shape_of(lib, (0, 4)), lib.tf.float32))

    if name.startswith("max-"):
        tf_result, hd_result = both(case)
        assert isinstance(tf_result, Raised) and tf_result.family == "ZeroDivisionError"
        assert [int(n) for n in hd_result] == [1, 1]
        assert_documented(ZERO_ROWS)
        return
    conform(case)
