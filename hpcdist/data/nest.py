"""Nested structures of arrays, with ``tf.data``'s rule for what is a structure.

Tuples (namedtuples too) and dicts are structures; a list is a value (converted to an array),
as in ``from_tensor_slices([1, 2, 3])``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["flatten", "map_structure", "pack_sequence_as"]


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def flatten(structure: Any) -> list[Any]:
    """Return the leaves of ``structure`` in a deterministic order (dict keys sorted)."""
    if isinstance(structure, Mapping):
        return [leaf for key in sorted(structure) for leaf in flatten(structure[key])]
    if isinstance(structure, tuple):
        return [leaf for item in structure for leaf in flatten(item)]
    return [structure]


def pack_sequence_as(structure: Any, leaves: list[Any]) -> Any:
    """Rebuild ``structure`` with ``leaves`` in `flatten` order."""
    it = iter(leaves)

    def build(s: Any) -> Any:
        if isinstance(s, Mapping):
            built = {key: build(s[key]) for key in sorted(s)}  # leaves come in sorted-key order
            return type(s)((key, built[key]) for key in s)
        if _is_namedtuple(s):
            return type(s)(*(build(item) for item in s))
        if isinstance(s, tuple):
            return tuple(build(item) for item in s)
        return next(it)

    out = build(structure)
    rest = list(it)
    if rest:
        raise ValueError(f"{len(rest)} leaves left over when packing into {structure!r}")
    return out


def map_structure(fn: Callable[..., Any], *structures: Any) -> Any:
    """Apply ``fn`` leaf-wise to structures of the same shape.

    Raises:
        ValueError: The structures differ.
    """
    flats = [flatten(s) for s in structures]
    if any(len(f) != len(flats[0]) for f in flats):
        raise ValueError(
            f"structures do not match: {[len(f) for f in flats]} leaves in {structures!r}"
        )
    return pack_sequence_as(structures[0], [fn(*leaves) for leaves in zip(*flats, strict=True)])
