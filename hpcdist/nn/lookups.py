"""StringLookup and IntegerLookup (``tf.keras.layers``): vocabularies of tokens to integer ids.

Both are `hpcdist.nn.index_lookup.IndexLookup` with their table keys: UTF-8 ``bytes`` for
strings (numpy ``str``, ``bytes`` and object arrays, lists) and Python ints for integers. An
inverted `StringLookup` returns an object array of ``bytes``, as a TF string tensor's
``numpy()`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.nn.index_lookup import IndexLookup

__all__ = ["IndexLookup", "IntegerLookup", "StringLookup"]


class StringLookup(IndexLookup):
    """Map strings to integer ids through a vocabulary (``tf.keras.layers.StringLookup``).

    Args:
        max_tokens: Largest vocabulary, mask and OOV ids included.
        num_oov_indices: Ids for out-of-vocabulary strings (several: FarmHash buckets).
        mask_token: A string mapped to id 0 in ``"int"`` mode.
        oov_token: The string an inverted layer returns for an OOV id.
        vocabulary: Strings (list or array) or a file of one per line.
        idf_weights: Must be None (no ``"tf_idf"``).
        invert: Map ids back to strings (``bytes``, as TF's ``numpy()``).
        output_mode: ``"int"``, ``"one_hot"``, ``"multi_hot"`` or ``"count"``.
        pad_to_max_tokens: Encode over ``max_tokens`` ids.
        sparse: Must be False.
        encoding: Text encoding of the vocabulary that `get_vocabulary` decodes.
        name: Layer name.
        salt: SipHash key of the OOV buckets.
        **kwargs: `Layer` arguments.
    """

    _kind = "string"

    def __init__(
        self,
        max_tokens: int | None = None,
        num_oov_indices: int = 1,
        mask_token: str | None = None,
        oov_token: str = "[UNK]",
        vocabulary: Any = None,
        idf_weights: Any = None,
        invert: bool = False,
        output_mode: str = "int",
        pad_to_max_tokens: bool = False,
        sparse: bool = False,
        encoding: str = "utf-8",
        name: str | None = None,
        salt: Any = None,
        **kwargs: Any,
    ) -> None:
        self.encoding = encoding
        super().__init__(
            max_tokens,
            num_oov_indices,
            mask_token,
            oov_token,
            vocabulary=vocabulary,
            idf_weights=idf_weights,
            invert=invert,
            output_mode=output_mode,
            sparse=sparse,
            pad_to_max_tokens=pad_to_max_tokens,
            salt=salt,
            name=name,
            **kwargs,
        )

    def _key(self, token: Any) -> Any:
        if isinstance(token, bytes):
            return token
        if isinstance(token, str):
            return token.encode("utf-8")
        raise TypeError(f"{self._where}: expected str or bytes tokens, got {token!r}")

    def _token(self, key: Any) -> Any:
        return key.decode(self.encoding) if isinstance(key, bytes) else key

    def _inverted_output(self, tokens: list[Any], shape: tuple[int, ...]) -> np.ndarray:
        out = np.empty(len(tokens), dtype=object)
        out[:] = tokens
        return out.reshape(shape)

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        return {**super().get_config(), "encoding": self.encoding}


class IntegerLookup(IndexLookup):
    """Map integers to integer ids through a vocabulary (``tf.keras.layers.IntegerLookup``).

    Args:
        max_tokens: Largest vocabulary, mask and OOV ids included.
        num_oov_indices: Ids for out-of-vocabulary integers (several: ``floormod`` buckets,
            or FarmHash of the decimal string with ``oov_method="farmhash"``).
        mask_token: An integer mapped to id 0 in ``"int"`` mode.
        oov_token: The integer an inverted layer returns for an OOV id (default -1).
        vocabulary: Integers (list or array) or a file of one per line.
        vocabulary_dtype: Must be ``"int64"``.
        idf_weights: Must be None (no ``"tf_idf"``).
        invert: Map ids back to integers.
        output_mode: ``"int"``, ``"one_hot"``, ``"multi_hot"`` or ``"count"``.
        sparse: Must be False.
        pad_to_max_tokens: Encode over ``max_tokens`` ids.
        oov_method: ``"floormod"`` or ``"farmhash"``.
        salt: SipHash key of the OOV buckets (with ``oov_method="farmhash"``).
        name: Layer name.
        **kwargs: `Layer` arguments.
    """

    _kind = "int"
    _blank = 0

    def __init__(
        self,
        max_tokens: int | None = None,
        num_oov_indices: int = 1,
        mask_token: int | None = None,
        oov_token: int = -1,
        vocabulary: Any = None,
        vocabulary_dtype: str = "int64",
        idf_weights: Any = None,
        invert: bool = False,
        output_mode: str = "int",
        sparse: bool = False,
        pad_to_max_tokens: bool = False,
        oov_method: str = "floormod",
        salt: Any = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        if vocabulary_dtype != "int64":
            raise ValueError(
                f"IntegerLookup supports only vocabulary_dtype='int64', got {vocabulary_dtype!r}"
            )
        super().__init__(
            max_tokens,
            num_oov_indices,
            mask_token,
            oov_token,
            vocabulary=vocabulary,
            idf_weights=idf_weights,
            invert=invert,
            output_mode=output_mode,
            sparse=sparse,
            pad_to_max_tokens=pad_to_max_tokens,
            oov_method=oov_method,
            salt=salt,
            name=name,
            **kwargs,
        )

    def _key(self, token: Any) -> Any:
        return int(token)

    def _file_keys(self, lines: list[bytes]) -> list[Any]:
        try:
            return [int(line) for line in lines]
        except ValueError as exc:
            raise ValueError(
                f"{self._where}: a vocabulary file line is not an int64: {exc}"
            ) from exc

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        config = super().get_config()
        if config["vocabulary"] is not None:
            config["vocabulary"] = [int(v) for v in config["vocabulary"]]
        return {**config, "vocabulary_dtype": "int64"}
