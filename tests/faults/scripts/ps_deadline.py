"""A scheduled function that sleeps past the deadline on one worker of two.

``HPCDIST_NUM_PS=1 HPCDIST_TIMEOUT_SECONDS=2 HPCDIST_STALL_WARNING_SECONDS=0.5 mpiexec -n 4
python ps_deadline.py``: ``slow`` sleeps 3 s on one worker while ``fast`` functions run on the
other. ``slow`` is named in a stall warning at 0.5 s and fails with `DeadlineExceededError` at
2 s; ``join`` raises it once; the coordinator keeps scheduling on the other worker only. At the
end of the program ``slow`` has returned (late), so every rank exits with status 0. Prints
``CHECK <name> PASS`` or ``CHECK <name> FAIL <reason>``.
"""

import time

import numpy as np
from mpi4py import MPI

import hpcdist as hd
from hpcdist.errors import DeadlineExceededError, UnavailableError

strategy = hd.ParameterServerStrategy()
coordinator = hd.ClusterCoordinator(strategy)
with strategy.scope():
    counter = strategy.Variable(0.0)


def slow():
    time.sleep(3.0)
    return MPI.COMM_WORLD.Get_rank()


def fast():
    counter.assign_add(1.0)
    return MPI.COMM_WORLD.Get_rank()


def check(name, cond, detail=""):
    print(f"CHECK {name} {'PASS' if cond else 'FAIL ' + str(detail)}", flush=True)


start = time.monotonic()
slow_value = coordinator.schedule(slow)
time.sleep(0.2)  # slow is running on one worker: the fast ones go to the other
fast_values = [coordinator.schedule(fast) for _ in range(10)]
try:
    coordinator.join()
    check("join_raises_deadline", False, "join returned")
except DeadlineExceededError as exc:
    elapsed = time.monotonic() - start
    check("join_raises_deadline", "slow" in str(exc) and "rank" in str(exc), exc)
    check("deadline_on_time", 1.9 < elapsed < 4.0, f"raised after {elapsed:.2f} s")
try:  # a new RMA segment needs every rank, the stuck one too: an error, not a hang
    with strategy.scope():
        strategy.Variable(np.zeros(5 << 20, np.float32))
    check("new_segment_refused_while_stuck", False, "the variable was created")
except UnavailableError as exc:
    check("new_segment_refused_while_stuck", "in slow are stuck past their deadline" in str(exc))
try:
    slow_value.fetch()
    check("remote_value_raises_deadline", False, "fetch returned")
except DeadlineExceededError as exc:
    lost = exc.missing_ranks[0]
    check("remote_value_raises_deadline", f"(rank {lost})" in str(exc), exc)
ranks = {v.fetch() for v in fast_values}
check("others_ran_on_the_live_worker", ranks and lost not in ranks, (ranks, lost))
coordinator.join()  # the error was raised once: this join succeeds
check("error_raised_once", coordinator.done())
later = [coordinator.schedule(fast) for _ in range(20)]
coordinator.join()
ranks = {v.fetch() for v in later}
check("stuck_worker_not_used_again", lost not in ranks and len(ranks) == 1, (ranks, lost))
check("all_updates_counted", float(counter.numpy()) == 30.0, counter.numpy())
print("END OF PROGRAM", flush=True)
