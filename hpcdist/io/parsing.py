"""Parsing ``tf.train.Example`` protos: ``tf.io.parse_example`` and ``parse_single_example``.

A feature spec maps each key to a `FixedLenFeature` (a dense array of a fixed shape, with an
optional default for a missing feature), a `VarLenFeature` (a sparse `SparseTensorValue`:
``indices``, ``values``, ``dense_shape``, as a ``tf.SparseTensor``'s numpy value) or a
`FixedLenSequenceFeature` (rows of a fixed shape, as many as the example holds, padded in a
batch). Values come out as numpy: ``hd.float32`` (``float_list``), ``hd.int64``
(``int64_list``) and ``hd.string`` (``bytes_list``: an object array of ``bytes``), as TF's
three types. A feature of the wrong type or number of values, or a missing required one, is
`InvalidArgumentError` naming the key and the example.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from google.protobuf.message import DecodeError

from hpcdist.errors import InvalidArgumentError
from hpcdist.io.example_proto import Example
from hpcdist.io.layout import dense_columns

__all__ = [
    "FixedLenFeature",
    "FixedLenSequenceFeature",
    "SparseTensorValue",
    "VarLenFeature",
    "parse_example",
    "parse_single_example",
]

_FLOAT = np.dtype("float32")
_INT = np.dtype("int64")
_STRING = np.dtype(object)
_KIND = {_FLOAT: "float_list", _INT: "int64_list", _STRING: "bytes_list"}
_TF_NAME = {_FLOAT: "float", _INT: "int64", _STRING: "string"}
_KIND_NAME = {"float_list": "float", "int64_list": "int64", "bytes_list": "string"}


class FixedLenFeature(NamedTuple):
    """A dense feature of a fixed ``shape`` (``tf.io.FixedLenFeature``).

    Attributes:
        shape: The shape of the value (``[]`` for a scalar); the example holds that many values.
        dtype: ``hd.float32``, ``hd.int64`` or ``hd.string``.
        default_value: Used when the example lacks the feature (reshaped to ``shape``); None
            makes the feature required.
    """

    shape: Sequence[int]
    dtype: Any
    default_value: Any = None


class FixedLenSequenceFeature(NamedTuple):
    """Rows of a fixed ``shape``, as many as the feature holds (``tf.io.FixedLenSequenceFeature``).

    Attributes:
        shape: The shape of one row.
        dtype: ``hd.float32``, ``hd.int64`` or ``hd.string``.
        allow_missing: Whether an example may lack the feature (then it has no rows).
        default_value: The scalar that pads the shorter examples of a batch (0 or ``b""``).
    """

    shape: Sequence[int]
    dtype: Any
    allow_missing: bool = False
    default_value: Any = None


class VarLenFeature(NamedTuple):
    """A feature of any length, parsed to a `SparseTensorValue` (``tf.io.VarLenFeature``)."""

    dtype: Any


class SparseTensorValue(NamedTuple):
    """A sparse value in numpy (the value of a ``tf.SparseTensor``).

    Attributes:
        indices: int64 ``[n, rank]``: the position of each value.
        values: ``[n]``: the values, in row-major order of ``indices``.
        dense_shape: int64 ``[rank]``: the shape of the dense value.
    """

    indices: np.ndarray
    values: np.ndarray
    dense_shape: np.ndarray


def _dtype(key: str, dtype: Any) -> np.dtype:
    """The numpy dtype of a spec's dtype, one of TF's three Example types."""
    dtype = getattr(dtype, "as_numpy_dtype", dtype)  # a TensorFlow DType works too
    if dtype in (str, bytes, "string"):
        return _STRING
    try:
        found = np.dtype(dtype)
    except TypeError:
        found = None
    if found is not None and found.kind in "SU":
        found = _STRING
    if found not in _KIND:
        raise TypeError(
            f"feature {key!r}: dtype must be hd.float32, hd.int64 or hd.string (the three "
            f"types of tf.train.Example), got {dtype!r}"
        )
    return found


def _shape(key: str, shape: Any) -> tuple[int, ...]:
    if shape is None:
        raise ValueError(f"Missing shape for feature {key!r}: a FixedLenFeature needs one")
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(d is None or int(d) < 0 for d in dims):
        raise ValueError(
            f"All dimensions of shape for feature {key!r} need to be known, got {list(dims)} "
            "(use FixedLenSequenceFeature for a first dimension of unknown size)"
        )
    return tuple(int(d) for d in dims)


def _as_array(values: Any, dtype: np.dtype) -> np.ndarray:
    if dtype is _STRING:
        if isinstance(values, (bytes, str)):
            items = np.empty((), object)
            items[()] = values
        else:
            items = np.array(values, dtype=object)  # object: keeps trailing NUL bytes
        out = np.empty(items.shape, object)
        for index, value in np.ndenumerate(items):
            out[index] = value.encode() if isinstance(value, str) else bytes(value)
        return out
    return np.asarray(values, dtype)


class _Spec:
    """One key's spec, checked once per call."""

    def __init__(self, key: str, feature: Any) -> None:
        self.key = key
        self.feature = feature
        self.dtype = _dtype(key, feature.dtype)
        self.kind = _KIND[self.dtype]
        if isinstance(feature, VarLenFeature):
            return
        if not isinstance(feature, (FixedLenFeature, FixedLenSequenceFeature)):
            raise ValueError(
                f"Unsupported feature spec {feature!r} for key {key!r}: expected "
                "FixedLenFeature, FixedLenSequenceFeature or VarLenFeature"
            )
        self.shape = _shape(key, feature.shape)
        self.size = math.prod(self.shape)
        self.default: np.ndarray | None = None
        if isinstance(feature, FixedLenSequenceFeature):
            pad = feature.default_value
            pad = (b"" if self.dtype is _STRING else 0) if pad is None else pad
            value = _as_array(pad, self.dtype)
            if value.size != 1:
                raise ValueError(
                    f"feature {key!r}: the default_value of a FixedLenSequenceFeature pads "
                    f"and must be a scalar, got shape {value.shape}"
                )
            self.default = value.reshape(())
        elif feature.default_value is not None:
            value = _as_array(feature.default_value, self.dtype)
            if value.size != self.size:
                raise ValueError(
                    f"feature {key!r}: default_value has {value.size} elements, the shape "
                    f"{list(self.shape)} needs {self.size}"
                )
            self.default = value.reshape(self.shape)

    def values(self, example: Any, index: int, names: Sequence[str] | None) -> np.ndarray | None:
        """The feature's values in ``example`` (None when it lacks the feature)."""
        feature_map = example.features.feature
        if self.key not in feature_map:
            return None
        feature = feature_map[self.key]
        kind = feature.WhichOneof("kind")
        if kind is None:  # a Feature with no list set counts as missing (as TF)
            return None
        if kind != self.kind:
            raise InvalidArgumentError(
                f"{_where(index, names)}, feature {self.key!r}: data types don't match: the "
                f"example holds {_KIND_NAME[kind]} values ({kind}), the spec expects "
                f"{_TF_NAME[self.dtype]} ({self.kind})"
            )
        raw = getattr(feature, kind).value
        if self.dtype is _STRING:
            out = np.empty(len(raw), object)
            out[:] = list(raw)
            return out
        return np.array(raw, self.dtype)  # numpy reads upb's repeated field as a sequence

    def missing(self, index: int, names: Sequence[str] | None) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"{_where(index, names)}: feature {self.key!r} (data type: "
            f"{_TF_NAME[self.dtype]}) is required but could not be found"
        )


