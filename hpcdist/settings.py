"""Library settings: explicit arguments, then ``HPCDIST_*`` environment variables, then defaults.

Every setting has one field in `Settings`. An ``HPCDIST_*`` variable that names no setting is an
error rather than silently ignored, because a typo (``HPCDIST_TIMEOUT=30``) would otherwise turn
off the protection the user asked for.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["ENV_PREFIX", "Settings", "get_settings"]

ENV_PREFIX = "HPCDIST_"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)}, got {text!r}")


def _parse_optional_float(text: str) -> float | None:
    value = text.strip().lower()
    if value in ("", "none", "0"):
        return None
    number = float(value)
    if number < 0:
        raise ValueError(f"expected a non-negative number of seconds, got {text!r}")
    return number


def _parse_optional_int(text: str) -> int | None:
    value = text.strip().lower()
    if value in ("", "none"):
        return None
    number = int(value)
    if number <= 0:
        raise ValueError(f"expected a positive integer, got {text!r}")
    return number


def _parse_int(text: str) -> int:
    number = int(text.strip())
    if number < 0:
        raise ValueError(f"expected a non-negative integer, got {text!r}")
    return number


@dataclasses.dataclass(frozen=True)
class Settings:
    """All tunable behaviour of hpcdist.

    Attributes:
        timeout_seconds: Default deadline of a collective; None waits forever (but see
            `stall_warning_seconds`). Env: ``HPCDIST_TIMEOUT_SECONDS``.
        stall_warning_seconds: After this long in one collective, log a warning naming the
            ranks that have not joined. None disables. Env: ``HPCDIST_STALL_WARNING_SECONDS``.
        check_collectives: Compare op, dtype, shape and sequence number of every collective
            across ranks. Env: ``HPCDIST_CHECK_COLLECTIVES``.
        implementation: Default backend: ``auto``, ``mpi``, ``shm``, ``ring`` or ``nccl``.
            Env: ``HPCDIST_IMPLEMENTATION``.
        bytes_per_pack: Default fusion bucket size for grouped all-reduce; 0 = one pack.
            Env: ``HPCDIST_BYTES_PER_PACK``.
        shm_min_bytes: ``auto`` uses the shared-memory backend from this message size on.
            Env: ``HPCDIST_SHM_MIN_BYTES``.
        shm_chunk_bytes: Per-rank slot size of the shared-memory pipeline.
            Env: ``HPCDIST_SHM_CHUNK_BYTES``.
        ranks_per_node: Split ranks into fake nodes of this many consecutive ranks (testing
            multi-node code on one machine); None uses the real node boundaries.
            Env: ``HPCDIST_RANKS_PER_NODE``.
        abort_on_exception: An uncaught exception on one rank aborts the whole job.
            Env: ``HPCDIST_ABORT_ON_EXCEPTION``.
        log_level: Level of the ``hpcdist`` logger. Env: ``HPCDIST_LOG_LEVEL``.
        log_all_ranks: Log INFO messages on every rank, not only the chief.
            Env: ``HPCDIST_LOG_ALL_RANKS``.
        num_ps: Number of parameter-server ranks of a `ParameterServerStrategy` launched
            without a ``ps`` job in its cluster resolver (rank 0 is the coordinator, the next
            ``num_ps`` ranks are ps, the rest workers). Env: ``HPCDIST_NUM_PS``.
        ps_segment_bytes: Size of each RMA window segment a ps rank allocates for variables
            (a larger variable gets a segment of its own size). Env: ``HPCDIST_PS_SEGMENT_BYTES``.
        cuda_aware_mpi: The MPI library reads and writes GPU memory: all-reduces of CuPy arrays
            that NCCL does not carry hand device buffers to MPI instead of staging them through
            pinned host memory. Opt-in, as no portable query exists (mpi4jax does the same).
            Env: ``HPCDIST_CUDA_AWARE_MPI``.
        nccl_hierarchical: Across nodes, reduce GPU arrays with NCCL inside each node and MPI
            between node leaders instead of one NCCL communicator over all ranks (all-reduce
            only). Env: ``HPCDIST_NCCL_HIERARCHICAL``.
        gpu: CUDA ordinal this rank binds to; None picks one from the local rank (see
            `hpcdist.cluster.gpus.pick_gpu`). Env: ``HPCDIST_GPU``.
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
    log_level: str = "INFO"
    log_all_ranks: bool = False
    num_ps: int | None = None
    ps_segment_bytes: int = 16 << 20
    cuda_aware_mpi: bool = False
    nccl_hierarchical: bool = False
    gpu: int | None = None

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
                cannot be parsed. The message names the variable and the valid ones.
        """
        environ = os.environ if environ is None else environ
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - set(fields))
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
                values[name] = _PARSERS[name](text)
            except ValueError as exc:
                raise ValueError(f"environment variable {key}={text!r}: {exc}") from None
        values.update(overrides)
        settings = cls(**values)
        settings._validate()
        return settings

    def _validate(self) -> None:
        impls = ("auto", "mpi", "shm", "ring", "nccl")
        if self.implementation.lower() not in impls:
            raise ValueError(f"implementation must be one of {impls}, got {self.implementation!r}")
        if self.timeout_seconds is not None and self.timeout_seconds <= 0:
            raise ValueError(
                f"timeout_seconds must be positive or None, got {self.timeout_seconds}"
            )
        if self.num_ps is not None and self.num_ps < 1:
            raise ValueError(f"num_ps must be at least 1, got {self.num_ps}")
        if self.ps_segment_bytes < 4096:
            raise ValueError(f"ps_segment_bytes must be at least 4096, got {self.ps_segment_bytes}")
        if self.shm_chunk_bytes < 4096:
            raise ValueError(f"shm_chunk_bytes must be at least 4096, got {self.shm_chunk_bytes}")


_PARSERS = {
    "cuda_aware_mpi": _parse_bool,
    "nccl_hierarchical": _parse_bool,
    "gpu": lambda s: None if s.strip().lower() in ("", "none") else _parse_int(s),
    "timeout_seconds": _parse_optional_float,
    "stall_warning_seconds": _parse_optional_float,
    "check_collectives": _parse_bool,
    "implementation": lambda s: s.strip().lower(),
    "bytes_per_pack": _parse_int,
    "shm_min_bytes": _parse_int,
    "shm_chunk_bytes": _parse_int,
    "ranks_per_node": _parse_optional_int,
    "abort_on_exception": _parse_bool,
    "log_level": lambda s: s.strip().upper(),
    "log_all_ranks": _parse_bool,
    "num_ps": _parse_optional_int,
    "ps_segment_bytes": _parse_int,
}

_cached: Settings | None = None


def get_settings(refresh: bool = False) -> Settings:
    """Return the process-wide settings, read from the environment once.

    Args:
        refresh: Read the environment again.

    Returns:
        The settings.
    """
    global _cached
    if _cached is None or refresh:
        _cached = Settings.from_env()
    return _cached
