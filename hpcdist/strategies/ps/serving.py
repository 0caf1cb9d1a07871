"""The ps and worker ranks' side of the parameter-server runtime: the serve loop and batches.

A ps or worker rank answers the coordinator's commands (`ServingRuntime.serve`) until
``("stop",)``: it creates segments, and a worker runs batches of scheduled functions, keeping
each function it was sent (by key) and the per-worker resources (datasets, iterators) between
batches. A function whose pickle cannot be loaded on this worker fails with an error naming the
function and the worker; a later run of its key (without the pickle, as the coordinator's record
says the worker holds it) fails with the same cause instead of blaming that record.
"""

from __future__ import annotations

import contextlib
import pickle
import pickletools
import signal
import threading
import time
import traceback
from typing import Any

import cloudpickle
import numpy as np

from hpcdist import timeline
from hpcdist.comm.p2p import Channel, threads_supported
from hpcdist.core.autodiff import Tensor
from hpcdist.core.variables import Variable
from hpcdist.data.nest import map_structure
from hpcdist.errors import OutOfRangeError
from hpcdist.logger import get_logger
from hpcdist.strategies.ps.roles import Roles
from hpcdist.strategies.ps.runtime import (
    SPIN_SECONDS,
    TAG_CANCEL,
    TAG_COMMAND,
    TAG_RESULT,
    WATCH_SECONDS,
    Runtime,
    Segments,
)
from hpcdist.strategies.values import DistributedValues
from hpcdist.utils.waiting import Waiter

__all__ = ["ServingRuntime", "pickled_name"]

_PLAIN = (int, float, bool, str, bytes, type(None), np.ndarray, np.generic)  # sent as they are


