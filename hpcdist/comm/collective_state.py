"""What every collective of one communicator shares: group, envelope, backends, resolved options.

Options are resolved once per options object: the call's options over the communicator's, then
the library settings for whatever is still unset.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from mpi4py import MPI

from hpcdist.cluster.topology import NodeLayout
from hpcdist.comm.envelope import Envelope
from hpcdist.comm.options import CommunicationImplementation, CommunicationOptions
from hpcdist.comm.selection import Backends
from hpcdist.settings import Settings

__all__ = ["CollectiveState", "Resolved", "same"]


class Resolved(NamedTuple):
    """Options with every default filled in."""

    implementation: CommunicationImplementation
    timeout: float | None
    compression: str | None
    bytes_per_pack: int


def same(a: Any) -> Any:
    """Identity: results of collectives on arrays that need no conversion back."""
    return a


class CollectiveState:
    """The state a communicator's collectives share (one object per communicator).

    Args:
        comm: The library's communicator.
        layout: Where every rank runs.
        settings: Library settings.
        options: The communicator's default options.
        envelope: Sequence numbers and header checks.
        backends: The backends and the rules to pick one.
    """

    def __init__(
        self,
        comm: MPI.Intracomm,
        layout: NodeLayout,
        settings: Settings,
        options: CommunicationOptions,
        envelope: Envelope,
        backends: Backends,
    ) -> None:
        self.comm = comm
        self.rank, self.size, self.num_nodes = layout.rank, layout.size, layout.num_nodes
        self.settings = settings
        self.options = options
        self.env = envelope
        self.backends = backends
        self._resolved: dict[CommunicationOptions | None, Resolved] = {}

    def opts(self, options: CommunicationOptions | None) -> Resolved:
        """``options`` over the communicator's, with every default filled in (cached)."""
        resolved = self._resolved.get(options)
        if resolved is None:
            merged = self.options.merge(options)
            impl = merged.implementation
            if impl is CommunicationImplementation.AUTO:
                impl = CommunicationImplementation.parse(self.settings.implementation)
            settings = self.settings
            resolved = Resolved(
                impl,
                merged.timeout_seconds
                if merged.timeout_seconds is not None
                else settings.timeout_seconds,
                merged.compression,
                merged.bytes_per_pack
                if merged.bytes_per_pack is not None
                else settings.bytes_per_pack,
            )
            self._resolved[options] = resolved
        return resolved
