"""A function that hangs in the middle of a batch, past the deadline, on one worker of two.

``HPCDIST_NUM_PS=1 HPCDIST_TIMEOUT_SECONDS=2 HPCDIST_STALL_WARNING_SECONDS=0.5 mpiexec -n 4
python ps_batch_deadline.py``: both workers are made busy, then 20 short calls of ``item`` are
queued, so that the workers take them in batches. Call 3 sleeps 4 s the first time it runs.
While it sleeps, its worker reports the calls before it in its batch; at the deadline call 3
(and no other) fails with `DeadlineExceededError`, the rest of its batch runs on the other
worker, and when the stuck worker wakes it skips them (each call runs once: ``runs`` counts).
The worker is then back in its serve loop, so every rank exits with status 0. Prints ``CHECK
<name> PASS`` or ``CHECK <name> FAIL <reason>``.
"""

import time

import numpy as np

import hpcdist as hd
from hpcdist.errors import DeadlineExceededError

N, HANG = 20, 3
strategy = hd.ParameterServerStrategy()
coordinator = hd.ClusterCoordinator(strategy)
with strategy.scope():
    runs = strategy.Variable(np.zeros(N, np.float32))  # how many times each call ran
    hung = strategy.Variable(0.0)


def busy():
    time.sleep(0.3)


def item(i):
    if i >= 0:
        runs.assign_add(np.eye(N, dtype=np.float32)[i])
    if i == HANG and float(hung.assign_add(1.0)) == 1.0:
        time.sleep(4.0)
    return i, strategy.extended.worker_index


def check(name, cond, detail=""):
    print(f"CHECK {name} {'PASS' if cond else 'FAIL ' + str(detail)}", flush=True)


for _ in range(20):  # its cost becomes known: it is batched from now on
    coordinator.schedule(item, args=(-1,)).fetch()
for _ in range(strategy.cluster_resolver.cluster_spec().num_tasks("worker")):
    coordinator.schedule(busy)
values = [coordinator.schedule(item, args=(i,)) for i in range(N)]
start = time.monotonic()
try:
    coordinator.join()
    check("join_raises_deadline", False, "join returned")
except DeadlineExceededError as exc:
    check("join_raises_deadline", "item" in str(exc) and "rank" in str(exc), exc)
    check("deadline_on_time", 1.5 < time.monotonic() - start < 4.0, time.monotonic() - start)
failed, ran_on = [], {}
for i, value in enumerate(values):
    try:
        got = value.fetch()
        ran_on[i] = got[1]
        check("own_result", got[0] == i, (i, got))
    except DeadlineExceededError as exc:
        failed.append(i)
        lost = exc.missing_ranks[0]
check("only_the_stuck_call_failed", failed == [HANG], failed)
workers = set(ran_on.values())
check("others_ran", len(ran_on) == N - 1 and len(workers) == 2, ran_on)
later = [coordinator.schedule(item, args=(-1,)) for _ in range(10)]
coordinator.join()
check("stuck_worker_not_used_again", len({v.fetch()[1] for v in later}) == 1)
time.sleep(max(0.0, start + 4.5 - time.monotonic()))  # the stuck call returns meanwhile
check("each_call_ran_once", np.array_equal(runs.numpy(), np.ones(N)), runs.numpy())
print("END OF PROGRAM", flush=True)
