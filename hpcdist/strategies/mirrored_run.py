"""Running a function on several local replicas, one at a time, with ``merge_call``.

Each local replica runs in its own thread, but only one thread runs at any moment: the
caller hands a baton to replica 0, which runs until it finishes or calls ``merge_call``, then
to replica 1, and so on. When every replica waits in ``merge_call``, the caller runs the merge
function once in cross-replica context (with the replicas' arguments grouped into
`PerReplica` values) and hands each replica its part of the result. Replicas therefore run in
order, deterministically, and nothing can deadlock on the interpreter lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hpcdist.core import context
from hpcdist.strategies.replica_context import ReplicaContext
from hpcdist.strategies.values import DistributedValues, PerReplica
from hpcdist.utils.xp import device_scope

if TYPE_CHECKING:
    from hpcdist.strategies.strategy import Strategy

__all__ = ["run_local_replicas"]


class _Abort(BaseException):
    """Unwinds a replica thread whose sibling failed."""


class _ReplicaThread(threading.Thread):
    def __init__(
        self,
        strategy: Strategy,
        replica_id: int,
        fn: Callable[..., Any],
        args,
        kwargs,
        device: str = "cpu:0",
    ):
        super().__init__(name=f"hpcdist-replica-{replica_id}", daemon=True)
        self.strategy, self.replica_id, self.device = strategy, replica_id, device
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.go, self.paused = threading.Event(), threading.Event()
        self.merge_request: tuple[Callable[..., Any], tuple, dict] | None = None
        self.merge_result: Any = None
        self.merge_error: BaseException | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.finished = False

    def run(self) -> None:
        self.go.wait()
        self.go.clear()
        context.push(self.strategy, _ThreadReplicaContext(self.strategy, self.replica_id, self))
        try:
            # A GPU replica computes on its own device (CUDA's current device is per thread).
            with device_scope(self.device):
                self.result = self.fn(*self.args, **self.kwargs)
        except _Abort:
            pass
        except BaseException as exc:
            self.error = exc
        finally:
            context.pop()
            self.finished = True
            self.paused.set()

    def step(self) -> None:
        """Let this replica run until it finishes or calls merge_call."""
        self.paused.clear()
        self.go.set()
        self.paused.wait()


class _ThreadReplicaContext(ReplicaContext):
    def __init__(self, strategy: Strategy, replica_id: int, thread: _ReplicaThread) -> None:
        super().__init__(strategy, replica_id)
        self._thread = thread

    def merge_call(self, merge_fn, args=(), kwargs=None):
        """Wait until every local replica reaches ``merge_call``; run ``merge_fn`` once."""
        t = self._thread
        t.merge_request = (merge_fn, tuple(args), dict(kwargs or {}))
        t.paused.set()  # hand the baton back; the caller runs the merge
        t.go.wait()
        t.go.clear()
        if t.merge_error is not None:
            raise t.merge_error
        return t.merge_result


def group_replica_values(values: list[Any]) -> Any:
    """The replicas' values of one leaf, regrouped as TF does.

    The object itself when every replica has the same one, else a `PerReplica`.
    """
    first = values[0]
    if all(v is first for v in values):
        return first
    return PerReplica(values)


def run_local_replicas(
    strategy: Strategy, fn: Callable[..., Any], per_replica_args: list[tuple[tuple, dict]]
) -> list[Any]:
    """Run ``fn`` once per local replica (see the module docstring); return their results.

    Raises:
        The first replica's error, after every replica has been unwound.
        RuntimeError: Some replicas finished while others wait in ``merge_call``.
    """
    first_id = strategy.extended.local_replica_ids[0]
    threads = [
        _ReplicaThread(strategy, first_id + i, fn, a, k, strategy.extended.worker_devices[i])
        for i, (a, k) in enumerate(per_replica_args)
    ]
    for t in threads:
        t.start()
    try:
        while True:
            for t in threads:
                if not t.finished:
                    t.step()
            failed = next((t.error for t in threads if t.error is not None), None)
            if failed is not None:
                raise failed
            finished = [t.finished for t in threads]
            if all(finished):
                return [t.result for t in threads]
            if any(finished):
                raise RuntimeError(
                    "local replicas diverged: some returned while others called merge_call "
                    f"(finished: {finished})"
                )
            _merge(strategy, threads)
    finally:
        for t in threads:
            while not t.finished:
                t.merge_error = _Abort()
                t.step()
            t.join()


def _merge(strategy: Strategy, threads: list[_ReplicaThread]) -> None:
    fns = {t.merge_request[0] for t in threads}
    if len({getattr(f, "__code__", f) for f in fns}) != 1:
        raise RuntimeError("local replicas called merge_call with different functions")
    merge_fn = threads[0].merge_request[0]
    nargs = {len(t.merge_request[1]) for t in threads}
    if len(nargs) != 1:
        raise RuntimeError("local replicas called merge_call with different argument counts")
    args = tuple(
        group_replica_values([t.merge_request[1][i] for t in threads]) for i in range(nargs.pop())
    )
    keys = threads[0].merge_request[2].keys()
    kwargs = {k: group_replica_values([t.merge_request[2][k] for t in threads]) for k in keys}
    context.push(strategy, None)
    try:
        result = merge_fn(strategy, *args, **kwargs)
        error = None
    except Exception as exc:
        result, error = None, exc
    finally:
        context.pop()
    for i, t in enumerate(threads):
        t.merge_error = error
        t.merge_result = result.values[i] if isinstance(result, DistributedValues) else result
