"""``tf.data.Options``: options a dataset carries (``Dataset.with_options``).

What hpcdist reads: ``experimental_distribute.auto_shard_policy``, the policy a distributed
dataset follows (`hpcdist.data.options.auto_shard_policy_of`), and ``deterministic``, the
default order of a parallel ``map``. Every other field of TF's Options is accepted and kept
(with TF's type checks where TF has them), without effect: a numpy pipeline has no graph
optimizations, and its thread pools are sized by each ``num_parallel_calls``.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

from hpcdist.data.options import AutoShardPolicy

__all__ = [
    "AutotuneOptions",
    "DistributeOptions",
    "ExternalStatePolicy",
    "OptimizationOptions",
    "Options",
    "ThreadingOptions",
    "auto_shard_policy_of",
]


class ExternalStatePolicy(enum.Enum):
    """TF's policy for datasets with external state (recorded only)."""

    WARN = 0
    IGNORE = 1
    FAIL = 2


class _OptionsBase:
    """Options with a fixed set of fields; unknown names are refused, as TF does.

    ``_FIELDS`` maps each field to ``(default, types)``: None as default means unset, and
    ``types`` (or None for any value) is checked on assignment. Nested options are created
    per instance. `merge` keeps this object's fields and overrides those set in the other.
    """

    _FIELDS: ClassVar[dict[str, tuple[Any, Any]]] = {}
    _NESTED: ClassVar[dict[str, type]] = {}

    def __init__(self) -> None:
        object.__setattr__(self, "_set", set())
        for name, (default, _) in self._FIELDS.items():
            object.__setattr__(self, name, default)
        for name, cls in self._NESTED.items():
            object.__setattr__(self, name, cls())

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._NESTED:
            if not isinstance(value, self._NESTED[name]):
                raise TypeError(
                    f'Property "{name}" must be of type {self._NESTED[name].__name__}, got: '
                    f"{value!r} (type: {type(value).__name__})"
                )
        elif name in self._FIELDS:
            types = self._FIELDS[name][1]
            if value is not None and types is not None and not isinstance(value, types):
                raise TypeError(
                    f'Property "{name}" must be of type {types}, got: {value!r} '
                    f"(type: {type(value).__name__})"
                )
        else:
            raise AttributeError(f"Cannot set the property {name} on {type(self).__name__}.")
        object.__setattr__(self, name, value)
        self._set.add(name)

    def _merged(self, other: _OptionsBase) -> _OptionsBase:
        out = type(self)()
        for name in self._FIELDS:
            source: _OptionsBase = other if name in other._set else self
            if name in source._set:
                setattr(out, name, getattr(source, name))
        for name in self._NESTED:
            nested: _OptionsBase = getattr(self, name)
            object.__setattr__(out, name, nested._merged(getattr(other, name)))
        return out

    def _state(self) -> dict[str, Any]:
        state = {name: getattr(self, name) for name in self._FIELDS}
        for name in self._NESTED:
            nested: _OptionsBase = getattr(self, name)
            state[name] = nested._state()
        return state

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._state() == other._state()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self._state().items())
        return f"{type(self).__name__}({fields})"


class DistributeOptions(_OptionsBase):
    """How a distribution strategy splits the dataset (TF's ``DistributeOptions``).

    Attributes:
        auto_shard_policy: `AutoShardPolicy` (AUTO by default).
        num_devices: Recorded (TF's hint for rebatching).
    """

    _FIELDS: ClassVar[dict[str, tuple[Any, Any]]] = {
        "auto_shard_policy": (AutoShardPolicy.AUTO, AutoShardPolicy),
        "num_devices": (None, int),
    }


class ThreadingOptions(_OptionsBase):
    """TF's thread-pool options (recorded only)."""

    _FIELDS: ClassVar[dict[str, tuple[Any, Any]]] = {
        "max_intra_op_parallelism": (None, int),
        "private_threadpool_size": (None, int),
    }


class OptimizationOptions(_OptionsBase):
    """TF's graph-optimization switches (recorded only)."""

    _FIELDS: ClassVar[dict[str, tuple[Any, Any]]] = {
        name: (None, bool)
        for name in (
            "apply_default_optimizations",
            "filter_fusion",
            "filter_parallelization",
            "inject_prefetch",
            "map_and_batch_fusion",
            "map_and_filter_fusion",
            "map_fusion",
            "map_parallelization",
            "noop_elimination",
            "parallel_batch",
            "seq_interleave_prefetch",
            "shuffle_and_repeat_fusion",
            "warm_start",
        )
    }


class AutotuneOptions(_OptionsBase):
    """TF's autotuning options (recorded only)."""

    _FIELDS: ClassVar[dict[str, tuple[Any, Any]]] = {
        "autotune_algorithm": (None, None),
        "cpu_budget": (None, int),
        "enabled": (None, bool),
        "initial_parallelism": (None, int),
        "min_parallelism": (None, int),
        "ram_budget": (None, int),
    }


class Options(_OptionsBase):
    """``tf.data.Options``: set fields, then ``dataset.with_options(options)``.

    ``options.experimental_distribute.auto_shard_policy`` travels with the dataset through
    its transformations, where distribution code reads it (`auto_shard_policy_of`). Other
    fields are TF's, accepted and recorded.
    """

    _FIELDS: ClassVar[dict[str, tuple[Any, Any]]] = {
        "dataset_name": (None, str),
        "deterministic": (None, bool),
        "experimental_deterministic": (None, bool),
        "experimental_external_state_policy": (None, ExternalStatePolicy),
        "experimental_slack": (None, bool),
        "experimental_symbolic_checkpoint": (None, bool),
        "experimental_warm_start": (None, bool),
        "framework_type": (None, None),
    }
    _NESTED: ClassVar[dict[str, type]] = {
        "autotune": AutotuneOptions,
        "experimental_distribute": DistributeOptions,
        "experimental_optimization": OptimizationOptions,
        "threading": ThreadingOptions,
    }

    @property
    def experimental_threading(self) -> ThreadingOptions:
        """TF's old name of `threading`."""
        return self.threading

    def merge(self, options: Options) -> Options:
        """These options with the fields set in ``options`` taking precedence (TF's rule).

        Raises:
            TypeError: ``options`` is not an `Options`.
        """
        if not isinstance(options, Options):
            raise TypeError(f"merge needs hd.data.Options, got {type(options).__name__}")
        return self._merged(options)  # type: ignore[return-value]


def auto_shard_policy_of(dataset: Any) -> AutoShardPolicy:
    """The auto-shard policy ``dataset`` carries (``with_options``), AUTO when it has none.

    For distribution code: any object with an ``options()`` method returning `Options` is
    read; anything else (a list of batches, a generator) gives AUTO.
    """
    read = getattr(dataset, "options", None)
    options = read() if callable(read) else None
    if isinstance(options, Options):
        return options.experimental_distribute.auto_shard_policy
    return AutoShardPolicy.AUTO