def _where(index: int, names: Sequence[str] | None) -> str:
    name = names[index] if names is not None else "<unknown>"
    return f"example {index} (name: {name})"


def _specs(features: Mapping[str, Any]) -> list[_Spec]:
    if not isinstance(features, Mapping) or not features:
        raise ValueError(
            f"features must be a non-empty dict of feature specs, got {type(features).__name__}"
        )
    return [_Spec(str(key), feature) for key, feature in features.items()]


def _decode(serialized: Sequence[Any], names: Sequence[str] | None) -> list[Any]:
    out = []
    for index, item in enumerate(serialized):
        data = item.item() if isinstance(item, np.ndarray) else item
        if isinstance(data, str):
            data = data.encode()
        try:
            out.append(Example.FromString(bytes(data)))
        except (DecodeError, TypeError) as exc:
            raise InvalidArgumentError(
                f"{_where(index, names)}: could not parse the serialized tf.train.Example "
                f"({len(bytes(data)) if isinstance(data, bytes) else type(data).__name__}"
                f" bytes): {exc}"
            ) from exc
    return out


def _dense(spec: _Spec, examples: list[Any], names: Sequence[str] | None) -> np.ndarray:
    out = np.empty((len(examples), *spec.shape), spec.dtype)
    for index, example in enumerate(examples):
        values = spec.values(example, index, names)
        if values is None:
            if spec.default is None:
                raise spec.missing(index, names)
            out[index] = spec.default
            continue
        if values.size != spec.size:
            raise InvalidArgumentError(
                f"{_where(index, names)}, feature {spec.key!r}: number of "
                f"{_TF_NAME[spec.dtype]} values != expected: the example holds {values.size}, "
                f"the shape {list(spec.shape)} needs {spec.size}"
            )
        out[index] = values.reshape(spec.shape)
    return out


def _sequence(spec: _Spec, examples: list[Any], names: Sequence[str] | None) -> np.ndarray:
    rows = []
    for index, example in enumerate(examples):
        values = spec.values(example, index, names)
        if values is None:
            if not spec.feature.allow_missing:
                raise spec.missing(index, names)
            values = np.empty(0, spec.dtype)
        uneven = values.size > 0 if spec.size == 0 else values.size % spec.size != 0
        if uneven:
            raise InvalidArgumentError(
                f"{_where(index, names)}, feature {spec.key!r}: number of "
                f"{_TF_NAME[spec.dtype]} values ({values.size}) is not a multiple of the "
                f"row shape {list(spec.shape)} ({spec.size} values per row)"
            )
        count = values.size // spec.size if spec.size else 0
        rows.append(values.reshape((count, *spec.shape)))
    longest = max((r.shape[0] for r in rows), default=0)
    out = np.full((len(examples), longest, *spec.shape), spec.default, spec.dtype)
    for index, row in enumerate(rows):
        out[index, : row.shape[0]] = row
    return out


