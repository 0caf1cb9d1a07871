"""Collective communication on numpy arrays (API section 2)."""

from hpcdist.comm.backend import Backend
from hpcdist.comm.communicator import Communicator, Handle, world
from hpcdist.comm.ops import ReduceOp
from hpcdist.comm.options import CommunicationImplementation, CommunicationOptions

__all__ = [
    "Backend",
    "CommunicationImplementation",
    "CommunicationOptions",
    "Communicator",
    "Handle",
    "ReduceOp",
    "world",
]
