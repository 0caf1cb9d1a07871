"""Variables of a fault-tolerant parameter-server job: workers reach the ps by messages.

Under ``hpcdist run --ps P --workers W`` each worker is its own MPI job, joined to the server
job (coordinator + ps) by an intercommunicator. The variables' memory stays in the server
job's RMA windows (`hpcdist.strategies.ps.store.RmaStore`), one window per piece of memory, so
the coordinator's ``Get``/``Accumulate`` and the workers' updates are element-wise atomic with
one another as in the single-job launch. A worker does not open windows of its own: its
`RemoteStore` sends each read or update to the owning ps (``TAG_PS_VARIABLE``), and the ps
(`VariableServer`) applies it to its own window (``Get``/``Accumulate`` on itself, flushed)
and answers (``TAG_PS_VARIABLE_REPLY``). The ps applies only complete messages: an update
from a worker that dies while sending is never received, so it can never be half applied;
replies go out without waiting (`hpcdist.comm.p2p.Channel.post`), so a ps never blocks on a
dead worker, whose channel it abandons when the coordinator says so.

Requests (pickled tuples; ``disp`` in bytes of the ps's part of the segment):
``("get", segment, disp, nbytes)``, ``("acc", segment, disp, dtype, op, data)``,
``("fop", segment, disp, dtype, op, data)``, ``("cas", segment, disp, dtype, new, expected)``,
``("get_rows", segment, disp, dtype, row, displacements)``,
``("acc_rows", segment, disp, dtype, row, displacements, op, data)``. Each is answered by the
bytes read (empty for an update), or by ``("error", text)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hpcdist.comm import rma
from hpcdist.comm.p2p import TAG_PS_VARIABLE, TAG_PS_VARIABLE_REPLY, Channel, Posted
from hpcdist.utils.waiting import Waiter

__all__ = ["RemoteStore", "RemoteWindow", "VariableServer"]

_OPS = {"sum": rma.SUM, "replace": rma.REPLACE, "no_op": rma.NO_OP}


def _op_name(op: Any) -> str:
    for name, known in _OPS.items():
        if op == known:
            return name
    raise ValueError(f"expected one of the operations {sorted(_OPS)}, got {op!r}")


def _bytes_view(buf: np.ndarray) -> np.ndarray:
    """``buf``'s bytes, writable in place.

    Raises:
        ValueError: ``buf`` is not C-contiguous (a reply could not land in it).
    """
    if not buf.flags.c_contiguous:
        raise ValueError(f"expected a C-contiguous buffer for a variable reply, got {buf.shape}")
    return buf.reshape(-1).view(np.uint8)


class RemoteWindow:
    """A worker's stand-in for one RMA segment: each operation is a request to its ps.

    It has the methods of `hpcdist.comm.rma.Window` that `RmaStorage` uses (``read``,
    ``update``, ``fetch_and_op``, ``compare_and_swap``) plus row operations that take the
    displacements themselves (a datatype cannot travel).

    Args:
        store: The worker's `RemoteStore`.
        segment: The segment's index.
    """

    def __init__(self, store: RemoteStore, segment: int) -> None:
        self.store, self.segment = store, segment

    def read(self, buf: np.ndarray, target: int, spec: Any) -> None:
        """``buf`` gets ``buf.nbytes`` bytes from ``spec[0]`` on ps rank ``target``."""
        data = self.store.request(target, ("get", self.segment, spec[0], buf.nbytes))
        _bytes_view(buf)[:] = np.frombuffer(data, np.uint8)

    def update(self, buf: np.ndarray, target: int, spec: Any, op: Any = rma.SUM) -> None:
        """Combine ``buf`` into ``target``'s memory at ``spec[0]`` with ``op``; done on return."""
        message = ("acc", self.segment, spec[0], buf.dtype.str, _op_name(op), buf.tobytes())
        self.store.request(target, message)

    def fetch_and_op(self, value: Any, result: Any, target: int, disp: int, op: Any) -> None:
        """Atomically combine one element; ``result`` gets the old one."""
        value = np.asarray(value)
        message = ("fop", self.segment, disp, value.dtype.str, _op_name(op), value.tobytes())
        _bytes_view(result)[:] = np.frombuffer(self.store.request(target, message), np.uint8)

    def compare_and_swap(self, new: Any, expected: Any, result: Any, target: int, disp: int):
        """Atomically set one element to ``new`` if it is ``expected``; ``result``: found."""
        new, expected = np.asarray(new), np.asarray(expected)
        message = ("cas", self.segment, disp, new.dtype.str, new.tobytes(), expected.tobytes())
        _bytes_view(result)[:] = np.frombuffer(self.store.request(target, message), np.uint8)

    def read_rows(
        self, buf: np.ndarray, target: int, disp: int, row: int, displacements: Sequence[int]
    ) -> None:
        """``buf`` gets the rows of ``row`` elements at ``displacements`` (elements)."""
        message = ("get_rows", self.segment, disp, buf.dtype.str, row, list(displacements))
        _bytes_view(buf)[:] = np.frombuffer(self.store.request(target, message), np.uint8)

    def update_rows(
        self,
        buf: np.ndarray,
        target: int,
        disp: int,
        row: int,
        displacements: Sequence[int],
        op: Any,
    ) -> None:
        """Combine ``buf`` into the rows at ``displacements`` with ``op``; done on return."""
        message = (
            "acc_rows",
            self.segment,
            disp,
            buf.dtype.str,
            row,
            list(displacements),
            _op_name(op),
            buf.tobytes(),
        )
        self.store.request(target, message)