def _sparse(spec: _Spec, examples: list[Any], names: Sequence[str] | None) -> SparseTensorValue:
    parts = []
    for index, example in enumerate(examples):
        values = spec.values(example, index, names)
        parts.append(np.empty(0, spec.dtype) if values is None else values)
    lengths = np.array([p.size for p in parts], np.int64)
    values = np.concatenate(parts) if parts else np.empty(0, spec.dtype)
    rows = np.repeat(np.arange(len(parts), dtype=np.int64), lengths)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    columns = np.arange(values.size, dtype=np.int64) - starts
    indices = np.stack([rows, columns], axis=1).reshape(-1, 2)
    dense_shape = np.array([len(parts), lengths.max(initial=0)], np.int64)
    return SparseTensorValue(indices, values.astype(spec.dtype, copy=False), dense_shape)


def _batch(serialized: Any) -> list[Any]:
    if isinstance(serialized, (bytes, str, np.bytes_, np.str_)) or (
        isinstance(serialized, np.ndarray) and serialized.ndim == 0
    ):
        raise ValueError(
            "parse_example needs a vector of serialized examples, got a scalar: use "
            "parse_single_example for one"
        )
    return list(serialized.reshape(-1) if isinstance(serialized, np.ndarray) else serialized)


def parse_example(
    serialized: Any,
    features: Mapping[str, Any],
    example_names: Sequence[str] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """Parse a batch of serialized ``tf.train.Example`` protos (``tf.io.parse_example``).

    Args:
        serialized: A list or 1-D array of serialized protos (``bytes``).
        features: ``{key: FixedLenFeature | FixedLenSequenceFeature | VarLenFeature}``.
        example_names: Names of the examples, for error messages.
        name: Accepted for TF's signature.

    Returns:
        ``{key: value}``: a `FixedLenFeature` gives ``[batch, *shape]``, a
        `FixedLenSequenceFeature` ``[batch, longest, *shape]`` (padded with its default), a
        `VarLenFeature` a `SparseTensorValue` of dense shape ``[batch, longest]``.

    Raises:
        InvalidArgumentError: A proto does not parse, or a feature has the wrong type or number
            of values, or a required feature is missing (the message names key and example).
        ValueError: A spec is invalid (shape, default value) or ``serialized`` is a scalar.
        TypeError: A spec's dtype is not one of TF's three Example types.
    """
    del name
    specs = _specs(features)
    names = list(example_names) if example_names is not None else None
    records = _batch(serialized)
    dense = [s for s in specs if type(s.feature) is FixedLenFeature and s.dtype is not _STRING]
    # Records of one layout: their dense numbers straight from the bytes (hpcdist.io.layout)
    fast = dense_columns(records, {s.key: (s.kind, s.size) for s in dense}) if dense else None
    out: dict[str, Any] = {}
    if fast is not None:
        for spec in dense:
            if spec.key in fast:
                out[spec.key] = fast[spec.key].reshape((len(records), *spec.shape))
        if len(out) == len(specs):
            return out
    examples = _decode(records, names)
    for spec in specs:
        if spec.key in out:
            continue
        if isinstance(spec.feature, VarLenFeature):
            out[spec.key] = _sparse(spec, examples, names)
        elif isinstance(spec.feature, FixedLenSequenceFeature):
            out[spec.key] = _sequence(spec, examples, names)
        else:
            out[spec.key] = _dense(spec, examples, names)
    return out


def parse_single_example(
    serialized: Any,
    features: Mapping[str, Any],
    example_names: str | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """Parse one serialized ``tf.train.Example`` (``tf.io.parse_single_example``).

    As `parse_example` on a batch of one, without the batch dimension: a `VarLenFeature` gives
    ``indices`` ``[n, 1]`` and ``dense_shape`` ``[n]``.

    Raises:
        InvalidArgumentError: As `parse_example`.
        ValueError: ``serialized`` is not a single proto, or a spec is invalid.
    """
    del name
    if isinstance(serialized, np.ndarray):
        if serialized.ndim != 0:
            raise ValueError(
                f"parse_single_example needs one serialized example, got shape "
                f"{serialized.shape}: use parse_example for a batch"
            )
        serialized = serialized.item()
    if not isinstance(serialized, (bytes, str, bytearray, memoryview)):
        raise ValueError(
            "parse_single_example needs one serialized example (bytes), got "
            f"{type(serialized).__name__}: use parse_example for a batch"
        )
    names = None if example_names is None else [example_names]
    batch = parse_example([serialized], features, names)
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, SparseTensorValue):
            out[key] = SparseTensorValue(value.indices[:, 1:], value.values, value.dense_shape[1:])
        else:
            out[key] = value[0]
    return out
