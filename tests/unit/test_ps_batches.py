"""Batches of scheduled functions: how the coordinator cuts them and how a worker runs them.

The closures given to `take_batch` are plain records with the two fields it reads
(``function.cost``, ``avoid``). A worker's side runs for real: `serve` in a thread over
``MPI.COMM_SELF``, the test sending the commands as the coordinator. Whole jobs are in
tests/integration/test_ps_batches.py.
"""

import collections
import pickle
import threading
import time
from types import SimpleNamespace

import cloudpickle
import pytest
from mpi4py import MPI

import hpcdist as hd
from hpcdist.comm.p2p import Channel
from hpcdist.strategies.ps.functions import BATCH_SECONDS, MAX_BATCH, note_cost, take_batch
from hpcdist.strategies.ps.liveness import Liveness, Running
from hpcdist.strategies.ps.roles import Roles
from hpcdist.strategies.ps.runtime import TAG_CANCEL, TAG_COMMAND, TAG_RESULT, serve
from hpcdist.strategies.ps.serving import ServingRuntime
from hpcdist.strategies.ps.store import RmaStore


def closures(*costs, avoid=None):
    return [
        SimpleNamespace(function=SimpleNamespace(cost=c, name=f"f{i}"), avoid=avoid, n=i)
        for i, c in enumerate(costs)
    ]


def queue(*costs, avoid=None):
    return collections.deque(closures(*costs, avoid=avoid))


def numbers(batch):
    return [c.n for c in batch]


def test_a_function_never_run_goes_alone():
    q = queue(None, 1e-6, 1e-6)
    assert numbers(take_batch(q, worker=2, live=1)) == [0]
    assert numbers(take_batch(q, worker=2, live=1)) == [1, 2]


def test_the_batch_stops_at_an_unknown_cost_and_keeps_the_order():
    q = queue(1e-6, 1e-6, None, 1e-6)
    assert numbers(take_batch(q, worker=2, live=1)) == [0, 1]
    assert numbers(q) == [2, 3]


def test_the_batch_holds_at_most_batch_seconds_of_estimated_work():
    cost = BATCH_SECONDS / 4
    q = queue(*[cost] * 10)
    assert len(take_batch(q, worker=2, live=1)) == 4
    slow = queue(2 * BATCH_SECONDS, 1e-6)  # the first always goes, even a slow one
    assert numbers(take_batch(slow, worker=2, live=1)) == [0]


def test_the_batch_holds_at_most_max_batch_and_the_worker_share():
    q = queue(*[1e-9] * (3 * MAX_BATCH))
    assert len(take_batch(q, worker=2, live=1)) == MAX_BATCH
    assert [len(take_batch(queue(*[1e-9] * 9), worker=2, live=w)) for w in (1, 2, 3)] == [9, 5, 3]


def test_a_closure_preempted_on_this_worker_goes_elsewhere_unless_it_is_the_only_one():
    q = collections.deque(closures(1e-6, avoid=2) + closures(1e-6, 1e-6))
    assert [c.avoid for c in take_batch(q, worker=2, live=2)] == [None]
    assert [c.avoid for c in q] == [2, None]
    assert take_batch(collections.deque(closures(1e-6, avoid=2)), worker=2, live=2) == []
    assert len(take_batch(collections.deque(closures(1e-6, avoid=2)), worker=2, live=1)) == 1
    assert take_batch(collections.deque(), worker=2, live=1) == []


def test_cost_is_a_moving_average_of_the_runs():
    f = SimpleNamespace(cost=None)
    note_cost(f, 4.0)
    assert f.cost == 4.0
    note_cost(f, 0.0)
    assert f.cost == pytest.approx(3.0)


def test_running_follows_the_first_unanswered_closure():
    run = Running(closures(1e-6, 1e-6))
    assert run.name == "f0"
    run.closures.popleft()
    run.warned = True
    run.started()
    assert (run.name, run.warned) == ("f1", False)


def test_a_lost_worker_is_back_once_its_whole_batch_answered():
    liveness = Liveness([2, 3], timeout=1.0, stall_warning=None)
    liveness.lost[2] = "f0"
    liveness.unanswered[2] = 5
    assert not liveness.answered(2, 3)
    assert liveness.stuck() == [2]
    assert liveness.answered(2, 2)
    assert liveness.stuck() == [] and 2 in liveness.late


