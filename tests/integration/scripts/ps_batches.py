"""Batches of scheduled functions, run by tests/integration/test_ps_batches.py.

``HPCDIST_NUM_PS=1 mpiexec -n N python ps_batches.py`` (N = 3: one worker, or 4: two): rank 0
coordinates, rank 1 is the ps, the others are workers. Each ``case_*`` first makes every worker
busy (a function sleeping 0.3 s), then queues short functions, so that the workers take them
in batches (several functions per message) when they are free. The batches sent are recorded
by wrapping the runtime's real ``send_command``. Prints ``CASE <name> PASS`` or
``CASE <name> FAIL <reason>``.
"""

import contextlib
import threading
import time

import numpy as np
from case_runner import run_cases

import hpcdist as hd
from hpcdist.errors import CancelledError, WorkerPreemptedError
from hpcdist.strategies.ps.runtime import runtime

strategy = hd.ParameterServerStrategy()
coordinator = hd.ClusterCoordinator(strategy)
WORKERS = strategy.cluster_resolver.cluster_spec().num_tasks("worker")
SENT: list[list[int]] = [[]]  # the number of functions of each batch sent, per case

_send = runtime().send_command


def _recording_send(rank, message):
    if message[0] == "batch":
        SENT[-1].append(len(message[1]))
    _send(rank, message)


runtime().send_command = _recording_send


class Boom(ValueError):
    pass


def check(cond, message="check failed"):
    if not cond:
        raise AssertionError(message)


def busy(seconds=0.3):
    time.sleep(seconds)
    return strategy.extended.worker_index


def twice(i):
    return 2 * i


def fail_at(i, bad):
    if i == bad:
        raise Boom(f"item {i} fails")
    return i


def occupy_workers_then(fn, n, *extra):
    """Warm ``fn`` (its cost becomes known), make every worker busy, queue ``n`` calls."""
    for _ in range(20):  # a run slowed down by a busy machine weighs little in the average
        coordinator.schedule(fn, args=(-1, *extra)).fetch()
    SENT.append([])
    blockers = [coordinator.schedule(busy) for _ in range(WORKERS)]
    values = [coordinator.schedule(fn, args=(i, *extra)) for i in range(n)]
    return blockers, values


def case_each_remote_value_gets_its_own_result():
    blockers, values = occupy_workers_then(twice, 40)
    coordinator.join()
    check(sorted(b.fetch() for b in blockers) == list(range(WORKERS)), "blockers")
    got = [v.fetch() for v in values]
    check(got == [2 * i for i in range(40)], f"results {got}")
    batches = SENT[-1][WORKERS:]
    check(sum(batches) == 40, f"batches {SENT[-1]}")
    check(max(batches) > 1, f"nothing was batched: {SENT[-1]}")


def case_error_mid_batch_keeps_the_others_results():
    bad = 1
    _, values = occupy_workers_then(fail_at, 20, bad)
    try:
        coordinator.join()
        check(False, "join did not raise")
    except Boom as exc:
        check(f"item {bad} fails" in str(exc), str(exc))
        check("raised on worker" in "".join(getattr(exc, "__notes__", [])), "no worker note")
    ends = np.cumsum(SENT[-1][WORKERS:])  # the batches in queue order
    end = int(ends[np.searchsorted(ends, bad, side="right")])
    check(end > bad + 1, f"item {bad} was last in its batch: {SENT[-1]}")
    for i, value in enumerate(values):
        if i == bad:
            check(value.status is hd.RemoteValueStatus.ABORTED, f"item {bad} status")
            with contextlib.suppress(Boom):
                value.fetch()
                check(False, f"item {bad} did not raise")
        elif i < end:  # sent: its own result, even in the failing function's batch
            check(value.fetch() == i, f"item {i}: {value.status}")
        else:  # still queued when the error came back: cancelled
            with contextlib.suppress(CancelledError):
                check(value.fetch() == i, f"item {i}")
    coordinator.join()  # raised once
    check(coordinator.done(), "not done after the error was raised")


def case_preempted_function_mid_batch_runs_again_elsewhere():
    with strategy.scope():
        attempts = strategy.Variable(0, dtype=np.int64)
        preempted_on = strategy.Variable(-1, dtype=np.int64)

    def flaky(i, bad):
        if i == bad and int(attempts.assign_add(1)) == 1:
            preempted_on.assign(strategy.extended.worker_index)
            raise WorkerPreemptedError("worker preempted (simulated)")
        return i, strategy.extended.worker_index

    _, values = occupy_workers_then(flaky, 12, 3)
    coordinator.join()  # no error: the preempted one ran again
    got = [v.fetch() for v in values]
    check([g[0] for g in got] == list(range(12)), f"results {got}")
    check(int(attempts.numpy()) == 2, f"item 3 ran {attempts.numpy()} times")
    first = int(preempted_on.numpy())
    check(WORKERS == 1 or got[3][1] != first, f"item 3 ran again on worker {first}: {got}")


def case_unsendable_result_fails_only_its_function():
    def result_of(i, bad):
        return threading.Lock() if i == bad else i

    _, values = occupy_workers_then(result_of, 10, 2)
    try:
        coordinator.join()
        check(False, "join did not raise")
    except RuntimeError as exc:
        check("cannot be sent" in str(exc), str(exc))
    for i, value in enumerate(values):
        if i != 2:
            with contextlib.suppress(CancelledError):
                check(value.fetch() == i, f"item {i}")
    check(values[2].status is hd.RemoteValueStatus.ABORTED, "item 2 status")
    coordinator.join()


def case_slow_functions_travel_alone():
    def slow(i):
        time.sleep(0.02)
        return i

    _, values = occupy_workers_then(slow, 8)
    coordinator.join()
    check([v.fetch() for v in values] == list(range(8)), "results")
    check(SENT[-1][WORKERS:] == [1] * 8, f"batches {SENT[-1]}")


def case_many_small_functions_and_round_trips():
    values = [coordinator.schedule(twice, args=(i,)) for i in range(5000)]
    coordinator.join()
    check([v.fetch() for v in values] == [2 * i for i in range(5000)], "results")
    for i in range(200):
        check(coordinator.schedule(twice, args=(i,)).fetch() == 2 * i, f"round trip {i}")
    check(coordinator.done(), "not done")


def case_variables_updated_by_batched_functions():
    with strategy.scope():
        total = strategy.Variable(np.zeros(3, np.float32))

    def add(i):
        total.assign_add(np.full(3, i, np.float32))

    _, _ = occupy_workers_then(add, 50)
    coordinator.join()
    expected = sum(range(50)) - 20  # the warm-up calls added -1 each
    check(np.array_equal(total.numpy(), np.full(3, expected, np.float32)), f"{total.numpy()}")


def case_join_returns_only_after_every_function_ran():
    """A pass takes closures off the queue before it records them as sent: join must not see
    that moment as idle (it read the state without the dispatch loop's lock)."""
    with strategy.scope():
        ran = strategy.Variable(0, dtype=np.int64)

    def count():
        ran.assign_add(1)

    expected = 0
    for rounds in range(1, 60):
        for _ in range(rounds):
            coordinator.schedule(count)
        expected += rounds
        coordinator.join()
        check(int(ran.numpy()) == expected, f"join returned at {ran.numpy()} of {expected}")


run_cases(globals(), coordinator)
