"""The parameter-server runtime in one process: `serve` driven over ``MPI.COMM_SELF``.

Rank 0 of ``COMM_SELF`` plays every role: a thread runs `serve` (the ps/worker loop) while the
test, as the coordinator, sends it commands and reads its replies on the same communicator.
"""

from __future__ import annotations

import ast
import gc
import pickle
import sys
import threading
import time
import types
from pathlib import Path

import cloudpickle
import numpy as np
import pytest
from mpi4py import MPI

import hpcdist as hd
from hpcdist.comm.p2p import Channel
from hpcdist.errors import ClusterConfigError
from hpcdist.settings import get_settings
from hpcdist.strategies.ps import functions
from hpcdist.strategies.ps.functions import FunctionCache, WorkerFunctions
from hpcdist.strategies.ps.roles import Roles
from hpcdist.strategies.ps.runtime import (
    TAG_COMMAND,
    TAG_RESULT,
    coordinator_only,
    creating_dataset,
    is_creating_dataset,
    serve,
)
from hpcdist.strategies.ps.serving import ServingRuntime, pickled_name
from hpcdist.strategies.ps.store import RmaStorage, RmaStore

_served: list[ServingRuntime] = []  # the runtime a scheduled function of this module runs against


def _update_variable(value: list[float], add: bool) -> np.ndarray:
    """A scheduled function: set (or add into) a float32[3] at offset 0 of segment 0."""
    storage = RmaStorage(_served[0].store, 0, 0, 0, (3,), np.float32, "v")
    if add:
        storage.add(np.asarray(value, np.float32))
    else:
        storage.write(np.asarray(value, np.float32))
    return storage.read()


def _fail(message: str) -> None:
    raise ValueError(message)


def _self_runtime() -> ServingRuntime:
    """Rank 0 of ``COMM_SELF`` as a worker (and ps); the test plays the coordinator."""
    roles = Roles(coordinator=0, ps=[0], workers=[0], size=1)
    channel = Channel(MPI.COMM_SELF)
    return ServingRuntime(hd.get_strategy(), channel, roles, RmaStore(channel.dup(), roles.ps))


def _command(rt, message):
    """Send ``message`` to the serving runtime as the coordinator would."""
    rt.channel.send(message, 0, TAG_COMMAND)


def _reply(rt: ServingRuntime) -> tuple[str, object, str | None]:
    return pickle.loads(rt.channel.recv(0, TAG_RESULT, timeout=60))


def test_serve_runs_scheduled_functions_and_returns_on_stop():
    rt = _self_runtime()
    _served[:] = [rt]
    server = threading.Thread(target=serve, args=(rt,), name="ps-serve", daemon=True)
    server.start()
    try:
        _command(rt, ("segment", [64]))
        blob = cloudpickle.dumps(_update_variable)
        _command(rt, ("run", 0, blob, cloudpickle.dumps((([1, 2, 3], False), {}))))
        kind, value, _ = _reply(rt)
        assert kind == "ok", value
        np.testing.assert_array_equal(value, np.float32([1, 2, 3]))

        # The function is sent once; later runs name it by its key.
        _command(rt, ("run", 0, None, cloudpickle.dumps((([10, 10, 10], True), {}))))
        kind, value, _ = _reply(rt)
        assert kind == "ok", value
        np.testing.assert_array_equal(value, np.float32([11, 12, 13]))

        _command(rt, ("run", 1, cloudpickle.dumps(_fail), cloudpickle.dumps((("no",), {}))))
        kind, error, remote_tb = _reply(rt)
        assert kind == "error"
        assert isinstance(error, ValueError) and str(error) == "no"
        assert "_fail" in remote_tb
    finally:
        _command(rt, ("stop",))
        server.join(timeout=30)
        _served.clear()
    assert not server.is_alive(), "serve() did not return after ('stop',)"
    assert rt.closed
    assert rt.store.windows == []
    with pytest.raises(RuntimeError, match="already ended"):
        serve(rt)


def test_scheduled_function_exit_is_reported_not_obeyed():
    rt = _self_runtime()
    server = threading.Thread(target=serve, args=(rt,), name="ps-serve", daemon=True)
    server.start()
    _command(rt, ("run", 0, cloudpickle.dumps(sys.exit), cloudpickle.dumps(((3,), {}))))
    try:
        kind, error, _ = _reply(rt)
    finally:
        _command(rt, ("stop",))
        server.join(timeout=30)
    assert not server.is_alive()
    assert kind == "error"
    assert "sys.exit(3)" in str(error) and "worker 0" in str(error)


