"""Which communicator checkpoints synchronise on (the chief writes, the others wait)."""

from __future__ import annotations

from mpi4py import MPI

from hpcdist.comm import Communicator, world
from hpcdist.strategies.ps.runtime import coordinator_only

__all__ = ["checkpoint_communicator", "is_checkpoint_chief"]


def checkpoint_communicator() -> Communicator | None:
    """The world communicator, or None on one rank and on a parameter-server coordinator.

    A parameter-server coordinator is the only rank running the program, so checkpoints there
    use no collective. On more than one rank the first call creates hpcdist's world
    communicator (collective then).
    """
    if coordinator_only():
        return None
    if MPI.COMM_WORLD.Get_size() > 1:
        return world()
    return None


def is_checkpoint_chief(comm: Communicator | None) -> bool:
    """Whether this process writes files for ``comm`` (from `checkpoint_communicator`)."""
    return comm is None or comm.rank == 0
