"""Rank-aware logging: the chief prints, other ranks speak up only for warnings.

The ``hpcdist`` logger gets one handler the first time `get_logger` is called. Records are
prefixed with ``[rank R/N]`` on every rank but the chief; INFO records are dropped on non-chief
ranks unless ``HPCDIST_LOG_ALL_RANKS=1``.
"""

from __future__ import annotations

import logging
import sys

from hpcdist.settings import get_settings

__all__ = ["get_logger", "process_rank"]

_LOGGER_NAME = "hpcdist"
_configured = False


def process_rank() -> tuple[int, int]:
    """Return ``(rank, size)`` in ``MPI.COMM_WORLD`` without initialising MPI.

    Returns:
        ``(0, 1)`` when MPI has not been initialised yet.
    """
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return mpi.COMM_WORLD.Get_rank(), mpi.COMM_WORLD.Get_size()
    return 0, 1


class _RankFilter(logging.Filter):
    def __init__(self, all_ranks: bool) -> None:
        super().__init__()
        self.all_ranks = all_ranks

    def filter(self, record: logging.LogRecord) -> bool:
        rank, size = process_rank()
        record.rankprefix = f"[rank {rank}/{size}] " if rank else ""
        return rank == 0 or self.all_ranks or record.levelno >= logging.WARNING


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of the record."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        del value


def get_logger() -> logging.Logger:
    """Return the ``hpcdist`` logger, configured on first use.

    Returns:
        The logger.
    """
    global _configured
    logger = logging.getLogger(_LOGGER_NAME)
    if not _configured:
        settings = get_settings()
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("hpcdist %(levelname)s %(rankprefix)s%(message)s"))
        handler.addFilter(_RankFilter(settings.log_all_ranks))
        logger.addHandler(handler)
        logger.setLevel(settings.log_level)
        logger.propagate = False
        _configured = True
    return logger