def test_worker_forgets_functions_and_refuses_a_key_it_does_not_hold():
    rt = _self_runtime()
    server = threading.Thread(target=serve, args=(rt,), name="ps-serve", daemon=True)
    server.start()
    args = cloudpickle.dumps((("first",), {}))
    try:
        # Runs, then forgets key 0 as told: the next run of key 0 without its pickle fails.
        _command(rt, ("run", 0, cloudpickle.dumps(str.upper), args, (0,)))
        first = _reply(rt)
        _command(rt, ("run", 0, None, args, ()))
        second = _reply(rt)
        held = len(rt.functions)
    finally:
        _command(rt, ("stop",))
        server.join(timeout=30)
    assert first[:2] == ("ok", "FIRST")
    assert second[0] == "error"
    assert "function #0 without its pickle" in str(second[1])
    assert "worker 0 (rank 0)" in str(second[1])
    assert held == 0


def _constant(value: object):
    """A new function object returning ``value``."""
    return lambda: value


class _Unweakrefable:
    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value

    def __call__(self) -> int:
        return self.value


def test_function_cache_drops_a_function_once_it_is_gone():
    cache = FunctionCache()
    fn = _constant(1)
    entry = cache.entry(fn)
    assert cache.entry(fn) is entry  # pickled once while it lives
    assert cloudpickle.loads(entry.blob)() == 1
    del fn
    gc.collect()
    assert not entry.alive
    assert cache.drain_dead() == [entry.key]
    assert len(cache) == 0
    # A new function (maybe at the same address) never gets the old key.
    other = cache.entry(_constant(2))
    assert other.key != entry.key
    assert cache.drain_dead() == [other.key]  # that one died at once too


def test_function_cache_bounds_callables_without_weak_references(monkeypatch):
    monkeypatch.setattr(functions, "STRONG_FUNCTIONS", 2)
    cache = FunctionCache()
    kept = [_Unweakrefable(i) for i in range(3)]
    entries = [cache.entry(f) for f in kept]
    assert not entries[0].alive and entries[1].alive and entries[2].alive
    assert cache.drain_dead() == [entries[0].key]
    again = cache.entry(kept[0])  # pickled again, under a new key
    assert again.key not in {e.key for e in entries}
    assert cloudpickle.loads(again.blob)() == 0


def test_worker_record_sends_each_pickle_once_and_evicts_least_recently_used(monkeypatch):
    monkeypatch.setattr(functions, "WORKER_CACHE_FUNCTIONS", 2)
    cache = FunctionCache()
    fns = [_constant(k) for k in range(3)]
    a, b, c = (cache.entry(f) for f in fns)
    held = WorkerFunctions()
    assert held.message(a) == (a.blob, ())
    assert held.message(a) == (None, ())
    assert held.message(b) == (b.blob, ())
    assert held.message(a) == (None, ())  # a is now the most recently used
    assert held.message(c) == (c.blob, (b.key,))  # b evicted: the worker forgets it
    assert held.message(b) == (b.blob, (a.key,))  # b re-sent with its pickle
    assert b.key in held and c.key in held and a.key not in held
    del fns
    gc.collect()
    for key in cache.drain_dead():
        held.drop(key)
    assert len(held) == 0
    blob, forget = held.message(a)  # a is gone: sent once more, forgotten after its run
    assert blob == a.blob and sorted(forget) == sorted((a.key, b.key, c.key))


def test_worker_record_bounds_pickled_bytes(monkeypatch):
    monkeypatch.setattr(functions, "WORKER_CACHE_BYTES", 150_000)
    cache = FunctionCache()
    fns = [_constant(bytes(100_000)) for _ in range(3)]
    entries = [cache.entry(f) for f in fns]
    held = WorkerFunctions()
    forgotten = [held.message(e)[1] for e in entries]
    assert forgotten == [(), (entries[0].key,), (entries[1].key,)]
    assert len(held) == 1


def test_no_runtime_means_not_a_coordinator():
    assert coordinator_only() is False


def test_creating_dataset_marks_this_thread_only():
    assert not is_creating_dataset()
    seen: list[bool] = []
    with creating_dataset():
        assert is_creating_dataset()
        with creating_dataset():
            assert is_creating_dataset()
        assert is_creating_dataset()
        other = threading.Thread(target=lambda: seen.append(is_creating_dataset()))
        other.start()
        other.join()
    assert not is_creating_dataset()
    assert seen == [False]


