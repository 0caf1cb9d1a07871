"""SIGSTOP of a worker process while functions are scheduled.

``HPCDIST_NUM_PS=1 HPCDIST_TIMEOUT_SECONDS=2 HPCDIST_STALL_WARNING_SECONDS=0.5 mpiexec -n 4
python ps_sigstop.py MODE``: the coordinator learns the workers' process ids (printed as ``PIDS
{rank: pid}``), stops one worker with SIGSTOP and schedules functions. The one sent to the
stopped worker fails with `DeadlineExceededError` after 2 s; the others run on the other worker.
With MODE ``continue`` the coordinator then sends SIGCONT: the stopped worker replies late and
the job ends with status 0. With MODE ``abandon`` it does not: at the end of the program the job
cannot end collectively, so the coordinator aborts it after the deadline instead of hanging.
Prints ``CHECK <name> PASS`` or ``CHECK <name> FAIL <reason>``.
"""

import json
import os
import signal
import sys
import time

from mpi4py import MPI

import hpcdist as hd
from hpcdist.errors import DeadlineExceededError

MODE = sys.argv[1]
strategy = hd.ParameterServerStrategy()
coordinator = hd.ClusterCoordinator(strategy)


def whoami():
    time.sleep(0.1)  # every idle worker gets one of a batch
    return MPI.COMM_WORLD.Get_rank(), os.getpid()


def rank():
    return MPI.COMM_WORLD.Get_rank()


def check(name, cond, detail=""):
    print(f"CHECK {name} {'PASS' if cond else 'FAIL ' + str(detail)}", flush=True)


pids = {}
while len(pids) < strategy.cluster_resolver.cluster_spec().num_tasks("worker"):
    pids.update(v.fetch() for v in [coordinator.schedule(whoami) for _ in range(4)])
print("PIDS " + json.dumps(pids), flush=True)
victim = min(pids)
os.kill(pids[victim], signal.SIGSTOP)
values = [coordinator.schedule(rank) for _ in range(10)]
try:
    coordinator.join()
    check("join_raises_deadline", False, "join returned")
except DeadlineExceededError as exc:
    check("join_raises_deadline", f"(rank {victim})" in str(exc) and "rank" in str(exc), exc)
failed = []
for value in values:
    try:
        check("ran_on_the_live_worker", value.fetch() != victim, value.fetch())
    except DeadlineExceededError:
        failed.append(value)
    except hd.errors.CancelledError:
        pass
check("one_function_failed", len(failed) == 1, len(failed))
later = [coordinator.schedule(rank) for _ in range(10)]
coordinator.join()
check("stopped_worker_not_used_again", {v.fetch() for v in later} == set(pids) - {victim})
if MODE == "continue":
    os.kill(pids[victim], signal.SIGCONT)
print("END OF PROGRAM", flush=True)
