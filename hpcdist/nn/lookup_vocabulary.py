r"""The vocabulary rules of Keras' lookup layers: given lists, vocabulary files, `adapt`'s order.

Helpers of `hpcdist.nn.lookups`: which batches `adapt` counts, the checks a given vocabulary
passes (special tokens first or not at all, no repeats, at most ``max_tokens``), a vocabulary
file read as TF's ``TextFileInitializer`` reads it (one token a line, ``\\r\\n`` or ``\\n``), and
the learned order (count high to low, ties by the token high to low).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["adapt_batches", "check_vocabulary", "read_vocabulary_file", "sorted_by_frequency"]


def adapt_batches(data: Any, steps: int | None) -> Iterator[Any]:
    """The batches `adapt` counts, as Keras takes them.

    An array, list, tuple, string or tensor is one batch; any other iterable (an
    `hpcdist.data.Dataset`, a generator) yields its elements as batches, ``steps`` at most.
    """
    one_batch = isinstance(data, (list, tuple, np.ndarray, str, bytes)) or hasattr(data, "numpy")
    if one_batch or not hasattr(data, "__iter__"):
        yield data
        return
    for i, batch in enumerate(data):
        if steps is not None and i >= steps:
            return
        yield batch


def check_vocabulary(
    keys: list[Any],
    special: list[Any],
    mask: Any,
    oov: Any,
    max_tokens: int | None,
    where: str,
) -> list[Any]:
    """The tokens of a given vocabulary, without its leading special tokens.

    Args:
        keys: The vocabulary as table keys.
        special: The special tokens' keys in id order (mask, then OOV), which ``keys`` may
            start with.
        mask: The mask's key (None: no mask).
        oov: The OOV token's key when it must not appear (an inverted layer), else None.
        max_tokens: Largest vocabulary, special tokens included.
        where: The layer, for messages.

    Raises:
        ValueError: A repeated token, a special token after the start, or too many tokens.
    """
    tokens = keys[len(special) :] if keys[: len(special)] == special else keys
    counts = collections.Counter(tokens)
    repeated = [token for token, n in counts.items() if n > 1]
    if repeated:
        raise ValueError(
            f"{where}: the vocabulary has repeated terms {repeated}; give each term once"
        )
    for name, key in (("mask", mask), ("OOV", oov)):
        if key is not None and key in counts:
            raise ValueError(
                f"{where}: found the reserved {name} token {key!r} at vocabulary index "
                f"{keys.index(key)}; either leave the special tokens out or put them at the "
                f"start in this order: {special}"
            )
    size = len(special) + len(tokens)
    if max_tokens is not None and size > max_tokens:
        raise ValueError(
            f"{where}: a vocabulary of {size} terms (special tokens included) is larger than "
            f"max_tokens={max_tokens}"
        )
    return tokens


def read_vocabulary_file(path: str | os.PathLike[str], where: str) -> list[bytes]:
    """The lines of a vocabulary file as bytes (TF's ``WHOLE_LINE`` keys).

    Raises:
        ValueError: The file does not exist, or holds a token twice.
    """
    if not os.path.exists(path):
        raise ValueError(f"{where}: vocabulary file {os.fspath(path)!r} does not exist")
    with open(path, "rb") as f:
        text = f.read()
    lines = text.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    counts = collections.Counter(lines)
    repeated = [line for line, n in counts.items() if n > 1]
    if repeated:
        raise ValueError(f"{where}: vocabulary file {os.fspath(path)!r} repeats {repeated}")
    return lines


def sorted_by_frequency(counts: collections.Counter[Any], limit: int | None) -> list[Any]:
    """Tokens by count, high to low, ties by the token, high to low (Keras' ``lexsort``)."""
    order = sorted(counts.items(), key=lambda item: (item[1], item[0]), reverse=True)
    return [token for token, _ in order[:limit]]
