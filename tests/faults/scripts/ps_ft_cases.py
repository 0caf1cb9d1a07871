"""Fault-tolerant parameter-server cases, run by tests/faults/test_ps_fault_tolerance.py.

``hpcdist run --ps P --workers W --worker-restarts K ps_ft_cases.py OUT_DIR``: the coordinator
runs every ``case_*`` in order and prints ``CHECK <name> PASS`` or ``CHECK <name> FAIL
<reason>``. The cases port TF's fault_tolerance_test: a worker is SIGKILLed from the
coordinator (it learns each worker's pid from a scheduled function) and the launcher restarts
it. ``MEASURE <name> <seconds>`` lines report the death-notice latency (kill -> end of file on
the worker's socket), the reconnect time (kill -> replacement joined) and no-op round trips.
A case that needs more workers than the layout has prints ``CHECK <name> FAIL SKIP <why>``,
which the test reports as skipped.
"""

import os
import pickle
import signal
import socket
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import hpcdist as hd
from hpcdist.strategies.ps.admission import MAGIC
from hpcdist.strategies.ps.runtime import coordinator_runtime

OUT = Path(sys.argv[1])
strategy = hd.ParameterServerStrategy()
coordinator = hd.ClusterCoordinator(strategy)
rt = coordinator_runtime()
NUM_WORKERS = len(rt.roles.workers)


def check(name, ok, detail=""):
    print(f"CHECK {name} {'PASS' if ok else 'FAIL ' + str(detail)}", flush=True)


def measure(name, seconds):
    print(f"MEASURE {name} {seconds:.6f}", flush=True)


def counter(value=0.0):
    with strategy.scope():
        return hd.Variable(np.float32(value))


def slow_pid():
    time.sleep(0.05)
    return os.getpid()


def worker_pids():
    """The pid of every present worker (functions run until each has answered one)."""
    wait_until(lambda: len(rt.present_workers()) == NUM_WORKERS)
    pids = set()
    deadline = time.monotonic() + 60
    while len(pids) < len(rt.present_workers()) and time.monotonic() < deadline:
        rvs = [coordinator.schedule(slow_pid) for _ in range(4 * NUM_WORKERS)]
        pids |= {rv.fetch() for rv in rvs}
    return sorted(pids)


