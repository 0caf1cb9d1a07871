"""`IndexLookup`: the shared base of `StringLookup` and `IntegerLookup` (`hpcdist.nn.lookups`).

Keras 3's base class (``keras/src/layers/preprocessing/index_lookup.py``) on
numpy: a vocabulary from a list, a file (one token a line) or `adapt`; the mask token (id 0 in
``"int"`` mode, dropped from the encodings otherwise), ``num_oov_indices`` ids for tokens out of
the vocabulary (several: a string's FarmHash bucket, an integer's ``floormod``), ``invert``
(ids back to tokens) and the ``"int"``, ``"one_hot"``, ``"multi_hot"`` and ``"count"`` outputs.
`adapt` orders the vocabulary by frequency, ties by the token from high to low, as Keras does.
Ids are int64 and so are the encodings (Keras encodes the lookups in the table's int64); an
inverted `StringLookup` returns an object array of ``bytes``, as a TF string tensor's
``numpy()``. The layers have no weights: they run in a model and in a dataset's ``map`` alike.
"""

from __future__ import annotations

import collections
import os
from typing import Any

import numpy as np

from hpcdist.errors import InvalidArgumentError
from hpcdist.nn.base_layer import Layer
from hpcdist.nn.category_encoding import (
    ENCODINGS,
    check_output_mode,
    encode_categorical_inputs,
    integer_ids,
)
from hpcdist.nn.hashing import salt_key
from hpcdist.nn.keras_tensor import is_symbolic
from hpcdist.nn.lookup_vocabulary import (
    adapt_batches,
    check_vocabulary,
    read_vocabulary_file,
    sorted_by_frequency,
)
from hpcdist.nn.string_hash import to_hash_bucket_fast, to_hash_bucket_strong, unique_keys

__all__ = ["IndexLookup"]

_INT64_MAX = np.iinfo(np.int64).max


