"""When communicators end: all of them before MPI finalises, newest first, and the world one.

Freeing windows and communicators is collective, so it must not depend on when each rank's
garbage collector runs: live communicators are held by strong references until ``close()`` or
the end of the program, when an ``atexit`` hook closes them in the same order on every rank.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from typing import Protocol, TypeVar

from mpi4py import MPI

__all__ = ["close_all", "register", "shared", "unregister"]


class Closable(Protocol):
    """What the hook needs of a communicator."""

    def close(self) -> None:
        """Release its resources (collective)."""


T = TypeVar("T", bound=Closable)

# (communicator, whether it is still usable), oldest first
_live: list[tuple[Closable, Callable[[], bool]]] = []
_shared: dict[Callable[[], Closable], Closable] = {}


def register(comm: Closable, usable: Callable[[], bool]) -> None:
    """Remember a communicator so that its windows are freed before MPI finalises.

    Args:
        comm: The communicator.
        usable: Whether it can still take part in a collective close (False after a failure:
            its peers may never join).
    """
    if not _live:
        atexit.register(close_all)
    _live.append((comm, usable))


def unregister(comm: Closable) -> None:
    """Forget a communicator (it is being closed)."""
    _live[:] = [entry for entry in _live if entry[0] is not comm]
    for key, value in list(_shared.items()):
        if value is comm:
            del _shared[key]


def close_all() -> None:
    """Close every live communicator, newest first (same order on every rank).

    Communicators that failed (a deadline passed) are skipped: their peers may never join.
    """
    if MPI.Is_finalized():
        return
    for comm, usable in reversed(list(_live)):
        if usable():
            comm.close()
    _live.clear()
    _shared.clear()


def shared(factory: Callable[[], T]) -> T:
    """The one instance ``factory()`` made for the whole program (made on first call)."""
    instance = _shared.get(factory)
    if instance is None:
        instance = _shared[factory] = factory()
    return instance  # type: ignore[return-value]