class ServingRuntime(Runtime):
    """A ps or worker rank's runtime: the serve loop, scheduled functions and their caches.

    Args:
        strategy: The strategy scheduled functions run under, and the one unpickled ones get.
        channel: The control channel over every rank of the job.
        roles: Who is who in ``channel``.
        store: This rank's RMA segments.
    """

    def __init__(
        self,
        strategy: Any,
        channel: Channel,
        roles: Roles,
        store: Segments,
        rank: int | None = None,
    ) -> None:
        super().__init__(strategy, channel, roles, store, rank)
        self.functions: dict[int, Any] = {}  # function key -> function (bounded)
        #: Keys whose pickle failed to load here -> why (reported when the key runs).
        self.unloadable: dict[int, str] = {}
        self.resources: dict[int, Any] = {}  # per-worker datasets and iterators
        self._results, self._back, self._end, self._running = None, 0, 0, 0  # with _reply_lock
        self._item_start, self._reply_lock = 0.0, threading.Lock()
        self._watchdog: threading.Thread | bool | None = None  # False: not allowed (thread level)

    # -- the serve loop -----------------------------------------------------------------------

    def serve(self) -> None:
        """Run the coordinator's commands on this ps or worker rank until it stops the job.

        Returns after ``("stop",)``, once this rank's windows and channels are freed (then
        `ParameterServerStrategy` ends the process). SIGUSR2 (Slurm's preemption warning) is
        ignored on the main thread: the coordinator handles it (checkpoint, then stop every
        rank). Waiting for a command polls the channel (which keeps MPI's progress of other
        ranks' RMA going): the next command often follows within microseconds, so the wait
        probes back to back for `SPIN_SECONDS`, then sleeps longer and longer (an eighth of the
        time waited), up to 1 ms, between probes.

        Raises:
            RuntimeError: This runtime is already closed.
        """
        if self.closed:
            raise RuntimeError(f"serve() on rank {self.rank}: the job already ended")
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        source, channel = self.roles.coordinator, self.channel
        # No deadline (the coordinator decides); polls back to back for SPIN_SECONDS, then sleeps.
        waiter = self.command_waiter()

        def poll() -> tuple[int, Any] | None:
            if self.service():  # other traffic this rank serves (fault-tolerant ps: workers)
                waiter.restart()
            return channel.poll(source, TAG_COMMAND)

        while True:
            waiter.restart()
            got = waiter.wait_value(poll)
            assert got is not None  # a waiter without a deadline waits until a message comes
            message = got[1]
            kind = message[0]
            if kind == "segment":
                self.store.create_segment(message[1])
            elif kind == "batch":
                self.run_batch(message[1])
            elif kind == "run":
                self.run_batch([(*message[1:], ())[:4]], single=True)
            elif kind == "stop":
                channel.drain(source, TAG_CANCEL)  # came after its batch ended
                break
            else:
                self.on_command(message)
        self.close()

    def command_waiter(self) -> Waiter:
        """How the serve loop waits for a command (no deadline).

        It polls back to back for `SPIN_SECONDS`, then sleeps longer and longer, up to 1 ms.
        """
        return Waiter(yield_s=SPIN_SECONDS, yield_cpu=False)

    def service(self) -> bool:
        """Serve traffic other than commands between two polls; whether there was some.

        Nothing here; a fault-tolerant job's ps rank answers the workers' variable requests
        (`hpcdist.strategies.ps.membership`).
        """
        return False

    def on_command(self, message: tuple[Any, ...]) -> None:
        """A command other than ``segment``, ``batch``, ``run`` and ``stop``.

        Raises:
            RuntimeError: Always here (a subclass serves more commands).
        """
        raise RuntimeError(
            f"{self._who()}: expected a command segment, batch, run or stop, got {message[0]!r}"
        )

    # -- batches ------------------------------------------------------------------------------

    def run_batch(self, items: list[tuple[Any, ...]], single: bool = False) -> None:
        """Run a ``batch`` (``single``: a ``run``) in order and send the results (see above)."""
        if len(items) > 1 and self._watchdog is None:
            self._watchdog = self._start_watchdog()
        coordinator, looked = self.roles.coordinator, time.perf_counter()
        self._results, self._end, self._back = [], len(items), 0
        with self.strategy.scope():
            for i, (key, blob, args_blob, forget) in enumerate(items):
                with self._reply_lock:  # the watchdog may have given back the items from here
                    if i >= self._end:
                        break
                    self._running, self._item_start = i, time.perf_counter()
                result = self._run_one(key, blob, args_blob)
                self._forget(forget)
                with self._reply_lock:
                    self._results.append(result)
                    self._item_start = 0.0
                    if time.perf_counter() - looked > WATCH_SECONDS:
                        looked = time.perf_counter()
                        if self.channel.poll(coordinator, TAG_CANCEL) is not None:
                            self._back, self._end = self._back + self._end - i - 1, i + 1
        for key, blob, _, forget in items[self._end :]:  # given back: hold what the record says
            if blob is not None:
                with contextlib.suppress(Exception):  # recorded in `unloadable`, reported later
                    self._load(key, blob)
            self._forget(forget)
        with self._reply_lock:
            self._send_results(single)
            self._results = None

    def _forget(self, keys: Any) -> None:
        for old in keys:
            self.functions.pop(old, None)
            self.unloadable.pop(old, None)

    def _send_results(self, single: bool = False) -> None:
        reply = self._results[0][:3] if single else (self._results, self._back)
        self.channel.send(_dumps_results(reply), self.roles.coordinator, TAG_RESULT)
        self._results, self._back = [], 0

    def _start_watchdog(self) -> threading.Thread | bool:
        """The thread of `_watch`, or False where MPI does not allow a second calling thread.

        The watchdog sends on the control channel while the user's function runs (and may do
        RMA) on this thread: only ``MPI_THREAD_MULTIPLE`` allows that (`threads_supported`).
        Below it, no item is given back early: a batch behind a long item waits for it.
        """
        if not threads_supported():
            get_logger().warning(
                "%s: MPI runs below MPI_THREAD_MULTIPLE (MPI.Query_thread()), so the functions "
                "of a batch behind one that runs long are not given back to other workers",
                self._who(),
            )
            return False
        thread = threading.Thread(target=self._watch, name="hpcdist-batch-watch", daemon=True)
        thread.start()
        return thread

    def _watch(self) -> None:
        """Thread: an item runs past `WATCH_SECONDS`: send results so far, give back the rest."""
        while not self.closed:
            time.sleep(WATCH_SECONDS)
            with self._reply_lock:
                late = self._item_start and time.perf_counter() - self._item_start > WATCH_SECONDS
                if self._results is not None and late:
                    self._back += self._end - self._running - 1
                    self._end = self._running + 1
                    if self._results or self._back:
                        self._send_results()

    def _load(self, key: int, blob: bytes) -> Any:
        """Unpickle function ``key``; keep it (or, when that fails, why) under its key.

        Raises:
            RuntimeError: The pickle cannot be loaded here; names the function and the worker.
        """
        try:
            fn = cloudpickle.loads(blob)
        except Exception as exc:
            self.functions.pop(key, None)
            name = pickled_name(blob)
            what = f"scheduled function {name} (#{key})" if name else f"scheduled function #{key}"
            reason = self.unloadable[key] = (
                f"{self._who()} could not unpickle {what}: {type(exc).__name__}: {exc} (is "
                "everything it refers to importable on the workers?)"
            )
            raise RuntimeError(reason) from exc
        self.unloadable.pop(key, None)
        self.functions[key] = fn
        return fn

    def _run_one(self, key: int, blob: bytes | None, args_blob: bytes | None) -> tuple:
        """``(kind, value or exception, traceback or None, seconds)`` of one function."""
        start = time.perf_counter()
        try:
            if blob is not None:
                self._load(key, blob)
                start = time.perf_counter()  # the seconds of the call, not of loading it
            fn = self.functions.get(key)
            if fn is None and key in self.unloadable:
                raise RuntimeError(self.unloadable[key])
            if fn is None:
                raise RuntimeError(
                    f"{self._who()} was asked to run function #{key} without its pickle and "
                    f"holds no such key (only {len(self.functions)} others): the coordinator's "
                    "record of this worker's functions is wrong"
                )
            args, kwargs = ((), {}) if args_blob is None else pickle.loads(args_blob)
            try:
                if not timeline.active():
                    value = fn(*args, **kwargs)
                else:
                    name = getattr(fn, "__qualname__", type(fn).__name__)
                    with timeline.span("ps", f"run {name}"):
                        value = fn(*args, **kwargs)
            except StopIteration:
                raise OutOfRangeError(
                    f"{self._who()}: an iterator read in the scheduled function is exhausted "
                    "(end of its dataset)"
                ) from None
            except SystemExit as exc:  # leaving would strand the coordinator: report it
                raise RuntimeError(
                    f"a scheduled function called sys.exit({exc.code!r}) on {self._who()}; "
                    "workers keep serving"
                ) from None
            return ("ok", _to_host(value), None, time.perf_counter() - start)
        except Exception as exc:  # sent to the coordinator, raised there (if it unpickles)
            tb, seconds = traceback.format_exc(), time.perf_counter() - start
            with contextlib.suppress(Exception):
                pickle.loads(cloudpickle.dumps(exc))
                return ("error", exc, tb, seconds)
            return ("error", RuntimeError(f"{type(exc).__name__}: {exc}"), tb, seconds)

    def _who(self) -> str:
        if self.rank in self.roles.workers:
            return f"worker {self.roles.workers.index(self.rank)} (rank {self.rank})"
        return f"rank {self.rank}"


