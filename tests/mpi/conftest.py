"""Fixtures of the MPI suite (run in every rank by ``mpiexec ... tests/mpi_pytest.sh``)."""

from __future__ import annotations

import pytest

import hpcdist as hd


@pytest.fixture(scope="module")
def comm() -> hd.comm.Communicator:
    """The world communicator, shared by a module's tests (a module may define its own)."""
    return hd.comm.world()