class _Windows:
    """``store.windows[segment]`` of a `RemoteStore`: a `RemoteWindow` per segment."""

    def __init__(self, store: RemoteStore) -> None:
        self._store = store
        self._made: dict[int, RemoteWindow] = {}

    def __getitem__(self, segment: int) -> RemoteWindow:
        win = self._made.get(segment)
        if win is None:
            win = self._made[segment] = RemoteWindow(self._store, segment)
        return win


class RemoteStore:
    """A worker's segments in a fault-tolerant job: requests to the ps over ``channel``.

    Args:
        channel: The intercommunicator channel to the server job.
        ps_ranks: Ranks of the ps in the server job, by ps index.
        who: This worker, for messages (``"worker 1"``).
    """

    def __init__(self, channel: Channel, ps_ranks: list[int], who: str) -> None:
        self.channel, self.ps_ranks, self.who = channel, list(ps_ranks), who
        self.windows = _Windows(self)
        self._waiter = Waiter(yield_s=0.05)

    def request(self, ps_rank: int, message: tuple[Any, ...]) -> bytes:
        """Send ``message`` to ``ps_rank`` and wait for its answer (bytes).

        Raises:
            RuntimeError: The ps could not apply the request (names the ps and the request).
        """
        self.channel.send(message, ps_rank, TAG_PS_VARIABLE)
        self._waiter.restart()
        got = self.channel.wait_message(ps_rank, TAG_PS_VARIABLE_REPLY, self._waiter)
        assert got is not None  # no deadline: the wait ends with the reply
        reply = got[1]
        if isinstance(reply, tuple):
            raise RuntimeError(
                f"{self.who}: ps rank {ps_rank} could not apply {message[0]!r} on segment "
                f"{message[1]}: {reply[1]}"
            )
        return reply

    def create_segment(self, sizes: list[int]) -> int:
        """Workers of a fault-tolerant job take no part in creating segments.

        Raises:
            RuntimeError: Always (the coordinator never sends a worker this command).
        """
        raise RuntimeError(f"{self.who}: a fault-tolerant worker has no RMA segments")

    def free(self) -> None:
        """Nothing to free: the memory is the server job's."""


class VariableServer:
    """A ps rank's side: apply the workers' requests to this rank's windows, answer them.

    Args:
        store: This ps rank's `RmaStore` (over the server job).
        rank: This rank in the server job (the target of its own operations).
    """

    def __init__(self, store: Any, rank: int) -> None:
        self.store, self.rank = store, rank
        self.workers: dict[int, Channel] = {}  # worker index -> its channel
        self._posted: list[tuple[int, Posted]] = []  # replies not yet delivered

    def admit(self, index: int, channel: Channel) -> None:
        """Serve worker ``index`` on ``channel`` from now on."""
        self.workers[index] = channel

    def forget(self, index: int) -> None:
        """Worker ``index`` died: abandon its channel and its undelivered replies."""
        channel = self.workers.pop(index, None)
        if channel is not None:
            channel.abandon()
        self._posted = [(i, p) for i, p in self._posted if i != index]

    def service(self) -> bool:
        """Answer every request waiting from a worker; whether there was one."""
        if self._posted:
            self._posted = [(i, p) for i, p in self._posted if not p.done()]
        worked = False
        for index, channel in list(self.workers.items()):
            while (got := channel.poll(0, TAG_PS_VARIABLE)) is not None:
                worked = True
                try:
                    reply: Any = self._apply(got[1])
                except Exception as exc:  # the worker's function raises it
                    reply = ("error", f"{type(exc).__name__}: {exc}")
                self._posted.append((index, channel.post(reply, 0, TAG_PS_VARIABLE_REPLY)))
        return worked

    def close(self) -> None:
        """Release the live workers' channels (the job ends)."""
        for channel in self.workers.values():
            channel.free()
        self.workers = {}
        self._posted = []

    def _apply(self, message: tuple[Any, ...]) -> bytes:
        kind, segment, disp = message[:3]
        win = self.store.windows[segment]
        me = self.rank
        if kind == "get":
            out = np.empty(message[3], np.uint8)
            if out.size:
                win.read(out, me, (disp, out.size, rma.datatype(np.uint8)))
            return out.tobytes()
        dtype = np.dtype(message[3])
        if kind == "acc":
            data = np.frombuffer(message[5], dtype)
            if data.size:
                win.update(data, me, (disp, data.size, rma.datatype(dtype)), _OPS[message[4]])
            return b""
        if kind == "fop":
            value, result = np.frombuffer(message[5], dtype), np.empty(1, dtype)
            win.fetch_and_op(value, result, me, disp, _OPS[message[4]])
            return result.tobytes()
        if kind == "cas":
            new, expected = np.frombuffer(message[4], dtype), np.frombuffer(message[5], dtype)
            result = np.empty(1, dtype)
            win.compare_and_swap(new, expected, result, me, disp)
            return result.tobytes()
        row, displacements = message[4], message[5]
        base = rma.datatype(dtype)
        with rma.indexed_rows(base, row, displacements) as rows:
            if kind == "get_rows":
                out = np.empty(len(displacements) * row, dtype)
                win.read(out, me, (disp, 1, rows))
                return out.tobytes()
            if kind == "acc_rows":
                data = np.frombuffer(message[7], dtype)
                win.update(data, me, (disp, 1, rows), _OPS[message[6]])
                return b""
        raise ValueError(f"expected a variable request, got kind {kind!r}")
