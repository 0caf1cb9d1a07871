"""Library settings: explicit arguments, then ``HPCDIST_*`` environment variables, then defaults.

Every setting has one field in `Settings`. An ``HPCDIST_*`` variable that names no setting is an
error rather than silently ignored, because a typo (``HPCDIST_TIMEOUT=30``) would otherwise turn
off the protection the user asked for.

Every value, whether it comes from an argument or from the environment, goes through the same
rule of its kind at start-up (`Settings` validates in ``__post_init__``), so a value that would
crash later (a log level the logging module does not know) or silently disable a protection
(a ``nan`` deadline) is rejected before the first collective:

- seconds: a finite number >= 0; 0 (``0``, ``0.0``, ``0e3``), ``none`` or an empty string mean
  none; ``nan`` and ``inf`` are rejected;
- byte counts and other integers: an integer (``"4.0"`` and ``True`` are rejected) at or above
  the field's minimum; optional ones also take ``none`` or an empty string;
- switches: ``1/true/yes/on`` or ``0/false/no/off``, any case;
- log level: a level name of Python's ``logging`` module, any case, or an integer >= 0.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ENV_PREFIX", "LOG_LEVELS", "Settings", "get_settings"]

ENV_PREFIX = "HPCDIST_"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_NONE = ("", "none")
_IMPLEMENTATIONS = ("auto", "mpi", "shm", "ring", "nccl")

#: Level names accepted for ``log_level`` (any case), besides integer levels >= 0.
LOG_LEVELS = ("CRITICAL", "FATAL", "ERROR", "WARNING", "WARN", "INFO", "DEBUG", "NOTSET")


def _is_none(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in _NONE)


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, (str, int)) else None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)} or a bool, got {value!r}")


def _seconds(value: Any) -> float | None:
    """Finite and >= 0; 0 however spelled, ``none`` and ``""`` mean none."""
    expected = "a finite number of seconds >= 0 (0 or 'none' = none)"
    if _is_none(value):
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected {expected}, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected {expected}, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"expected {expected}, got {value!r}")
    return None if number == 0 else number


def _integer(value: Any, minimum: int, optional: bool) -> int | None:
    expected = f"an integer >= {minimum}" + (" or 'none'" if optional else "")
    if optional and _is_none(value):
        return None
    if isinstance(value, bool):
        raise ValueError(f"expected {expected}, got {value!r}")
    if isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            raise ValueError(f"expected {expected}, got {value!r}") from None
    elif isinstance(value, int):
        number = value
    else:
        raise ValueError(f"expected {expected}, got {value!r}")
    if number < minimum:
        raise ValueError(f"expected {expected}, got {value!r}")
    return number


def _implementation(value: Any) -> str:
    name = value.strip().lower() if isinstance(value, str) else None
    if name not in _IMPLEMENTATIONS:
        raise ValueError(f"expected one of {list(_IMPLEMENTATIONS)}, got {value!r}")
    return name


def _path(value: Any) -> str | None:
    """A file path, or None for an empty one."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"expected a file path, got {value!r}")
    return value.strip() or None


def _log_level(value: Any) -> str | int:
    """A ``logging`` level name (returned upper case) or an integer level >= 0."""
    expected = f"a logging level name {list(LOG_LEVELS)} (any case) or an integer >= 0"
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"expected {expected}, got {value!r}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected {expected}, got {value!r}")
    text = value.strip()
    if text.upper() in LOG_LEVELS:
        return text.upper()
    try:
        return _log_level(int(text))
    except ValueError:
        raise ValueError(f"expected {expected}, got {value!r}") from None


def _int_rule(minimum: int, optional: bool = False) -> Callable[[Any], int | None]:
    return lambda value: _integer(value, minimum, optional)