def test_roles_from_tasks():
    roles = Roles.from_tasks([("ps", 0), ("chief", 0), ("worker", 1), ("worker", 0)])
    assert (roles.coordinator, roles.ps, roles.workers) == (1, [0], [3, 2])
    assert roles.others == [0, 2, 3]
    assert roles.jobs == {"chief": 1, "ps": 1, "worker": 2}


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ([("chief", 0), ("ps", 0)], "at least 3 ranks"),
        ([("chief", 0), ("ps", 0), ("ps", 0)], "both claim task ps:0"),
        ([("worker", 0), ("ps", 0), ("worker", 1)], "exactly one chief"),
        ([("chief", 0), ("worker", 0), ("worker", 1)], "at least one ps"),
    ],
)
def test_roles_from_tasks_rejects(tasks, message):
    with pytest.raises(ClusterConfigError, match=message):
        Roles.from_tasks(tasks)


PACKAGE = Path(hd.__file__).parent / "strategies" / "ps"
STACK = [
    "roles",
    "admission",
    "runtime",
    "serving",
    "control",
    "store",
    "remote_store",
    "ps_failure",
    "membership",
    "partitioners",
    "variables",
    "strategy",
    "functions",
    "liveness",
    "remote_values",
    "rejoin",
    "coordinator",
]


@pytest.mark.parametrize("module", STACK)
def test_package_modules_import_only_modules_below_them(module):
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    below = set(STACK[: STACK.index(module)])
    typing_only = {  # imports for annotations only (``if TYPE_CHECKING:``) never run
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name.startswith("hpcdist.strategies.ps."):
                imported = name.split(".")[3]
                assert imported in below, (
                    f"ps.{module} (line {node.lineno}) imports ps.{imported}; expected only "
                    f"modules below it: {sorted(below) or 'none'}"
                )


def test_roles_error_does_not_ask_for_a_num_ps_already_set(monkeypatch):
    monkeypatch.setenv("HPCDIST_NUM_PS", "1")
    get_settings(refresh=True)
    try:
        with pytest.raises(ClusterConfigError, match=r"HPCDIST_NUM_PS=1 applies only") as info:
            Roles.from_tasks([("worker", 0), ("ps", 0), ("worker", 1)])
        assert "set HPCDIST_NUM_PS" not in str(info.value)
    finally:
        monkeypatch.delenv("HPCDIST_NUM_PS")
        get_settings(refresh=True)


def _unloadable_pickle() -> bytes:
    """The pickle of a function, by reference, whose module cannot be imported (any more)."""
    module = types.ModuleType("hpcdist_test_gone_module")
    exec("def train_step(x):\n    return x\n", module.__dict__)
    sys.modules[module.__name__] = module
    try:
        return cloudpickle.dumps(module.train_step)
    finally:
        del sys.modules[module.__name__]


def test_pickled_name_reads_the_function_without_loading_it():
    assert pickled_name(_unloadable_pickle()) == "hpcdist_test_gone_module.train_step"
    assert pickled_name(cloudpickle.dumps(lambda: 1)) == (
        "test_pickled_name_reads_the_function_without_loading_it.<locals>.<lambda>"
    )
    assert pickled_name(b"not a pickle") is None


def test_a_function_that_fails_to_unpickle_is_reported_with_its_name_and_worker():
    rt = _self_runtime()
    server = threading.Thread(target=serve, args=(rt,), name="ps-serve", daemon=True)
    server.start()
    blob, args = _unloadable_pickle(), cloudpickle.dumps(((1,), {}))
    sleep = cloudpickle.dumps(time.sleep)
    try:
        _command(rt, ("run", 0, blob, args, ()))
        first = _reply(rt)
        # Given back (behind an item that runs long): its pickle fails to load without a run;
        # the next run of its key, without the pickle as the coordinator's record says, must
        # name the same cause, not blame that record.
        _command(
            rt, ("batch", [(1, sleep, cloudpickle.dumps(((0.5,), {})), ()), (0, blob, args, ())])
        )
        results, given_back = [], 0
        while len(results) + given_back < 2:
            got, back = pickle.loads(rt.channel.recv(0, TAG_RESULT, timeout=60))
            results, given_back = results + got, given_back + back
        _command(rt, ("run", 0, None, args, ()))
        again = _reply(rt)
    finally:
        _command(rt, ("stop",))
        server.join(timeout=30)
    assert not server.is_alive()
    assert first[0] == "error"
    text = str(first[1])
    assert "could not unpickle scheduled function hpcdist_test_gone_module.train_step" in text
    assert "worker 0 (rank 0)" in text and "ModuleNotFoundError" in text
    assert given_back == 1 and results[0][0] == "ok"
    assert again[0] == "error"
    assert "could not unpickle scheduled function hpcdist_test_gone_module.train_step" in str(
        again[1]
    )
    assert "record of this worker's functions is wrong" not in str(again[1])
