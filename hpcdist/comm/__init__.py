"""Collective communication on numpy arrays."""

from hpcdist.comm.backend import Backend
from hpcdist.comm.communicator import Communicator, Handle, world
from hpcdist.comm.options import CommunicationImplementation, CommunicationOptions
from hpcdist.comm.reduce_op import ReduceOp

__all__ = [
    "Backend",
    "CommunicationImplementation",
    "CommunicationOptions",
    "Communicator",
    "Handle",
    "ReduceOp",
    "world",
]
