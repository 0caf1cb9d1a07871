"""Counts of the MPI operations this process starts: calls and bytes, per kind.

Off unless ``HPCDIST_COUNT_MESSAGES=1`` (`Settings.count_messages`), read once when this module
is imported. The owners of MPI traffic (`hpcdist.comm.checks`, the MPI, hierarchical and ring
backends, `hpcdist.comm.p2p`, `hpcdist.comm.rma`) guard each call with ``if COUNTING:``, one
module-level boolean, so that counting costs nothing measurable when it is off.

What is counted is what hpcdist asks of MPI, one entry per call: ``collective.<name>`` (the
bytes this rank contributes), ``p2p.send`` (pickled bytes), ``rma.<op>`` (bytes moved). How
many messages the MPI library turns a collective into is its algorithm's business
(docs/scaling.md models it); point-to-point and one-sided calls are one message each.

Kinds used by the owners:

- ``collective.header``: the header check of a collective across nodes (16 bytes);
- ``collective.header_table``: the full headers exchanged after a mismatch (96 bytes);
- ``collective.allreduce``, ``collective.bcast``, ``collective.allgatherv``,
  ``collective.reduce_scatter``, ``collective.alltoallv``, ``collective.barrier``: payloads;
- ``collective.leader_allreduce``: the node leaders' all-reduce of the hierarchical backend;
- ``p2p.ring``: one step of the ring all-reduce;
- ``p2p.send``: a pickled point-to-point message (`hpcdist.comm.p2p.Channel`);
- ``p2p.announce``: the empty messages of a slow communicator creation
  (`hpcdist.comm.creation`), one to every other rank;
- ``rma.get``, ``rma.put``, ``rma.accumulate``, ``rma.fetch_and_op``,
  ``rma.compare_and_swap``: one-sided operations.
"""

from __future__ import annotations

import pickle
from typing import Any

from hpcdist.settings import Settings

__all__ = ["COUNTING", "add", "add_pickled", "reset", "snapshot", "total"]

#: Whether counting is on (fixed at import).
COUNTING: bool = Settings.one("count_messages")

_calls: dict[str, int] = {}
_bytes: dict[str, int] = {}


def add(kind: str, nbytes: int, calls: int = 1) -> None:
    """Record ``calls`` calls of ``kind`` moving ``nbytes`` bytes in all from this rank."""
    _calls[kind] = _calls.get(kind, 0) + calls
    _bytes[kind] = _bytes.get(kind, 0) + int(nbytes)


def add_pickled(kind: str, obj: Any) -> None:
    """Record one message carrying ``obj`` pickled as mpi4py pickles it (highest protocol)."""
    add(kind, len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)))


def snapshot() -> dict[str, tuple[int, int]]:
    """``{kind: (calls, bytes)}`` counted so far."""
    return {kind: (_calls[kind], _bytes[kind]) for kind in sorted(_calls)}


def total(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """What was counted between two snapshots, kinds with no calls left out."""
    out = {}
    for kind, (calls, nbytes) in after.items():
        c0, b0 = before.get(kind, (0, 0))
        if calls - c0:
            out[kind] = (calls - c0, nbytes - b0)
    return out


def reset() -> None:
    """Forget every count."""
    _calls.clear()
    _bytes.clear()
