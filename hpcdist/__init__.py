"""hpcdist: tf.distribute's programming model on MPI clusters.

``import hpcdist as hd``; see the README and ``docs/`` for the tour.
"""

from hpcdist import cluster, comm, data, errors, settings
from hpcdist._version import __version__
from hpcdist.comm import (
    CommunicationImplementation,
    CommunicationOptions,
    Communicator,
    ReduceOp,
)

__all__ = [
    "CommunicationImplementation",
    "CommunicationOptions",
    "Communicator",
    "ReduceOp",
    "__version__",
    "cluster",
    "comm",
    "data",
    "errors",
    "settings",
]
