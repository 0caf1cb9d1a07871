"""Which workers belong to a fault-tolerant parameter-server job, now: joins and deaths.

Under ``hpcdist run --ps P --workers W`` (``HPCDIST_PS_LAUNCH``) the coordinator and the ps
ranks are one MPI job (the **server job**) and each worker is an MPI job of its own, so that a
worker can die without taking the others with it. A worker has the rank it would have in a
single job (``1 + P + index``) in the coordinator's bookkeeping, and its own channel (an
intercommunicator) instead of a rank of the job's communicator.

* `FaultTolerantCoordinatorRuntime` (the coordinator): opens an MPI port and the admission
  socket (`hpcdist.strategies.ps.admission`); a worker that proved the job's secret is
  accepted when the dispatch loop next asks (`membership_changes`): the ps ranks are told
  ``("admit", index)``, the worker is told the port, and the server job calls ``Accept``
  together while the worker calls ``Connect``. Commands to a worker are posted without
  waiting; results are polled from every present worker's channel. A worker whose socket
  ends is **dead**: its channel is abandoned (never waited on, freed, or used in a
  collective), and the ps ranks are told ``("forget", index)``. A replacement that proves the
  secret with the same index joins the same way.
* `FaultTolerantServingRuntime` (a ps rank): serves the coordinator's commands as in one job,
  plus ``admit`` and ``forget``, and answers the workers' variable requests between two polls
  (`hpcdist.strategies.ps.remote_store.VariableServer`).

A worker runs the ordinary `hpcdist.strategies.ps.serving.ServingRuntime` over its channel,
with a `hpcdist.strategies.ps.remote_store.RemoteStore` for the variables.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpcdist.abort import abort_job
from hpcdist.cluster.launched import PSLaunch
from hpcdist.comm import creation
from hpcdist.comm.p2p import (
    Channel,
    Posted,
    close_port,
    open_port,
    release_accept,
)
from hpcdist.errors import DeadlineExceededError, UnavailableError
from hpcdist.logger import get_logger
from hpcdist.settings import get_settings
from hpcdist.strategies.ps.admission import AdmissionServer, Admitted
from hpcdist.strategies.ps.control import CoordinatorRuntime
from hpcdist.strategies.ps.ps_failure import PS_FAILURE_EXIT_CODE, PsFailure
from hpcdist.strategies.ps.remote_store import VariableServer
from hpcdist.strategies.ps.roles import Roles
from hpcdist.strategies.ps.runtime import TAG_CANCEL, TAG_COMMAND, TAG_RESULT, Segments
from hpcdist.strategies.ps.serving import ServingRuntime
from hpcdist.utils.waiting import Waiter

__all__ = [
    "GUARD_SECONDS",
    "SERVE_YIELD_SECONDS",
    "FaultTolerantCoordinatorRuntime",
    "FaultTolerantServingRuntime",
    "launch_roles",
    "worker_rank",
]


#: After answering a worker, a ps rank polls, yielding the processor, this long before it
#: sleeps between polls.
SERVE_YIELD_SECONDS = 0.005
#: How often a worker's socket is looked at while the server job accepts it.
GUARD_SECONDS = 0.005


def launch_roles(launch: PSLaunch) -> Roles:
    """The roles of a fault-tolerant job: coordinator 0, ps ``1..P``, workers after them."""
    p, w = launch.num_ps, launch.num_workers
    return Roles(0, list(range(1, p + 1)), list(range(p + 1, p + 1 + w)), 1 + p + w)


def worker_rank(launch: PSLaunch, index: int) -> int:
    """The rank worker ``index`` has in the coordinator's bookkeeping."""
    return 1 + launch.num_ps + index