class IndexLookup(Layer):
    """Base of `StringLookup` and `IntegerLookup` (Keras' ``IndexLookup``).

    Args:
        max_tokens: Largest vocabulary, mask and OOV ids included (None: no limit).
        num_oov_indices: Ids for tokens out of the vocabulary (0: such a token raises).
        mask_token: A token mapped to id 0 in ``"int"`` mode (None: no mask).
        oov_token: The token an inverted layer returns for an OOV id.
        vocabulary: A list or 1-D array of tokens, or the path of a file of one per line.
        idf_weights: Only for ``"tf_idf"``, which hpcdist does not provide (must be None).
        invert: Map ids back to tokens (``"int"`` mode only).
        output_mode: ``"int"``, ``"one_hot"``, ``"multi_hot"`` or ``"count"``.
        sparse: Must be False (hpcdist has no sparse tensors).
        pad_to_max_tokens: Encode over ``max_tokens`` ids instead of the vocabulary's size.
        oov_method: ``"floormod"`` or ``"farmhash"``: how integers pick one of several OOV ids.
        salt: SipHash key for the OOV buckets (an int or a pair); None: FarmHash.
        **kwargs: `Layer` arguments (``name``); ``vocabulary_size`` from a saved config.

    Raises:
        ValueError: An argument Keras rejects (messages say which and what was received).
    """

    _kind = "string"
    _blank: Any = b""  # what a symbolic call's inverted placeholders hold

    def __init__(
        self,
        max_tokens: int | None,
        num_oov_indices: int,
        mask_token: Any,
        oov_token: Any,
        vocabulary: Any = None,
        idf_weights: Any = None,
        invert: bool = False,
        output_mode: str = "int",
        sparse: bool = False,
        pad_to_max_tokens: bool = False,
        oov_method: str = "floormod",
        salt: Any = None,
        **kwargs: Any,
    ) -> None:
        frozen_size = kwargs.pop("vocabulary_size", None)
        has_vocabulary = kwargs.pop("has_input_vocabulary", vocabulary is not None)
        kwargs.pop("dtype", None)
        kwargs.pop("vocabulary_dtype", None)
        super().__init__(**kwargs)
        where = f"{type(self).__name__} {self.name!r}"
        if max_tokens is not None and max_tokens <= 1:
            raise ValueError(f"{where}: max_tokens must be greater than 1, got {max_tokens}")
        if pad_to_max_tokens and max_tokens is None:
            raise ValueError(f"{where}: pad_to_max_tokens=True needs max_tokens, got None")
        if num_oov_indices < 0:
            raise ValueError(f"{where}: num_oov_indices must be >= 0, got {num_oov_indices}")
        if oov_method not in ("floormod", "farmhash"):
            raise ValueError(
                f"{where}: oov_method must be 'floormod' or 'farmhash', got {oov_method!r}"
            )
        if salt is not None and self._kind == "int" and oov_method != "farmhash":
            raise ValueError(
                f"{where}: salt can only be used when oov_method='farmhash', got "
                f"oov_method={oov_method!r}"
            )
        self.output_mode = check_output_mode(output_mode, ENCODINGS, where)
        if invert and self.output_mode != "int":
            raise ValueError(
                f"{where}: output_mode must be 'int' when invert is true, got {output_mode!r}"
            )
        if sparse:
            raise ValueError(f"{where}: sparse=True is not supported (dense outputs only)")
        if idf_weights is not None:
            raise ValueError(f"{where}: idf_weights belong to output_mode 'tf_idf' (not provided)")
        self.max_tokens = max_tokens
        self.num_oov_indices = int(num_oov_indices)
        self.mask_token = mask_token
        self.oov_token = oov_token
        self.invert = bool(invert)
        self.sparse = False
        self.pad_to_max_tokens = bool(pad_to_max_tokens)
        self.oov_method = oov_method
        self.salt = salt_key(salt, where)
        self.input_vocabulary = None if isinstance(vocabulary, (str, os.PathLike)) else vocabulary
        self._where = where
        self._frozen_vocab_size = frozen_size
        self._has_input_vocabulary = bool(has_vocabulary)
        self._tokens: list[Any] = []
        self._ids: dict[Any, int] = {}
        self._counts: collections.Counter[Any] = collections.Counter()
        self._tracing = False
        if vocabulary is not None:
            self.set_vocabulary(vocabulary)

    # -- overridden by StringLookup / IntegerLookup ------------------------------------------

    def _key(self, token: Any) -> Any:
        """A token as the table holds it."""
        return token

    def _token(self, key: Any) -> Any:
        """A table key as `get_vocabulary` returns it."""
        return key

    def _inverted_output(self, tokens: list[Any], shape: tuple[int, ...]) -> np.ndarray:
        return np.array(tokens, dtype=np.int64).reshape(shape)

    # -- indices -----------------------------------------------------------------------------

    def _oov_start_index(self) -> int:
        return 1 if self.mask_token is not None and self.output_mode == "int" else 0

    def _token_start_index(self) -> int:
        return self._oov_start_index() + self.num_oov_indices

    def vocabulary_size(self) -> int:
        """Size of the vocabulary, mask and OOV ids included."""
        return len(self._tokens) + self._token_start_index()

    def get_vocabulary(self, include_special_tokens: bool = True) -> list[Any]:
        """The vocabulary in id order (``include_special_tokens``: mask and OOV ids first)."""
        vocab = [self.oov_token] * self.vocabulary_size()
        start = self._token_start_index()
        vocab[start:] = [self._token(k) for k in self._tokens]
        if self.mask_token is not None and self.output_mode == "int":
            vocab[0] = self.mask_token
        return vocab if include_special_tokens else vocab[start:]

    # -- vocabulary --------------------------------------------------------------------------

    def _set_tokens(self, keys: list[Any]) -> None:
        start = self._token_start_index()
        self._tokens = list(keys)
        self._ids = {k: start + i for i, k in enumerate(self._tokens)}
        self._record_vocabulary_size()

    def _record_vocabulary_size(self) -> None:
        size = self.vocabulary_size()
        fixed = self.output_mode != "int" and not self.pad_to_max_tokens
        if fixed and self._frozen_vocab_size is not None and size != self._frozen_vocab_size:
            raise RuntimeError(
                f"{self._where}: with output_mode={self.output_mode!r} and "
                f"pad_to_max_tokens=False the vocabulary size cannot change: it was "
                f"{self._frozen_vocab_size}, the new vocabulary has {size}"
            )
        self._frozen_vocab_size = size

    def _file_keys(self, lines: list[bytes]) -> list[Any]:
        return lines

    def set_vocabulary(self, vocabulary: Any, idf_weights: Any = None) -> None:
        """Replace the vocabulary: a list or 1-D array of tokens, or a file of one per line.

        A list may start with the special tokens (mask, then OOV) in id order; they are then
        skipped. Raises ValueError as Keras does: an empty or repeated vocabulary, a reserved
        token elsewhere, more than ``max_tokens``, ``idf_weights``.
        """
        if idf_weights is not None:
            raise ValueError(f"{self._where}: idf_weights belong to output_mode 'tf_idf'")
        if isinstance(vocabulary, (str, os.PathLike)):
            keys = self._file_keys(read_vocabulary_file(vocabulary, self._where))
            self._set_tokens(keys)
            return
        values = np.asarray(vocabulary.numpy() if hasattr(vocabulary, "numpy") else vocabulary)
        if values.size == 0:
            raise ValueError(f"{self._where}: cannot set an empty vocabulary, got {vocabulary!r}")
        keys = [self._key(v) for v in values.reshape(-1).tolist()]
        special = [self.mask_token] * self._oov_start_index()
        special += [self.oov_token] * self.num_oov_indices
        self._set_tokens(
            check_vocabulary(
                keys,
                [self._key(t) for t in special],
                self._key(self.mask_token) if self.mask_token is not None else None,
                self._key(self.oov_token) if self.invert and self.oov_token is not None else None,
                self.max_tokens,
                self._where,
            )
        )

    def adapt(self, data: Any, steps: int | None = None) -> None:
        """Learn the vocabulary from ``data``: an array or list, or an iterable of batches.

        ``data`` may be an `hpcdist.data.Dataset` (each batch counted; ``steps`` batches at
        most). Tokens are ordered by count, ties by the token from high to low, truncated to
        ``max_tokens``; the mask and OOV tokens are not learned.

        Raises:
            ValueError: The layer was given a vocabulary.
        """
        self._counts.clear()
        for batch in adapt_batches(data, steps):
            self.update_state(batch)
        self.finalize_state()

    def update_state(self, data: Any) -> None:
        """Count the tokens of one batch.

        Raises:
            ValueError: The layer was given a vocabulary.
        """
        if self._has_input_vocabulary:
            raise ValueError(
                f"{self._where}: cannot adapt after setting a static vocabulary through "
                "`vocabulary` or `set_vocabulary()`"
            )
        keys, inverse, _ = unique_keys(data, self._kind)
        if keys:
            counts = np.bincount(inverse, minlength=len(keys))
            self._counts.update(dict(zip(keys, counts.tolist(), strict=True)))

    def finalize_state(self) -> None:
        """Turn the counts into the vocabulary (kept as it was when nothing was counted)."""
        if self._has_input_vocabulary or not self._counts:
            self._record_vocabulary_size()
            return
        for special in (self.mask_token, self.oov_token):
            if special is not None:
                self._counts.pop(self._key(special), None)
        limit = None if not self.max_tokens else self.max_tokens - self._token_start_index()
        self._set_tokens(sorted_by_frequency(self._counts, limit))
        self._counts.clear()

    def reset_state(self) -> None:
        """Forget the counts of an `adapt` in progress."""
        self._counts.clear()

    # -- calling -----------------------------------------------------------------------------

    def _convert_inputs(self, inputs: Any) -> Any:
        """Inputs as given (Keras converts no inputs of preprocessing layers)."""
        return inputs

    def __call__(self, inputs: Any, training: bool | None = None, **kwargs: Any) -> Any:
        """As `Layer.__call__`; on symbolic inputs the placeholders are not looked up (Keras)."""
        if not is_symbolic(inputs):
            return super().__call__(inputs, training, **kwargs)
        self._tracing = True
        try:
            return super().__call__(inputs, training, **kwargs)
        finally:
            self._tracing = False

    def _oov_ids(self, keys: list[Any]) -> np.ndarray:
        n = self.num_oov_indices
        if self._kind == "int" and self.oov_method != "farmhash":
            buckets = np.array([k % n for k in keys], dtype=np.int64)
        elif self.salt is not None:
            buckets = to_hash_bucket_strong(keys, n, self.salt)
        else:
            buckets = to_hash_bucket_fast(keys, n)
        return buckets + self._oov_start_index()

    def _lookup(self, inputs: Any) -> np.ndarray:
        """Ids of ``inputs`` (mask and OOV rules applied), in the inputs' shape.

        Raises:
            InvalidArgumentError: OOV tokens with ``num_oov_indices=0``.
        """
        keys, inverse, shape = unique_keys(inputs, self._kind)
        mask = self._key(self.mask_token) if self.mask_token is not None else None
        mask_id = 0 if self.output_mode == "int" else _INT64_MAX
        ids = np.array([self._ids.get(k, -1) for k in keys], dtype=np.int64)
        if mask is not None:
            ids[[k == mask for k in keys]] = mask_id
        oov = np.nonzero(ids == -1)[0]
        if oov.size and self.num_oov_indices == 0:
            raise InvalidArgumentError(
                f"{self._where}: with num_oov_indices=0 every input must be in the vocabulary, "
                f"found OOV values {[self._token(keys[i]) for i in oov[:10]]}; consider "
                "setting num_oov_indices=1"
            )
        if oov.size:
            ids[oov] = self._oov_ids([keys[i] for i in oov])
        return ids[inverse].reshape(shape) if keys else np.zeros(shape, np.int64)

    def _invert(self, inputs: Any) -> np.ndarray:
        ids = integer_ids(inputs, self._where)
        table = dict(enumerate(self._tokens, self._token_start_index()))
        if self.mask_token is not None:
            table[0] = self._key(self.mask_token)
        default = None if self.oov_token is None else self._key(self.oov_token)
        uniq, inverse = np.unique(ids.reshape(-1), return_inverse=True)
        found = [table.get(int(i), default) for i in uniq]
        return self._inverted_output([found[i] for i in inverse.reshape(-1)], ids.shape)

    def call(self, inputs: Any) -> np.ndarray:
        """Ids of the tokens (or tokens of the ids when inverted), encoded in ``output_mode``.

        Raises:
            RuntimeError: An encoding mode before the vocabulary is known.
            InvalidArgumentError: OOV tokens with ``num_oov_indices=0``.
        """
        depth = self.max_tokens if self.pad_to_max_tokens else self._frozen_vocab_size
        if self.output_mode != "int" and depth is None:
            raise RuntimeError(
                f"{self._where}: with output_mode={self.output_mode!r} and "
                "pad_to_max_tokens=False the vocabulary must be set before calling the layer: "
                "pass `vocabulary` or call `adapt`"
            )
        if self._tracing:
            shape = np.shape(inputs.numpy() if hasattr(inputs, "numpy") else inputs)
            if self.invert:
                return self._inverted_output([self._blank] * int(np.prod(shape)), shape)
            ids = np.zeros(shape, np.int64)
        elif self.invert:
            return self._invert(inputs)
        else:
            ids = self._lookup(inputs)
        return encode_categorical_inputs(ids, self.output_mode, depth or 0, np.int64)

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able; a vocabulary from a file or `adapt` is not kept)."""
        vocabulary = self.input_vocabulary
        if isinstance(vocabulary, np.ndarray):
            vocabulary = vocabulary.tolist()
        return {
            **super().get_config(),
            "invert": self.invert,
            "max_tokens": self.max_tokens,
            "num_oov_indices": self.num_oov_indices,
            "oov_token": self.oov_token,
            "mask_token": self.mask_token,
            "output_mode": self.output_mode,
            "sparse": self.sparse,
            "pad_to_max_tokens": self.pad_to_max_tokens,
            "idf_weights": None,
            "vocabulary": vocabulary,
            "vocabulary_size": self._frozen_vocab_size,
            "oov_method": self.oov_method,
            "salt": self.salt,
        }