def pickled_name(blob: bytes) -> str | None:
    """The name of the function in a (cloud)pickle, read without loading it; None if unknown.

    A function pickled by value carries its ``__qualname__``; one pickled by reference is the
    global ``module.name`` it names.
    """
    strings: list[str] = []
    memo: list[Any] = []
    globals_: list[str] = []
    memo_value: Any = None  # what the next MEMOIZE stores (a string, or something else)
    try:
        for op, arg, _ in pickletools.genops(blob):
            if "UNICODE" in op.name or op.name in ("STRING", "BINSTRING", "SHORT_BINSTRING"):
                strings.append(str(arg))
                memo_value = str(arg)
            elif op.name in ("BINGET", "LONG_BINGET", "GET") and isinstance(arg, int):
                memo_value = memo[arg] if arg < len(memo) else None
                if isinstance(memo_value, str):
                    strings.append(memo_value)
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                globals_.append(f"{strings[-2]}.{strings[-1]}")
                memo_value = None
            elif op.name == "MEMOIZE":
                memo.append(memo_value)
            else:
                memo_value = None
    except Exception:
        return None
    if "__qualname__" in strings[:-1]:
        return strings[strings.index("__qualname__") + 1]
    skip = ("cloudpickle.", "builtins.", "functools.", "copyreg.", "_codecs.")
    named = [g for g in globals_ if not g.startswith(skip)]
    return named[0] if named else None


def _to_host(value: Any) -> Any:
    """Plain numpy values of a function's result (tensors and variables read)."""
    if isinstance(value, _PLAIN):
        return value

    def leaf(v: Any) -> Any:
        if isinstance(v, Tensor):
            return v.value
        if isinstance(v, Variable):
            return v.read_value()
        if isinstance(v, DistributedValues):
            return leaf(v.values[0]) if len(v.values) == 1 else tuple(map(leaf, v.values))
        return v

    return map_structure(leaf, value)


def _dumps(message: Any) -> bytes:
    """``pickle`` (fast, C) for plain results; cloudpickle for what only it can send."""
    with contextlib.suppress(Exception):
        return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return cloudpickle.dumps(message)


def _dumps_results(reply: Any) -> bytes:
    """The pickled reply; a result that cannot be sent becomes its item's error."""
    with contextlib.suppress(Exception):
        return _dumps(reply)
    results = reply[0] if isinstance(reply[0], list) else [reply]
    for i, item in enumerate(results):
        try:
            _dumps(item)
        except Exception as exc:
            error = RuntimeError(f"the result of a scheduled function cannot be sent: {exc}")
            results[i] = ("error", error, traceback.format_exc(), *item[3:])
    return _dumps(reply if isinstance(reply[0], list) else results[0])