# -- a worker running batches: `serve` over MPI.COMM_SELF (rank 0 plays every role) ----------


def _self_runtime():
    """Rank 0 of ``COMM_SELF`` as a worker (and ps); the test plays the coordinator."""
    roles = Roles(coordinator=0, ps=[0], workers=[0], size=1)
    channel = Channel(MPI.COMM_SELF)
    return ServingRuntime(hd.get_strategy(), channel, roles, RmaStore(channel.dup(), roles.ps))


def _command(rt, message):
    """Send ``message`` to the serving runtime as the coordinator would."""
    rt.channel.send(message, 0, TAG_COMMAND)


def _fail(message):
    raise ValueError(message)


def _args(*args):
    return cloudpickle.dumps((args, {}))


def _replies(rt, items):
    """Every reply of one batch: ``(results, given back)`` until all items are answered."""
    got, back = [], 0
    while len(got) + back < items:
        results, given_back = pickle.loads(rt.channel.recv(0, TAG_RESULT, timeout=60))
        got += results
        back += given_back
    return got, back


def _serving(test):
    rt = _self_runtime()
    server = threading.Thread(target=serve, args=(rt,), name="ps-serve", daemon=True)
    server.start()
    try:
        return test(rt)
    finally:
        _command(rt, ("stop",))
        server.join(timeout=30)
        assert not server.is_alive(), "serve() did not return after ('stop',)"


def test_a_batch_answers_every_item_in_order_in_one_message():
    upper, fail = cloudpickle.dumps(str.upper), cloudpickle.dumps(_fail)
    batch = [
        (0, upper, _args("a"), ()),
        (1, fail, _args("item 1 fails"), ()),
        (0, None, _args("c"), (0,)),  # forgets key 0 after this item
        (2, cloudpickle.dumps(threading.Lock), None, ()),  # a result that cannot be sent
        (0, None, _args("e"), ()),  # key 0 is gone: the coordinator's record would be wrong
    ]

    def test(rt):
        _command(rt, ("batch", batch))
        results, given_back = pickle.loads(rt.channel.recv(0, TAG_RESULT, timeout=60))
        return results, given_back, dict(rt.functions)

    results, given_back, held = _serving(test)
    assert given_back == 0 and len(results) == 5
    assert [r[0] for r in results] == ["ok", "error", "ok", "error", "error"]
    assert results[0][1] == "A" and results[2][1] == "C"
    assert isinstance(results[1][1], ValueError) and "item 1 fails" in str(results[1][1])
    assert "cannot be sent" in str(results[3][1])
    assert "function #0 without its pickle" in str(results[4][1])
    assert all(isinstance(r[3], float) and r[3] >= 0 for r in results)
    assert set(held) == {1, 2}


def test_an_item_running_long_gives_back_the_items_after_it():
    sleep, upper = cloudpickle.dumps(time.sleep), cloudpickle.dumps(str.upper)
    # Items 1 and 2 are given back; item 1 carried key 1's pickle, item 2 told it to forget
    # key 0: the worker holds what the coordinator's record says, as if they had run.
    batch = [(0, sleep, _args(1.0), ()), (1, upper, _args("x"), ()), (1, None, _args("y"), (0,))]

    def test(rt):
        _command(rt, ("batch", batch))
        first = _replies(rt, 3)
        _command(rt, ("batch", [(1, None, _args("z"), ())]))
        return first, _replies(rt, 1), set(rt.functions)

    (results, given_back), (again, _), held = _serving(test)
    assert given_back == 2 and [r[0] for r in results] == ["ok"]
    assert again[0][:2] == ("ok", "Z") and held == {1}


def test_a_cancelled_batch_gives_back_the_items_not_started():
    sleep = cloudpickle.dumps(time.sleep)
    batch = [(0, sleep, _args(0.03), ())] * 2 + [(0, None, _args(0.0), ())] * 2
    batch[1] = (0, None, _args(0.03), ())

    def test(rt):
        # to itself, so not a blocking send; read after an item, once 50 ms passed, or at stop
        cancels.append(rt.channel.comm.isend(None, dest=0, tag=TAG_CANCEL))
        _command(rt, ("batch", batch))
        return _replies(rt, 4)

    cancels = []
    results, given_back = _serving(test)
    cancels[0].wait()
    assert len(results) + given_back == 4 and given_back >= 2, (results, given_back)