def wait_until(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        coordinator.done()  # drives the dispatch loop: joins and deaths are taken in
        time.sleep(0.01)
    return True


def kill_worker(pid, wait_rejoin=False):
    """SIGKILL ``pid``; measure the death notice (and the rejoin when asked)."""
    joins, deaths = rt.joins, rt.deaths
    before = rt.admission.last_death_at
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    noticed = wait_until(lambda: rt.admission.last_death_at != before, 10)
    if noticed:
        measure("death_notice", rt.admission.last_death_at - t0)
    if wait_rejoin:
        wait_until(lambda: rt.deaths > deaths and rt.joins > joins)
        measure("reconnect", time.monotonic() - t0)
    return noticed


def case_worker_preemption_between_functions():  # testWorkerPreemptionBetweenFunctions
    iterations = counter()

    def inc():
        iterations.assign_add(np.float32(1))

    for _ in range(2):
        coordinator.schedule(inc)
    coordinator.join()
    first = float(iterations.read_value())
    kill_worker(worker_pids()[0])
    for _ in range(2):
        coordinator.schedule(inc)
    coordinator.join()
    second = float(iterations.read_value())
    check("between_functions_2", first == 2, first)
    check("between_functions_4", second == 4, second)


def case_worker_preemption_midst_function():  # testWorkerPreemptionMidstFunction
    iterations = counter()

    def long_inc():
        time.sleep(0.4)
        iterations.assign_add(np.float32(1))
        return 1

    pids = worker_pids()
    rvs = [coordinator.schedule(long_inc) for _ in range(4)]
    time.sleep(0.2)
    kill_worker(pids[0])
    coordinator.join()
    values = [rv.fetch() for rv in rvs]
    total = float(iterations.read_value())
    check("midst_function", total >= 4 and values == [1] * 4, (total, values))


def case_numpy_fetched_after_worker_failure():  # testNumpyFetchedAfterWorkerFailure
    def pair():
        return np.int32(1), np.int32(-1)

    pids = worker_pids()
    rv = coordinator.schedule(pair)
    coordinator.join()
    kill_worker(pids[0])
    wait_until(lambda: len(rt.present_workers()) < NUM_WORKERS or rt.deaths > 0, 10)
    got = rv.fetch()
    check("numpy_fetched_after_death", tuple(int(x) for x in got) == (1, -1), got)


def case_dataset_rebuilt_during_restart():  # testHandleDatasetCreationFailure...
    iterations = counter()
    dataset = coordinator.create_per_worker_dataset(lambda: hd.data.Dataset.range(1000))
    iterator = iter(dataset)

    def take(it):
        value = next(it)
        iterations.assign_add(np.float32(1))
        return int(value)

    pids = worker_pids()
    before = [coordinator.schedule(take, args=(iterator,)) for _ in range(3)]
    coordinator.join()
    kill_worker(pids[0])
    after = [coordinator.schedule(take, args=(iterator,)) for _ in range(3)]  # during restart
    coordinator.join()
    values = [rv.fetch() for rv in before + after]
    total = float(iterations.read_value())
    ok = total >= 3 and len(values) == 6
    if NUM_WORKERS == 1:  # the replacement's iterator starts from the beginning again
        ok = ok and values[:3] == [0, 1, 2] and values[3:] == [0, 1, 2]
    check("dataset_rebuilt", ok, (total, values))


def case_cluster_usable_after_restart():  # testClusterStateNotDisrupted, ...FromPSAfter...
    with strategy.scope():
        v = hd.Variable(np.full(3, 7.0, np.float32))
        table = hd.Variable(np.arange(12, dtype=np.float32).reshape(6, 2))
    kill_worker(worker_pids()[0], wait_rejoin=True)

    def use():
        table.scatter_add(np.array([1, 4]), np.ones((2, 2), np.float32))
        v.assign_add(np.ones(3, np.float32))
        return v.read_value(), table.sparse_read(np.array([1, 4]))

    read, rows = coordinator.schedule(use).fetch()
    expected_rows = np.array([[3, 4], [9, 10]], np.float32)
    ok = np.array_equal(read, np.full(3, 8.0)) and np.array_equal(rows, expected_rows)
    ok = ok and np.array_equal(v.read_value(), np.full(3, 8.0))
    check("usable_after_restart", ok, (read, rows))
    check("all_workers_back", len(rt.present_workers()) == NUM_WORKERS, rt.present_workers())


def case_two_workers_preempted():  # testTwoWorkersPreempted
    iterations = counter()

    def long_inc():
        time.sleep(0.2)
        iterations.assign_add(np.float32(1))
        return 1

    pids = worker_pids()
    rvs = [coordinator.schedule(long_inc) for _ in range(10)]
    time.sleep(0.1)
    for pid in pids:  # every worker (both, at 2 workers)
        kill_worker(pid)
    coordinator.join()
    values = [rv.fetch() for rv in rvs]
    total = float(iterations.read_value())
    check("every_worker_preempted", total >= 10 and values == [1] * 10, (total, values))


def case_worker_continuous_failure():  # testWorkerContinuousFailure
    iterations = counter()

    def long_inc():
        time.sleep(0.1)
        iterations.assign_add(np.float32(1))
        return 1

    rvs = [coordinator.schedule(long_inc) for _ in range(10)]
    for _ in range(2):  # two kill/restart cycles while the functions run
        kill_worker(worker_pids()[0], wait_rejoin=True)
    coordinator.join()
    values = [rv.fetch() for rv in rvs]
    total = float(iterations.read_value())
    check("continuous_failure", total >= 10 and values == [1] * 10, (total, values))


def wait_for_death(deaths, timeout=10.0):
    """Wait for a death without ``done()`` (which would raise a pending error)."""
    deadline = time.monotonic() + timeout
    while rt.deaths <= deaths and time.monotonic() < deadline:
        time.sleep(0.01)
    return rt.deaths > deaths


def case_one_worker_preemption_with_cancellation():  # testOneWorkerPreemptionWithCancellation
    names = ["cancellation_join_raises", "cancellation_long_cancelled", "cancellation_then_ok"]
    if NUM_WORKERS < 2:  # TF kills worker 1 while worker 0 fails: it needs two workers
        for name in names:
            check(name, False, "SKIP needs 2 workers")
        return
    with strategy.scope():
        long_pid = hd.Variable(np.int64(0))

    def normal_function():
        x, y = np.random.uniform(size=(2, 10)), np.random.uniform(size=(10, 2))
        return float(np.mean(x @ y))

    def error_function():
        x, y = np.random.uniform(size=(2, 10)), np.random.uniform(size=(10, 2))
        total = float(np.sum(x @ y))
        if total > 0:  # TF's check_ops.assert_non_positive_v2
            raise hd.errors.InvalidArgumentError(f"expected a non-positive sum, got {total}")
        return x

    def long_function():
        long_pid.assign(np.int64(os.getpid()))
        for _ in range(600):
            time.sleep(0.1)
        return 1

    worker_pids()  # every worker present and warm
    for _ in range(3):
        coordinator.schedule(normal_function)
    long_result = coordinator.schedule(long_function)
    coordinator.schedule(error_function)
    time.sleep(1)  # let it run a couple of steps
    pid, deaths = int(long_pid.read_value()), rt.deaths
    os.kill(pid, signal.SIGKILL)  # the worker running the long function
    wait_for_death(deaths)
    try:
        coordinator.join()
        joined = "join returned"
    except hd.errors.InvalidArgumentError:
        joined = None
    try:
        long_result.fetch()
        fetched = "fetch returned"
    except hd.errors.CancelledError:
        fetched = None
    rvs = [coordinator.schedule(normal_function) for _ in range(3)]
    coordinator.join()
    values = [rv.fetch() for rv in rvs]
    check(names[0], joined is None, joined)
    check(names[1], fetched is None, fetched)
    check(names[2], all(isinstance(v, float) for v in values), values)


def case_worker_preemption_error_type():  # testWorkerPreemptionErrorType
    with strategy.scope():
        counters = [hd.Variable(np.float32(0)) for _ in rt.roles.ps]  # one on every ps

    def train_fn():
        time.sleep(0.2)
        for c in counters:
            c.assign_add(np.float32(1))
        return os.getpid()

    pids = worker_pids()
    rvs = [coordinator.schedule(train_fn) for _ in range(4 * NUM_WORKERS)]
    time.sleep(0.1)
    kill_worker(pids[0])
    try:
        coordinator.join()
        error = None
    except Exception as exc:  # a worker's death must not surface as an error
        error = exc
    totals = [float(c.read_value()) for c in counters]
    ok = error is None and rt.fatal is None and all(t >= 4 * NUM_WORKERS for t in totals)
    ok = ok and all(isinstance(rv.fetch(), int) for rv in rvs)
    # The coordinator names the dead worker (stderr: "worker 0 (rank ...) died"), not a ps.
    check("worker_preemption_error_type", ok, (error, rt.fatal, totals))


def case_update_not_torn_by_a_dying_worker():
    with strategy.scope():
        big = hd.Variable(np.zeros(4 << 20, np.float32))  # 16 MiB
    ones = np.ones(4 << 20, np.float32)

    def push():
        for _ in range(6):
            big.assign_add(ones)
        return 1

    pids = worker_pids()
    rv = coordinator.schedule(push)
    time.sleep(0.3)  # inside one of its updates, most likely
    kill_worker(pids[0])
    coordinator.join()
    value = big.read_value()
    uniform = bool(value.min() == value.max())
    ok = rv.fetch() == 1 and uniform and value[0] >= 6
    check("update_not_torn", ok, (value.min(), value.max()))


def case_idle_coordinator_takes_changes_in():
    """Nothing runs and no thread calls the coordinator: woken by the admission thread, the
    dispatcher takes the death in at once (no timed wait stands in) and then the replacement."""
    pids = worker_pids()
    coordinator.join()
    deaths, joins, before = rt.deaths, rt.joins, rt.admission.last_death_at
    os.kill(pids[0], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while rt.deaths == deaths and time.monotonic() < deadline:
        time.sleep(1e-3)  # only looks: the dispatcher thread must do it
    lag = time.monotonic() - rt.admission.last_death_at
    seen = rt.admission.last_death_at != before
    while rt.joins == joins and time.monotonic() < deadline:
        time.sleep(1e-3)
    measure("idle_death_taken_in", lag)
    ok = seen and lag < 0.1 and rt.deaths > deaths and rt.joins > joins
    check("idle_coordinator_takes_changes_in", ok, (lag, rt.deaths - deaths, rt.joins - joins))


class Payload:
    """A pickle that, if anyone unpickled it, would create a file."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def stranger(data):
    """Connect to the admission socket, send ``data``; what the server sent back, all of it."""
    sock = socket.create_connection(rt.admission.address, timeout=10)
    got = b""
    try:
        got = sock.recv(len(MAGIC) + 32, socket.MSG_WAITALL)
        sock.sendall(data(got) if callable(data) else data)
        sock.shutdown(socket.SHUT_WR)
        while chunk := sock.recv(4096):
            got += chunk
    except OSError:
        pass
    finally:
        sock.close()
    return got


def case_stranger_changes_nothing():
    iterations = counter()
    marker = OUT / "unpickled-marker"
    # the workers killed by the cases before are back (a late rejoin would change rt.joins)
    wait_until(lambda: len(rt.present_workers()) == NUM_WORKERS)
    joins, rejected, present = rt.joins, rt.admission.rejected, rt.present_workers()
    wrong_token = stranger(lambda _: b"\0\0\0\0" + os.urandom(64))
    garbage = stranger(os.urandom(200))
    payload = stranger(pickle.dumps(Payload(str(marker))))
    replay = stranger(lambda got: b"\0\0\0\0" + got[-32:] + got[-32:])  # its own nonce back
    answers = [wrong_token, garbage, payload, replay]
    ok_answers = all(len(a) == len(MAGIC) + 32 and a.startswith(MAGIC) for a in answers)
    wait_until(lambda: rt.admission.rejected >= rejected + 4, 15)

    def inc():
        iterations.assign_add(np.float32(1))

    for _ in range(3):
        coordinator.schedule(inc)
    coordinator.join()
    check("stranger_gets_only_the_challenge", ok_answers, [len(a) for a in answers])
    check("stranger_rejected", rt.admission.rejected == rejected + 4, rt.admission.rejected)
    check("stranger_not_unpickled", not marker.exists())
    count = float(iterations.read_value())
    same = rt.joins == joins and rt.present_workers() == present
    check("stranger_changes_nothing", same and count == 3, (rt.joins, joins, count))


def case_noop_round_trip():
    def noop():
        return None

    coordinator.schedule(noop).fetch()
    times = []
    for _ in range(200):
        t0 = time.perf_counter()
        coordinator.schedule(noop).fetch()
        times.append(time.perf_counter() - t0)
    measure("noop_round_trip", statistics.median(times))
    check("noop_round_trip", True)


CASES = [v for k, v in list(globals().items()) if k.startswith("case_")]
for case in CASES:
    try:
        case()
    except Exception as exc:  # report, go on with the next case
        check(case.__name__[5:], False, f"{type(exc).__name__}: {exc}")
print("DONE", flush=True)
