"""Admitting workers to a fault-tolerant parameter-server job, and noticing when one dies.

Under ``hpcdist run --ps P --workers W`` each worker is its own MPI job. The coordinator
listens on one TCP socket (`AdmissionServer`), bound to the job's address only (loopback on one
machine), and writes ``host port`` into the launch's address file. A worker
(`request_admission`) connects and proves that it holds the job's secret; only then is it
told the MPI port to connect to, and both sides call ``Accept``/``Connect``. The socket then
stays open for the worker's life: its end of file is how the coordinator learns, within
milliseconds, that the worker's process is gone.

The handshake is fixed-size binary, nothing on it is ever unpickled:

1. server -> peer: `MAGIC` and a random 32-byte nonce ``ns``;
2. peer -> server: the worker index (4 bytes, big-endian), a random nonce ``nc`` and
   ``HMAC-SHA256(secret, b"worker" + ns + nc + index)``;
3. the server compares the MAC (`hmac.compare_digest`) and checks the index (in range, not
   already joined): a peer that fails is closed without a byte more, and nothing changes;
4. when the coordinator is ready to accept it: server -> worker ``b"G"``,
   ``HMAC-SHA256(secret, b"server" + nc + ns)`` (the worker checks that it talks to its own
   job) and the MPI port name (2-byte length, then the name); the worker answers ``b"C"``
   and calls ``Connect``; only after that byte does the server job call ``Accept``.

`AdmissionServer.events` hands the coordinator ``("join", index)`` and ``("dead", index)``; a
thread of its own watches the sockets (it makes no MPI call).

The ps ranks of the server job take the same path (`watch_coordinator`, with the indices after
the workers': ps ``j`` is ``num_workers + j``), without the MPI part: their socket exists only
so that its end of file tells the coordinator, within milliseconds, that a ps process is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import queue
import secrets
import selectors
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hpcdist.errors import UnavailableError
from hpcdist.logger import get_logger
from hpcdist.utils.files import write_private_text

__all__ = ["MAGIC", "AdmissionServer", "Admitted", "request_admission", "watch_coordinator"]

#: The first bytes the server sends: protocol and version.
MAGIC = b"HPCDPS1\n"
_NONCE = 32
_MAC = 32
_HELLO = 4 + _NONCE + _MAC  # what a peer sends: index, its nonce, its MAC
#: Seconds a peer has to complete its part of the handshake.
HANDSHAKE_SECONDS = 5.0
#: Handshakes that may run at once; more connections are closed at once.
MAX_HANDSHAKES = 16
#: TCP keepalive of an admitted peer's socket: idle seconds before probing, seconds between
#: probes, unanswered probes before the peer counts as lost (its host gone, about 4 s).
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES = 1, 1, 3
#: The sockets of `watch_coordinator`, open until the process ends.
_HELD: list[socket.socket] = []


def _mac(secret: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, b"".join(parts), hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"expected {n} bytes, the peer closed after {len(data)}")
        data += chunk
    return data


class Admitted:
    """A worker that proved the secret and waits to be accepted (the coordinator's side).

    Args:
        index: The worker's index.
        sock: Its socket.
        nonces: ``(server nonce, worker nonce)`` of its handshake.
    """

    def __init__(self, index: int, sock: socket.socket, nonces: tuple[bytes, bytes]) -> None:
        self.index, self.sock, self._nonces = index, sock, nonces

    def alive(self) -> bool:
        """Whether the worker's end of the socket is still open (no end of file yet)."""
        try:
            self.sock.setblocking(False)
            try:
                return self.sock.recv(1, socket.MSG_PEEK) != b""
            except BlockingIOError:
                return True
            finally:
                self.sock.setblocking(True)
        except OSError:
            return False

    def go(self, secret: bytes, port: str) -> bool:
        """Tell the worker to connect to MPI ``port``; whether it says it is calling ``Connect``.

        The worker answers ``b"C"`` just before its ``Connect``: only then may the server job
        call ``Accept``, which would wait for ever for a worker that died before connecting.
        """
        ns, nc = self._nonces
        name = port.encode()
        try:
            self.sock.sendall(b"G" + _mac(secret, b"server", nc, ns) + struct.pack(">H", len(name)))
            self.sock.sendall(name)
            self.sock.settimeout(HANDSHAKE_SECONDS)
            answer = self.sock.recv(1)
            self.sock.settimeout(None)
        except OSError:
            return False
        return answer == b"C"


class AdmissionServer:
    """The coordinator's admission socket and the thread watching every worker's socket.

    Args:
        secret: The job's secret.
        bind: The address to bind to (an address of the job's hosts); empty: the address of
            this host's name, for workers on other hosts (Slurm job steps).
        num_workers: Worker indices run from 0 to this, excluded.
        address_file: Where ``host port`` is written (atomically, 0600) for the workers.
        num_ps: ps ranks that watch the coordinator: indices ``num_workers`` to
            ``num_workers + num_ps``, excluded.
        on_ps_death: Called in this object's thread with the index of a ps whose socket
            ended, before the event is queued (it must make no MPI call).
    """

    def __init__(
        self,
        secret: bytes,
        bind: str,
        num_workers: int,
        address_file: str,
        num_ps: int = 0,
        on_ps_death: Callable[[int], None] | None = None,
    ) -> None:
        self.secret, self.num_workers, self.num_ps = secret, num_workers, num_ps
        self._on_ps_death = on_ps_death
        if not bind:  # workers on other hosts: the address this host's name resolves to
            bind = socket.gethostbyname(socket.gethostname())
        self._listener = socket.create_server((bind, 0))
        host, port = self._listener.getsockname()[:2]
        self.address = (host, port)
        write_private_text(address_file, f"{host} {port}\n")
        self._events: queue.SimpleQueue[tuple[str, int, Admitted | None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._claimed: set[int] = set()  # indices admitted and not dead (with _lock)
        self._handshakes = 0
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._watch: queue.SimpleQueue[Admitted] = queue.SimpleQueue()
        self.rejected = 0  # peers closed without admission (for tests and messages)
        self.last_death_at: float | None = None  # monotonic time the last end of file was seen
        self.on_event: Callable[[], None] | None = None  # called after each event is queued
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="hpcdist-admission", daemon=True)
        self._thread.start()

    # -- the coordinator's side ---------------------------------------------------------------

    def events(self) -> list[tuple[str, int, Admitted | None]]:
        """``("join", index, admitted)`` and ``("dead", index, None)`` since the last call."""
        out = []
        while True:
            try:
                out.append(self._events.get_nowait())
            except queue.Empty:
                return out

    def pending(self) -> bool:
        """Whether events wait for the next `events` call."""
        return not self._events.empty()

    def wait_event(self, timeout: float) -> tuple[str, int, Admitted | None] | None:
        """The next event, waiting up to ``timeout`` seconds; None if none came."""
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return None

    def watch(self, admitted: Admitted) -> None:
        """Report ``("dead", index)`` when ``admitted``'s socket ends (after its ``Accept``)."""
        self._watch.put(admitted)
        with contextlib.suppress(OSError):
            self._wake_w.send(b"w")

    def release(self, index: int) -> None:
        """``index`` is free again (its worker died before it was accepted)."""
        with self._lock:
            self._claimed.discard(index)

    def close(self) -> None:
        """Stop listening and watching (the job ends)."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(timeout=2)
        self._listener.close()

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        sel = self._selector
        sel.register(self._listener, selectors.EVENT_READ, "listen")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        while not self._closed:
            for key, _ in sel.select(timeout=1.0):
                if key.data == "listen":
                    self._new_peer()
                elif key.data == "wake":
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                    while True:
                        try:
                            admitted = self._watch.get_nowait()
                        except queue.Empty:
                            break
                        sel.register(admitted.sock, selectors.EVENT_READ, admitted)
                else:
                    self._readable(key.data)

    def _event(self, event: tuple[str, int, Admitted | None]) -> None:
        self._events.put(event)
        on_event = self.on_event
        if on_event is not None:
            on_event()  # e.g. wake the coordinator's idle dispatcher

    def _readable(self, admitted: Admitted) -> None:
        try:
            data = admitted.sock.recv(4096)  # a worker never sends after its hello
        except OSError:
            data = b""
        if data:
            return
        self.last_death_at = time.monotonic()
        self._selector.unregister(admitted.sock)
        admitted.sock.close()
        with self._lock:
            self._claimed.discard(admitted.index)
        if admitted.index >= self.num_workers and self._on_ps_death is not None:
            self._on_ps_death(admitted.index)  # at once, whatever the dispatch loop does
        self._event(("dead", admitted.index, None))

    def _new_peer(self) -> None:
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return
        with self._lock:
            busy = self._handshakes >= MAX_HANDSHAKES
            if not busy:
                self._handshakes += 1
        if busy:
            with self._lock:
                self.rejected += 1
            sock.close()
            get_logger().warning(
                "admission: a peer was refused: %d handshakes already running", MAX_HANDSHAKES
            )
            return
        threading.Thread(target=self._handshake, args=(sock,), daemon=True).start()

    def _handshake(self, sock: socket.socket) -> None:
        """Admit ``sock``'s peer if it proves the secret; else close it (nothing changes)."""
        admitted, why = None, ""
        try:
            sock.settimeout(HANDSHAKE_SECONDS)
            ns = secrets.token_bytes(_NONCE)
            sock.sendall(MAGIC + ns)
            hello = _recv_exact(sock, _HELLO)
            index_bytes, nc, mac = hello[:4], hello[4 : 4 + _NONCE], hello[4 + _NONCE :]
            if not hmac.compare_digest(mac, _mac(self.secret, b"worker", ns, nc, index_bytes)):
                why = "it did not prove the job's secret"
                return
            index = struct.unpack(">I", index_bytes)[0]
            with self._lock:
                if index >= self.num_workers + self.num_ps:
                    why = f"expected an index below {self.num_workers + self.num_ps}, got {index}"
                elif index in self._claimed:
                    why = f"index {index} is held by a peer whose socket is still open"
                else:
                    self._claimed.add(index)
            if why:
                return
            sock.settimeout(None)
            _keep_alive(sock)
            admitted = Admitted(index, sock, (ns, nc))
            self._event(("join", index, admitted))
        except (OSError, ConnectionError) as exc:
            why = f"its handshake failed ({HANDSHAKE_SECONDS:g} s allowed): {exc!r}"
            return
        finally:
            with self._lock:
                self._handshakes -= 1
                if admitted is None:
                    self.rejected += 1
            if admitted is None:
                with contextlib.suppress(OSError):
                    sock.close()
                get_logger().warning("admission: a peer was refused: %s", why)


def _keep_alive(sock: socket.socket) -> None:
    """Probe an idle peer every second: a lost host (no end of file ever comes) is an error.

    A process that dies closes its socket at once; a host that is lost (power, network) sends
    nothing, so TCP keepalive probes it after `KEEPALIVE_IDLE_S` of silence, every
    `KEEPALIVE_INTERVAL_S`, and after `KEEPALIVE_PROBES` unanswered probes the socket fails
    (about 4 s). A stopped process's kernel still answers: hangs are left to the deadlines.
    """
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE_S),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
        ("TCP_KEEPCNT", KEEPALIVE_PROBES),
    ):
        if hasattr(socket, name):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def request_admission(
    address_file: str, secret: bytes, index: int, timeout: float = 600.0
) -> tuple[socket.socket, str]:
    """The worker's side: prove the secret to the coordinator; ``(socket, MPI port name)``.

    Keep the socket open for the life of the process: its end tells the coordinator that
    this worker is gone.

    Raises:
        UnavailableError: No coordinator address within ``timeout`` seconds, or the peer is
            not this job's coordinator, or it closed the connection.
    """
    deadline = time.monotonic() + timeout
    path = Path(address_file)
    while True:
        try:
            host, port = path.read_text().split()
            sock = socket.create_connection((host, int(port)), timeout=HANDSHAKE_SECONDS)
            break
        except (OSError, ValueError) as exc:
            if time.monotonic() > deadline:
                raise UnavailableError(
                    f"worker {index}: no coordinator to connect to within {timeout:g} s "
                    f"(address file {address_file}: {exc})"
                ) from None
            time.sleep(0.05)
    try:
        head = _recv_exact(sock, len(MAGIC) + _NONCE)
        if head[: len(MAGIC)] != MAGIC:
            raise ConnectionError(f"expected {MAGIC!r} from the coordinator, got {head[:8]!r}")
        ns, nc = head[len(MAGIC) :], secrets.token_bytes(_NONCE)
        index_bytes = struct.pack(">I", index)
        sock.sendall(index_bytes + nc + _mac(secret, b"worker", ns, nc, index_bytes))
        sock.settimeout(None)  # the coordinator accepts when it is ready
        go = _recv_exact(sock, 1 + _MAC + 2)
        if go[:1] != b"G" or not hmac.compare_digest(go[1:-2], _mac(secret, b"server", nc, ns)):
            raise ConnectionError("the coordinator did not prove the job's secret")
        name = _recv_exact(sock, struct.unpack(">H", go[-2:])[0]).decode()
        sock.sendall(b"C")  # connecting now: the server job may call Accept
    except (OSError, ConnectionError) as exc:
        sock.close()
        raise UnavailableError(
            f"worker {index}: admission to the coordinator at {address_file} failed: {exc} "
            "(another worker with this index may be running)"
        ) from None
    return sock, name


def watch_coordinator(
    address_file: str, secret: bytes, num_workers: int, ps_index: int
) -> threading.Thread:
    """A ps rank's side: hold a socket to the coordinator whose end tells it this ps died.

    Runs in a daemon thread (it makes no MPI call) that proves the secret as index
    ``num_workers + ps_index``, waits for the coordinator's answer, and then keeps the socket
    open until the process ends. A failed admission is logged and leaves the ps unwatched.
    """

    def hold() -> None:
        try:
            sock, _ = request_admission(address_file, secret, num_workers + ps_index)
        except UnavailableError as exc:
            sys.stderr.write(f"hpcdist: ps {ps_index} is not watched by the coordinator: {exc}\n")
            return
        _HELD.append(sock)  # open for the process's life

    thread = threading.Thread(target=hold, name=f"hpcdist-ps-{ps_index}-watch", daemon=True)
    thread.start()
    return thread