#: One rule per setting, applied to arguments and environment text alike.
_RULES: dict[str, Callable[[Any], Any]] = {
    "timeout_seconds": _seconds,
    "stall_warning_seconds": _seconds,
    "check_collectives": _bool,
    "implementation": _implementation,
    "bytes_per_pack": _int_rule(0),
    "shm_min_bytes": _int_rule(0),
    "shm_chunk_bytes": _int_rule(4096),
    "ranks_per_node": _int_rule(1, optional=True),
    "abort_on_exception": _bool,
    "log_level": _log_level,
    "log_all_ranks": _bool,
    "num_ps": _int_rule(1, optional=True),
    "ps_segment_bytes": _int_rule(4096),
    "cuda_aware_mpi": _bool,
    "nccl_hierarchical": _bool,
    "gpu": _int_rule(0, optional=True),
    "restart_count": _int_rule(0),
    "timeline": _path,
    "overlap_gradients": _bool,
    "overlap_bucket_bytes": _int_rule(0),
    "ps_launch": _path,
    "count_messages": _bool,
    "keep_freed_memory": _bool,
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """All tunable behaviour of hpcdist.

    Every field is checked (and normalised) by the rule of its kind when the settings are
    built, from arguments or from the environment; see the module docstring and
    ``docs/settings.md``.

    Attributes:
        timeout_seconds: Default deadline of a collective; None waits forever (but see
            `stall_warning_seconds`); 0 means None. Env: ``HPCDIST_TIMEOUT_SECONDS``.
        stall_warning_seconds: After this long in one collective, log a warning naming the
            ranks that have not joined. None (or 0) disables.
            Env: ``HPCDIST_STALL_WARNING_SECONDS``.
        check_collectives: Compare op, dtype, shape and sequence number of every collective
            across ranks. Env: ``HPCDIST_CHECK_COLLECTIVES``.
        implementation: Default backend: ``auto``, ``mpi``, ``shm``, ``ring`` or ``nccl``.
            Env: ``HPCDIST_IMPLEMENTATION``.
        bytes_per_pack: Default fusion bucket size for grouped all-reduce; 0 = one pack.
            Env: ``HPCDIST_BYTES_PER_PACK``.
        shm_min_bytes: ``auto`` uses the shared-memory backend from this message size on.
            Env: ``HPCDIST_SHM_MIN_BYTES``.
        shm_chunk_bytes: Per-rank slot size of the shared-memory pipeline (>= 4096).
            Env: ``HPCDIST_SHM_CHUNK_BYTES``.
        ranks_per_node: Split ranks into fake nodes of this many consecutive ranks (testing
            multi-node code on one machine); None uses the real node boundaries.
            Env: ``HPCDIST_RANKS_PER_NODE``.
        abort_on_exception: An uncaught exception on one rank aborts the whole job.
            Env: ``HPCDIST_ABORT_ON_EXCEPTION``.
        log_level: Level of the ``hpcdist`` logger: a ``logging`` level name (stored upper
            case) or an integer level. Env: ``HPCDIST_LOG_LEVEL``.
        log_all_ranks: Log INFO messages on every rank, not only the chief.
            Env: ``HPCDIST_LOG_ALL_RANKS``.
        num_ps: Number of parameter-server ranks of a `ParameterServerStrategy` launched
            without a ``ps`` job in its cluster resolver (rank 0 is the coordinator, the next
            ``num_ps`` ranks are ps, the rest workers); also the jobs of
            `hpcdist.cluster.resolve` and of the MPI and Slurm resolvers built without jobs.
            Env: ``HPCDIST_NUM_PS``.
        ps_segment_bytes: Size of each RMA window segment a ps rank allocates for variables
            (a larger variable gets a segment of its own size; >= 4096).
            Env: ``HPCDIST_PS_SEGMENT_BYTES``.
        cuda_aware_mpi: The MPI library reads and writes GPU memory: all-reduces of CuPy arrays
            that NCCL does not carry hand device buffers to MPI instead of staging them through
            pinned host memory. Opt-in, as no portable query exists (mpi4jax does the same).
            Env: ``HPCDIST_CUDA_AWARE_MPI``.
        nccl_hierarchical: Across nodes, reduce GPU arrays with NCCL inside each node and MPI
            between node leaders instead of one NCCL communicator over all ranks (all-reduce
            only). Env: ``HPCDIST_NCCL_HIERARCHICAL``.
        gpu: CUDA ordinal this rank binds to; None picks one from the local rank (see
            `hpcdist.cluster.gpus.pick_gpu`). Env: ``HPCDIST_GPU``.
        restart_count: How many times ``hpcdist run --max-restarts`` relaunched this job
            before this attempt (set by it; 0 on the first). Env: ``HPCDIST_RESTART_COUNT``.
        timeline: Record a timeline of every rank into this Chrome trace file
            (`hpcdist.timeline`); None records nothing. Env: ``HPCDIST_TIMELINE``.
        overlap_gradients: ``Model.fit`` under a strategy with one replica per process
            (`MultiWorkerMirroredStrategy`) starts all-reducing buckets of final gradients
            while the backward pass goes on (`hpcdist.strategies.grad_buckets`). Off by
            default: it did not win on the measured 2-core machine.
            Env: ``HPCDIST_OVERLAP_GRADIENTS``.
        overlap_bucket_bytes: Bucket size of the overlapped all-reduce; 0 = one bucket per
            variable. Env: ``HPCDIST_OVERLAP_BUCKET_BYTES``.
        ps_launch: The launch file that ``hpcdist run --ps P --workers W`` hands each of its
            jobs (role, worker index, the job's secret; `hpcdist.cluster.launched`); None
            outside that launch. Env: ``HPCDIST_PS_LAUNCH``.
        count_messages: Count the MPI operations this process starts (calls and bytes per
            kind, `hpcdist.comm.counters`); read once, when hpcdist's comm package is imported.
            Env: ``HPCDIST_COUNT_MESSAGES``.
        keep_freed_memory: Set glibc malloc's thresholds so that freed arrays' memory is kept
            for reuse instead of being returned to the kernel and faulted in again by the next
            step (`hpcdist.utils.heap`); read once, when `hpcdist.core` is imported.
            Env: ``HPCDIST_KEEP_FREED_MEMORY``.

    Raises:
        ValueError: A value breaks its field's rule; the message names the field, what is
            expected and the value received.
    """

    timeout_seconds: float | None = None
    stall_warning_seconds: float | None = 60.0
    check_collectives: bool = True
    implementation: str = "auto"
    bytes_per_pack: int = 4 << 20
    shm_min_bytes: int = 0
    shm_chunk_bytes: int = 1 << 20
    ranks_per_node: int | None = None
    abort_on_exception: bool = True
    log_level: str | int = "INFO"
    log_all_ranks: bool = False
    num_ps: int | None = None
    ps_segment_bytes: int = 16 << 20
    cuda_aware_mpi: bool = False
    nccl_hierarchical: bool = False
    gpu: int | None = None
    restart_count: int = 0
    timeline: str | None = None
    overlap_gradients: bool = False
    overlap_bucket_bytes: int = 4 << 20
    ps_launch: str | None = None
    count_messages: bool = False
    keep_freed_memory: bool = True

    def __post_init__(self) -> None:
        for name, rule in _RULES.items():
            value = getattr(self, name)
            try:
                normalised = rule(value)
            except ValueError as exc:
                raise ValueError(f"hpcdist setting {name}={value!r}: {exc}") from None
            object.__setattr__(self, name, normalised)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from explicit overrides, then the environment, then defaults.

        Args:
            environ: The environment to read; ``os.environ`` by default.
            **overrides: Explicit values; they win over the environment.

        Returns:
            The settings.

        Raises:
            ValueError: An override or an ``HPCDIST_*`` variable names no setting, or a value
                breaks its setting's rule. The message names the variable (or argument), what
                is expected and the value received.
        """
        environ = os.environ if environ is None else environ
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise ValueError(f"unknown hpcdist setting(s) {unknown}; valid: {sorted(fields)}")
        values: dict[str, Any] = {}
        for key, text in environ.items():
            if not key.startswith(ENV_PREFIX):
                continue
            name = key[len(ENV_PREFIX) :].lower()
            if name not in fields:
                valid = ", ".join(ENV_PREFIX + n.upper() for n in sorted(fields))
                raise ValueError(f"unknown environment variable {key}={text!r}; valid: {valid}")
            try:
                values[name] = _RULES[name](text)
            except ValueError as exc:
                raise ValueError(f"environment variable {key}={text!r}: {exc}") from None
        values.update(overrides)
        return cls(**values)

    @classmethod
    def one(cls, name: str, environ: Mapping[str, str] | None = None) -> Any:
        """The setting ``name`` from its own environment variable alone, else its default.

        For a module that reads one setting when it is imported: other ``HPCDIST_*``
        variables, even invalid ones, are not looked at.

        Raises:
            ValueError: The variable breaks the setting's rule (naming it and the value).
        """
        environ = os.environ if environ is None else environ
        key = ENV_PREFIX + name.upper()
        return getattr(cls.from_env({key: environ[key]} if key in environ else {}), name)


_cached: Settings | None = None


def get_settings(refresh: bool = False) -> Settings:
    """Return the process-wide settings, read from the environment once.

    Args:
        refresh: Read the environment again.

    Returns:
        The settings.

    Raises:
        ValueError: An ``HPCDIST_*`` variable is unknown or breaks its setting's rule.
    """
    global _cached
    if _cached is None or refresh:
        _cached = Settings.from_env()
    return _cached
