"""A CuPy whose NCCL does not load is said once, at warning level, with the reason.

Without NCCL, collectives of CuPy arrays are staged through host memory: `nccl_available`
decides it, and says why once per process. The CuPy here is a real package on ``sys.path``
whose ``cupy.cuda.nccl`` fails to import (a broken install) or loads without NCCL.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcdist.comm import nccl_backend
from hpcdist.logger import get_logger


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _cupy_names() -> list[str]:
    return [name for name in sys.modules if name == "cupy" or name.startswith("cupy.")]


@pytest.fixture
def warnings_logged() -> Iterator[list[logging.LogRecord]]:
    logger = get_logger()
    handler = _Records()
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


@pytest.fixture
def cupy_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Install a CuPy whose ``cuda/nccl.py`` is the given source, for this test only."""
    saved = {name: sys.modules.pop(name) for name in _cupy_names()}
    nccl_backend.nccl_available.cache_clear()

    def install(nccl_source: str) -> None:
        cuda = tmp_path / "cupy" / "cuda"
        cuda.mkdir(parents=True)
        (tmp_path / "cupy" / "__init__.py").write_text("")
        (cuda / "__init__.py").write_text("")
        (cuda / "nccl.py").write_text(nccl_source)
        monkeypatch.syspath_prepend(str(tmp_path))

    try:
        yield install
    finally:
        for name in _cupy_names():
            del sys.modules[name]
        sys.modules.update(saved)
        nccl_backend.nccl_available.cache_clear()


def test_a_broken_nccl_import_warns_once_with_the_reason(cupy_from, warnings_logged):
    cupy_from('raise ImportError("libnccl.so.2: cannot open shared object file")\n')
    assert [nccl_backend.nccl_available() for _ in range(3)] == [False] * 3
    assert len(warnings_logged) == 1, [r.getMessage() for r in warnings_logged]
    record = warnings_logged[0]
    assert record.levelno == logging.WARNING
    text = record.getMessage()
    assert "ImportError: libnccl.so.2: cannot open shared object file" in text
    assert "staged through host memory" in text and "implementation='nccl'" in text


def test_cupy_without_nccl_warns_once(cupy_from, warnings_logged):
    cupy_from("available = False\n")
    assert not nccl_backend.nccl_available()
    assert not nccl_backend.nccl_available()
    assert [r.levelno for r in warnings_logged] == [logging.WARNING]
    assert "cupy.cuda.nccl.available is False" in warnings_logged[0].getMessage()


def test_a_working_nccl_says_nothing(cupy_from, warnings_logged):
    cupy_from("available = True\n")
    assert nccl_backend.nccl_available()
    assert warnings_logged == []