class FaultTolerantCoordinatorRuntime(CoordinatorRuntime):
    """The coordinator of a fault-tolerant job: workers join and die (see the module).

    Args:
        strategy: The strategy.
        channel: The control channel over the server job (coordinator and ps ranks).
        roles: `launch_roles` of the launch.
        store: The server job's RMA segments.
        allocator: Where variables go in the segments.
        launch: The launch file's contents.
    """

    fault_tolerant = True

    def __init__(
        self,
        strategy: Any,
        channel: Channel,
        roles: Roles,
        store: Segments,
        allocator: Any,
        launch: PSLaunch,
    ) -> None:
        super().__init__(strategy, channel, roles, store, allocator)
        self.launch = launch
        self.secret = bytes.fromhex(launch.secret)
        self.port = open_port()
        self.failure = PsFailure(Path(launch.address_file).parent)
        self.failed_ps = 0  # the rank given to the last `ps_failure` (with `fatal`)
        self.admission = AdmissionServer(
            self.secret,
            launch.bind,
            launch.num_workers,
            launch.address_file,
            launch.num_ps,
            on_ps_death=self._ps_socket_ended,
        )
        self._kill_requests: set[Path] = set()  # hung workers the launcher is asked to kill
        self.watched_ps: set[int] = set()  # ps ranks whose socket the admission thread watches
        self.workers: dict[int, Channel] = {}  # present worker rank -> its channel
        self._posted: dict[int, list[Posted]] = {}  # worker rank -> undelivered messages
        self.joins = self.deaths = 0
        self.notice_seconds: list[float] = []  # death noticed -> handled (for measurements)

    # -- messages -----------------------------------------------------------------------------

    def command(self, message: tuple[Any, ...]) -> None:
        """Send a command to every ps rank (and ``stop`` to every present worker too)."""
        with self.send_lock:
            for rank in self.roles.ps:
                self.channel.send(message, rank, TAG_COMMAND)
            if message[0] == "stop":
                for rank in list(self.workers):
                    self._post(rank, message, TAG_COMMAND)

    def send_command(self, rank: int, message: tuple[Any, ...]) -> None:
        """Send a command to one rank (posted, for a worker: it may be dead)."""
        with self.send_lock:
            if rank in self.workers:
                self._post(rank, message, TAG_COMMAND)
            elif rank in self.roles.ps:
                self.channel.send(message, rank, TAG_COMMAND)
            else:
                raise UnavailableError(
                    f"a command for worker {rank - 1 - self.launch.num_ps} (rank {rank}): "
                    "expected a connected worker or a ps rank, got a worker that is not "
                    f"connected (connected: ranks {sorted(self.workers)})"
                )

    def cancel(self, worker: int) -> None:
        """Tell ``worker`` to give back the items of its batch after the one it runs."""
        with self.send_lock:
            if worker in self.workers:
                self._post(worker, None, TAG_CANCEL)

    def poll_result(self) -> tuple[int, bytes] | None:
        """``(worker rank, pickled reply)`` from any present worker, or None (after a ps died)."""
        if self.fatal is not None:
            return None
        for rank, channel in self.workers.items():
            got = channel.poll(0, TAG_RESULT)
            if got is not None:
                return rank, got[1]
        return None

    def _post(self, rank: int, message: Any, tag: int) -> None:
        posted = self._posted.setdefault(rank, [])
        posted[:] = [p for p in posted if not p.done()]
        posted.append(self.workers[rank].post(message, 0, tag))

    # -- membership ---------------------------------------------------------------------------

    def present_workers(self) -> list[int]:
        """The worker ranks connected now."""
        return list(self.workers)

    def on_membership_change(self, wake: Callable[[], None]) -> None:
        """Call ``wake()`` (from the admission thread) whenever a worker or ps joins or dies."""
        self.admission.on_event = wake

    def membership_pending(self) -> bool:
        """Whether joins or deaths wait for `membership_changes` (none once the job failed)."""
        return self.fatal is None and self.admission.pending()

    def membership_changes(self) -> list[tuple[str, int]]:
        """Admit the workers that proved the secret, drop the dead; what changed, in order.

        Returns ``("joined", rank)`` and ``("dead", rank)``; called by the dispatch loop.
        """
        changes: list[tuple[str, int]] = []
        for kind, index, admitted in self.admission.events():
            if self.fatal is not None:
                break  # the job is over: nothing joins any more
            if index >= self.launch.num_workers:
                changes += self._ps_event(kind, index - self.launch.num_workers, admitted)
                continue
            rank = worker_rank(self.launch, index)
            if kind == "join":
                assert admitted is not None
                if rank in self.workers:  # its old self died, not noticed yet: first that
                    self._drop(rank)
                    changes.append(("dead", rank))
                if self._accept(admitted):
                    changes.append(("joined", rank))
                elif self.fatal is not None:  # a ps missed the admission's deadline
                    changes.append(("ps_dead", self.failed_ps))
            elif rank in self.workers:
                self._drop(rank)
                changes.append(("dead", rank))
        return changes

    def wait_for_workers(self, timeout: float) -> None:
        """Admit every worker of the launch (the constructor's start; ``timeout`` seconds).

        Raises:
            UnavailableError: Some workers did not join in time (names them).
        """
        deadline = time.monotonic() + timeout
        while len(self.workers) < self.launch.num_workers or len(self.watched_ps) < len(
            self.roles.ps
        ):
            if self.fatal is not None:
                raise self.fatal
            left = deadline - time.monotonic()
            event = self.admission.wait_event(max(left, 0.0)) if left > 0 else None
            if event is None:
                missing = [
                    i
                    for i in range(self.launch.num_workers)
                    if worker_rank(self.launch, i) not in self.workers
                ]
                unwatched = [r - 1 for r in self.roles.ps if r not in self.watched_ps]
                raise UnavailableError(
                    f"the coordinator expected {self.launch.num_workers} worker(s) and "
                    f"{len(self.roles.ps)} ps to join within {timeout:g} s, got "
                    f"{len(self.workers)} and {len(self.watched_ps)}; missing worker(s) "
                    f"{missing}, ps {unwatched}"
                )
            kind, index, admitted = event
            if index >= self.launch.num_workers:
                self._ps_event(kind, index - self.launch.num_workers, admitted)
            elif kind == "join":
                assert admitted is not None
                self._accept(admitted)
            else:
                self._drop(worker_rank(self.launch, index))

    def _ps_event(self, kind: str, ps: int, admitted: Admitted | None) -> list[tuple[str, int]]:
        """The ps of index ``ps`` asks to be watched (``join``) or its process ended (``dead``).

        A dead ps ends the job (as in TF): `fatal` is set, and `ps_failure` does the rest.
        """
        rank = self.roles.ps[ps]
        if kind == "join":
            assert admitted is not None
            if admitted.go(self.secret, ""):
                self.admission.watch(admitted)
                self.watched_ps.add(rank)
            return []
        self.watched_ps.discard(rank)
        self.ps_failure(ps, rank)
        return [("ps_dead", rank)]

    def _accept(self, admitted: Admitted) -> bool:
        index, rank = admitted.index, worker_rank(self.launch, admitted.index)
        if rank in self.workers:  # its old self died unnoticed so far: the new one replaces it
            self._drop(rank)
        if not admitted.alive():  # gone before Accept: Accept would wait for ever
            self.admission.release(index)
            return False
        start = time.monotonic()
        if not admitted.go(self.secret, self.port):  # it died before connecting
            admitted.sock.close()
            self.admission.release(index)
            return False
        with self.send_lock:
            for ps in self.roles.ps:
                self.channel.send(("admit", index), ps, TAG_COMMAND)
        try:  # a ps that never comes (stopped, hung) would hold the collective Accept for ever
            creation.arrive_in_time(self.channel.comm, f"admitting worker {index}")
        except DeadlineExceededError as exc:
            missing = [r for r in exc.missing_ranks if r in self.roles.ps] or self.roles.ps
            get_logger().error("%s", exc)
            self.ps_failure(self.roles.ps.index(missing[0]), missing[0], hung=True)
            return False
        guard = _AcceptGuard(admitted, self.port)
        channel = Channel.accept(self.port, self.channel, root=0)
        if guard.stop():  # it died after its "C": the channel is the releaser's (or a corpse's)
            channel.abandon()
            with self.send_lock:
                for ps in self.roles.ps:
                    self.channel.send(("forget", index), ps, TAG_COMMAND)
            admitted.sock.close()
            self.admission.release(index)
            get_logger().warning(
                "worker %d (rank %d) died between its admission and its MPI Connect; the "
                "server job's Accept was released",
                index,
                rank,
            )
            return False
        self.workers[rank] = channel
        self.admission.watch(admitted)
        self.joins += 1
        get_logger().info(
            "worker %d (rank %d) joined in %.3f s", index, rank, time.monotonic() - start
        )
        return True

    def _drop(self, rank: int) -> None:
        index = rank - 1 - self.launch.num_ps
        channel = self.workers.pop(rank, None)
        self._posted.pop(rank, None)
        self._kill_requests.discard(Path(self.launch.address_file).parent / f"kill-worker-{index}")
        if channel is None:
            return
        channel.abandon()
        with self.send_lock:
            for ps in self.roles.ps:
                self.channel.send(("forget", index), ps, TAG_COMMAND)
        self.deaths += 1
        get_logger().warning("worker %d (rank %d) died; its functions run again", index, rank)

    def hung(self, worker: int) -> bool:
        """``worker`` is past its deadline (stopped, hung): ask the launcher to kill its job.

        The launcher (`hpcdist.cli.ps_launch`) SIGKILLs that worker job when it finds the
        request file ``kill-worker-<index>`` in the launch directory, and restarts it within
        ``--worker-restarts``; its socket's end then counts as the worker's death, which puts
        its functions back on the queue (at-least-once). Without the launcher's directory (a
        test harness), the worker is treated as in one job.
        """
        if worker not in self.workers:
            return False
        index = worker - 1 - self.launch.num_ps
        request = Path(self.launch.address_file).parent / f"kill-worker-{index}"
        if request in self._kill_requests:
            return True
        try:
            fd = os.open(request, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError:
            return False
        os.close(fd)
        self._kill_requests.add(request)
        get_logger().warning(
            "worker %d (rank %d) missed its deadline (stopped or hung): the launcher kills and "
            "restarts it; its functions run again",
            index,
            worker,
        )
        return True

    # -- a ps that dies ------------------------------------------------------------------------

    def ps_failure(self, ps: int, rank: int, hung: bool = False) -> None:
        """Ps ``ps`` died (or ``hung`` past the deadline): set `fatal`; end the job in time.

        MPI cannot survive the dead rank inside the server job: nothing may wait on it any
        more (`poll_result` and `membership_changes` stop; `shutdown` aborts the job). A
        program that never reaches its next ``schedule``/``join``/``done`` is aborted by the
        timer of `hpcdist.strategies.ps.ps_failure` (armed here or, earlier, by the admission
        thread: `_ps_socket_ended`).
        """
        self.fatal, self.failed_ps = self.failure.arm(ps, rank, hung), rank
        get_logger().error("%s", self.fatal)

    def _ps_socket_ended(self, index: int) -> None:
        """The admission thread saw ps ``index - W``'s socket end: arm the abort at once."""
        ps = index - self.launch.num_workers
        self.failure.arm(ps, self.roles.ps[ps])

    def shutdown(self) -> None:
        """End the job; after a ps died, abort the server job (MPI cannot end it in order)."""
        died = self.failure.ending()  # the ps ranks are told to stop: no death from now on
        if self.fatal is not None or died is not None:  # a ps died, seen by either thread
            abort_job(f"hpcdist: the job ends: {self.fatal or died}", PS_FAILURE_EXIT_CODE)
        super().shutdown()

    # -- end of the job -----------------------------------------------------------------------

    def close(self) -> None:
        """Free the server job's windows and channels, release the workers, stop listening."""
        super().close()
        for channel in self.workers.values():
            channel.free()
        self.workers = {}
        self.admission.close()
        close_port(self.port)


class _AcceptGuard:
    """While the server job is in ``Accept`` for ``admitted``, release it if the worker dies.

    ``MPI_Comm_accept`` has no timeout, and a worker can die between its ``C`` byte and its
    ``Connect``. A thread (no MPI call) looks at the worker's socket every `GUARD_SECONDS`; at
    its end of file it starts `hpcdist.comm.p2p.release_accept`, whose process connects
    instead, so that ``Accept`` returns.
    """

    def __init__(self, admitted: Admitted, port: str) -> None:
        self.admitted, self.port = admitted, port
        self.fired = False
        self._child: subprocess.Popen | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="hpcdist-accept", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(GUARD_SECONDS):
            if not self.admitted.alive():
                self.fired = True
                self._child = release_accept(self.port)
                return

    def stop(self) -> bool:
        """``Accept`` returned: whether the worker died meanwhile (its channel is no worker)."""
        self._done.set()
        self._thread.join()
        if self._child is not None:
            try:
                self._child.wait(timeout=10)
            except subprocess.TimeoutExpired:  # the worker had connected: nobody accepts it
                self._child.kill()
                self._child.wait()
        return self.fired or not self.admitted.alive()


class FaultTolerantServingRuntime(ServingRuntime):
    """A ps rank of a fault-tolerant job: commands, plus the workers' variable requests.

    Args:
        strategy: The strategy.
        channel: The control channel over the server job.
        roles: `launch_roles` of the launch.
        store: This rank's RMA segments (over the server job).
    """

    def __init__(self, strategy: Any, channel: Channel, roles: Roles, store: Any) -> None:
        super().__init__(strategy, channel, roles, store)
        self.variables_server = VariableServer(store, channel.rank)

    def service(self) -> bool:
        """Answer the workers' variable requests."""
        return self.variables_server.service()

    def command_waiter(self) -> Waiter:
        """Wait as in one job, but yield (not sleep) for `SERVE_YIELD_SECONDS` after a request.

        A worker's variable access waits for this rank's answer: sleeping between polls
        would add up to a millisecond to every read and update.
        """
        return Waiter(yield_s=SERVE_YIELD_SECONDS)

    def on_command(self, message: tuple[Any, ...]) -> None:
        """``("admit", index)``: accept worker ``index``; ``("forget", index)``: it died.

        Raises:
            RuntimeError: Any other command.
        """
        kind = message[0]
        if kind == "admit":
            # with the coordinator, which bounds this wait (a ps past it ends the job)
            settings = get_settings()
            what = f"admitting worker {message[1]}"
            creation.arrive(self.channel.comm, what, None, settings.stall_warning_seconds)
            channel = Channel.accept("", self.channel, root=self.roles.coordinator)
            self.variables_server.admit(message[1], channel)
        elif kind == "forget":
            self.variables_server.forget(message[1])
        else:
            super().on_command(message)

    def close(self) -> None:
        """Release the workers' channels, then this rank's windows and channels."""
        self.variables_server.close()
        super().close()
