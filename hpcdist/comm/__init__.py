"""Collective communication on numpy and CuPy arrays.

`Communicator` is the front; `Backend` the contract every backend implements;
`available_backends` the registry of a communicator's backends.
"""

from hpcdist.comm.backend import Backend
from hpcdist.comm.communicator import Communicator, Handle, world
from hpcdist.comm.nccl_backend import nccl_dtype, nccl_op
from hpcdist.comm.options import CommunicationImplementation, CommunicationOptions
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.comm.registry import available_backends

__all__ = [
    "Backend",
    "CommunicationImplementation",
    "CommunicationOptions",
    "Communicator",
    "Handle",
    "ReduceOp",
    "available_backends",
    "nccl_dtype",
    "nccl_op",
    "world",
]
