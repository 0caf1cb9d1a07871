"""Raw point-to-point traffic: the tag registry and `Channel`, a private communicator's messages.

The collectives of `hpcdist.comm.Communicator` go through the envelope (sequence numbers, header
checks). Traffic that is not collective (the parameter server's commands and results, the TF1
cluster's end-of-job messages) goes through a `Channel`: a duplicate of a communicator that no
other code sends on, with pickled messages under **tags reserved here**, and waits that poll
``Iprobe`` through `hpcdist.utils.waiting.Waiter` (a deadline, a stall warning, a back-off that
costs no CPU in a long wait) instead of blocking in MPI.

Tags: every tag the library sends on is reserved once, by `reserve_tag`, so that two layers
cannot pick the same number: the constants below are the whole list (`tags` returns it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from mpi4py import MPI

from hpcdist.comm import creation
from hpcdist.comm.counters import COUNTING, add_pickled
from hpcdist.errors import DeadlineExceededError
from hpcdist.settings import get_settings
from hpcdist.utils.waiting import Waiter

__all__ = [
    "ANY_SOURCE",
    "TAG_CREATE_ARRIVED",
    "TAG_PS_CANCEL",
    "TAG_PS_COMMAND",
    "TAG_PS_RESULT",
    "TAG_PS_VARIABLE",
    "TAG_PS_VARIABLE_REPLY",
    "TAG_TF1_LEAVE",
    "Channel",
    "Posted",
    "close_port",
    "open_port",
    "release_accept",
    "reserve_tag",
    "tags",
    "threads_supported",
]

#: Receive from any rank (`Channel.poll`, `Channel.wait_message`).
ANY_SOURCE: int = MPI.ANY_SOURCE

#: Receives of messages whose sender died before their end came (`Channel.abandon`): held, not
#: freed, as MPI may still write into their buffers.
_ABANDONED: list[MPI.Request] = []
_TAGS: dict[int, str] = {}
_TAGS_LOCK = threading.Lock()


def reserve_tag(name: str, tag: int) -> int:
    """Reserve ``tag`` for the messages called ``name``; returns ``tag``.

    Reserving the same tag again under the same name is allowed (a module imported twice).

    Raises:
        ValueError: ``tag`` is negative, above MPI's guaranteed ``32767``, or reserved already
            under another name.
    """
    if not 0 <= tag <= 32767:
        raise ValueError(f"tag {name!r}: expected 0 <= tag <= 32767, got {tag}")
    with _TAGS_LOCK:
        owner = _TAGS.setdefault(tag, name)
    if owner != name:
        raise ValueError(f"tag {tag} is reserved for {owner!r}; {name!r} needs another number")
    return tag


def tags() -> dict[int, str]:
    """Every reserved tag and the messages it carries."""
    with _TAGS_LOCK:
        return dict(_TAGS)


#: Parameter server: coordinator -> ps/worker commands (``("batch", items)``, ``("stop",)``...).
TAG_PS_COMMAND = reserve_tag("ps command", 71)
#: Parameter server: a worker's results, worker -> coordinator.
TAG_PS_RESULT = reserve_tag("ps result", 72)
#: Parameter server: give back the rest of a batch, coordinator -> worker.
TAG_PS_CANCEL = reserve_tag("ps cancel", 73)
#: Parameter server, fault-tolerant launch: a worker's variable read or update, worker -> ps.
TAG_PS_VARIABLE = reserve_tag("ps variable request", 74)
#: Parameter server, fault-tolerant launch: the answer to a variable request, ps -> worker.
TAG_PS_VARIABLE_REPLY = reserve_tag("ps variable reply", 75)
#: TF1 cluster: a task is done with the ps memory, task -> ps.
TAG_TF1_LEAVE = reserve_tag("tf1 leave", 91)
#: Creating a communicator: "this rank has arrived", to every rank, only when one is late
#: (`hpcdist.comm.creation`, on the parent communicator).
TAG_CREATE_ARRIVED = reserve_tag("communicator creation arrival", creation.TAG_ARRIVED)


def threads_supported() -> bool:
    """Whether MPI was started with ``MPI_THREAD_MULTIPLE`` (every thread may call it)."""
    return MPI.Query_thread() >= MPI.THREAD_MULTIPLE


def open_port() -> str:
    """Open an MPI port (``MPI_Open_port``) that other MPI jobs can connect to; its name."""
    return MPI.Open_port()


def close_port(port: str) -> None:
    """Close a port of `open_port`."""
    MPI.Close_port(port)


#: The program of `release_accept`'s process: connect to the port read from stdin, then exit.
_RELEASE_PROGRAM = (
    "import sys\n"
    "from mpi4py import MPI\n"
    "MPI.COMM_WORLD.Connect(sys.stdin.readline().strip(), root=0)\n"
)


def release_accept(port: str) -> subprocess.Popen:
    """Make a pending ``Accept`` on ``port`` return: a new process connects to it.

    ``MPI_Comm_accept`` has no timeout: when the peer it waits for dies before its
    ``Connect``, it would wait for ever. This starts a one-process MPI job of its own (an
    MPICH singleton, without the caller's launcher variables) that connects and exits; the
    accepting side gets a channel to it, which it must abandon (`Channel.abandon`). The port
    name travels on the child's stdin, never on a command line. Kill the returned process
    if the ``Accept`` returned for another peer.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "HYDI_", "MPIR_", "MPI_LOCALNRANKS"))
    }
    child = subprocess.Popen(
        [sys.executable, "-c", _RELEASE_PROGRAM],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    assert child.stdin is not None
    child.stdin.write(f"{port}\n".encode())
    child.stdin.close()
    return child


class Posted:
    """A message posted without waiting (`Channel.post`): ``done()`` says whether it left.

    A message to a process that died may never complete; its owner then drops it unread
    (`Channel.abandon`), never waits on it.
    """

    __slots__ = ("_request",)

    def __init__(self, request: MPI.Request) -> None:
        self._request = request

    def done(self) -> bool:
        """Whether the message was delivered to MPI's care (its buffer may be reused)."""
        return bool(self._request.Test())


class Channel:
    """Pickled point-to-point messages on a private duplicate of a communicator.

    Construction duplicates ``comm`` (collective over it, bounded by
    ``HPCDIST_TIMEOUT_SECONDS``: `hpcdist.comm.creation.dup` names the ranks that never join);
    `free` releases the duplicate (collective, once; later calls do nothing). Sends and
    receives are those of mpi4py's lowercase methods (pickled objects); a message for one tag
    from one rank arrives in order. `poll` never blocks, even on a message whose sender dies
    halfway through sending it (its start is matched, its end never comes): the message is
    received without blocking (``improbe`` + ``irecv``), and one not complete yet stays pending
    in the channel until a later `poll` finds it complete; `abandon` drops it with the channel.

    Args:
        comm: The communicator to duplicate; by default ``MPI.COMM_WORLD``.
        adopt: Use ``comm`` itself, not a duplicate (a new intercommunicator of `accept` or
            `connect`, which no other code holds).

    Raises:
        DeadlineExceededError: Some ranks did not join the duplication within the deadline.
    """

    def __init__(self, comm: MPI.Comm | None = None, *, adopt: bool = False) -> None:
        if adopt and comm is not None:  # a communicator nobody else uses (`accept`, `connect`)
            self._comm: MPI.Comm = comm
        else:
            settings = get_settings()
            self._comm = creation.dup(
                MPI.COMM_WORLD if comm is None else comm,
                "creating a point-to-point channel",
                settings.timeout_seconds,
                settings.stall_warning_seconds,
            )
        self.rank: int = self._comm.Get_rank()
        self.size: int = self._comm.Get_size()
        #: ``(source, tag)`` polled -> ``(sender, receive)`` of a matched message not complete.
        self._receiving: dict[tuple[int, int], tuple[int, MPI.Request]] = {}

    @classmethod
    def accept(cls, port: str, over: Channel, root: int = 0) -> Channel:
        """Collective over ``over``: accept the one job that connects to ``port`` (at ``root``).

        Returns:
            A channel on the intercommunicator: destinations and sources are the ranks of the
            other job, `rank` and `size` those of this side.
        """
        return cls(over.comm.Accept(port, root=root), adopt=True)

    @classmethod
    def connect(cls, port: str) -> Channel:
        """Connect this (one-process) job to the job accepting on ``port``; see `accept`."""
        return cls(MPI.COMM_WORLD.Connect(port, root=0), adopt=True)

    @property
    def remote_size(self) -> int:
        """Number of ranks on the other side of an intercommunicator channel (else `size`)."""
        return self._comm.Get_remote_size() if self._comm.Is_inter() else self.size

    @property
    def comm(self) -> MPI.Intracomm:
        """The private communicator (for `hpcdist.comm.rma` windows over the same ranks)."""
        return self._comm

    @property
    def closed(self) -> bool:
        """Whether `free` ran."""
        return self._comm == MPI.COMM_NULL

    def dup(self) -> Channel:
        """A new channel over the same ranks (collective): traffic that must not mix."""
        return Channel(self._comm)

    # -- setup-time collectives ----------------------------------------------------------------

    def allgather(self, obj: Any) -> list[Any]:
        """Collective: every rank's ``obj``, by rank (setup exchanges, before roles are known)."""
        return self._comm.allgather(obj)

    def barrier(self) -> None:
        """Collective: return once every rank has entered."""
        self._comm.Barrier()

    # -- messages ------------------------------------------------------------------------------

    def send(self, obj: Any, dest: int, tag: int, timeout: float | None = None) -> None:
        """Send ``obj`` (pickled) to rank ``dest``.

        Without ``timeout`` the send is MPI's standard blocking one (small messages return at
        once); with one, it is posted and polled through a `Waiter`.

        Raises:
            DeadlineExceededError: ``dest`` did not take the message within ``timeout``.
        """
        if COUNTING:
            add_pickled("p2p.send", obj)
        if timeout is None:
            self._comm.send(obj, dest=dest, tag=tag)
            return
        request = self._comm.isend(obj, dest=dest, tag=tag)
        waiter = Waiter(timeout, on_timeout=self._late("send a message to", dest, tag, timeout))
        waiter.wait(request.Test)

    def post(self, obj: Any, dest: int, tag: int) -> Posted:
        """Send ``obj`` (pickled) to ``dest`` without waiting for it to leave (``isend``)."""
        if COUNTING:
            add_pickled("p2p.send", obj)
        return Posted(self._comm.isend(obj, dest=dest, tag=tag))

    def poll(self, source: int, tag: int) -> tuple[int, Any] | None:
        """``(source rank, message)`` of a message arrived from ``source`` with ``tag``, or None.

        Never blocks: a message whose start has arrived but not its end (a large one on its
        way, or one whose sender died while sending it) is received in the background, and
        None is returned until it is complete; messages from that ``source`` with that ``tag``
        behind it wait for it (they arrive in order).
        """
        key = (source, tag)
        pending = self._receiving.pop(key, None)
        if pending is None:
            status = MPI.Status()
            message = self._comm.improbe(source=source, tag=tag, status=status)
            if message is None:
                return None
            pending = (status.Get_source(), message.irecv())
        done, obj = pending[1].test()
        if not done:
            self._receiving[key] = pending
            return None
        return pending[0], obj

    def drain(self, source: int, tag: int) -> int:
        """Receive and drop every message already arrived from ``source`` with ``tag``; count."""
        count = 0
        while self.poll(source, tag) is not None:
            count += 1
        return count

    def wait_message(self, source: int, tag: int, waiter: Waiter) -> tuple[int, Any] | None:
        """Poll for a message from ``source`` with ``tag`` through ``waiter``; receive it.

        Returns:
            ``(source rank, message)``; None when ``waiter``'s timeout passed and it has no
            error to raise.
        """
        return waiter.wait_value(lambda: self.poll(source, tag))

    def recv(self, source: int, tag: int, timeout: float | None = None) -> Any:
        """Receive a message from ``source`` with ``tag``, polling under a deadline.

        Raises:
            DeadlineExceededError: No message arrived within ``timeout`` seconds.
        """
        waiter = Waiter(
            timeout, on_timeout=self._late("receive a message from", source, tag, timeout)
        )
        got = self.wait_message(source, tag, waiter)
        assert got is not None  # the waiter raises at its deadline
        return got[1]

    def free(self) -> None:
        """Collective: release the private communicator (once)."""
        comm, self._comm = self._comm, MPI.COMM_NULL
        self._receiving = {}
        if comm != MPI.COMM_NULL:
            comm.Free()

    def abandon(self) -> None:
        """Stop using a channel whose peer died: nothing waits on, frees or probes it again.

        Freeing it would take part in a collective with a dead process; its handle is left
        to MPI (one per dead peer) and every later use of this object raises. So is a
        message of the dead peer's that `poll` was still receiving: a receive of a matched
        message cannot be cancelled, and its end will never come.
        """
        self._comm = MPI.COMM_NULL
        _ABANDONED.extend(request for _, request in self._receiving.values())
        self._receiving = {}

    def _late(
        self, what: str, peer: int, tag: int, timeout: float | None
    ) -> Callable[[float], BaseException]:
        name = tags().get(tag, f"tag {tag}")
        who = "any rank" if peer == ANY_SOURCE else f"rank {peer}"

        def error(elapsed: float) -> BaseException:
            return DeadlineExceededError(
                f"rank {self.rank} of {self.size}: could not {what} {who} ({name}) within "
                f"{timeout:g} s (waited {elapsed:.1f} s): is that rank stopped or stuck?",
                () if peer == ANY_SOURCE else (peer,),
            )

        return error
