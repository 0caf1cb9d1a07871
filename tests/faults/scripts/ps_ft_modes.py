"""Small fault-tolerant parameter-server programs, run by tests/faults/test_ps_fault_tolerance.py.

``hpcdist run --ps 1 --workers W ps_ft_modes.py MODE OUT_DIR``:

* ``wait``: print ``READY`` and schedule sleeping functions until the launcher is signalled;
* ``one_left``: with no restarts left, SIGKILL worker 0; the remaining workers run the rest
  (``CHECK one_left PASS``);
* ``kill_ps``: SIGKILL the ps rank (a child of the coordinator's MPI proxy); the server job
  ends, so the launch ends (a ps failure is not survived yet);
* ``single``: under plain ``mpiexec -n 4`` (``HPCDIST_NUM_PS=1``): SIGKILL a worker; the MPI
  launcher ends the job.
"""

import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

import hpcdist as hd
from hpcdist.strategies.ps.runtime import coordinator_runtime

MODE = sys.argv[1]
strategy = hd.ParameterServerStrategy()
coordinator = hd.ClusterCoordinator(strategy)
rt = coordinator_runtime()


def check(name, ok, detail=""):
    print(f"CHECK {name} {'PASS' if ok else 'FAIL ' + str(detail)}", flush=True)


def slow_pid():
    time.sleep(0.05)
    return os.getpid()


def nap():
    time.sleep(0.2)


if MODE == "wait":
    print("READY", flush=True)
    while True:
        coordinator.schedule(nap)
        coordinator.join()
elif MODE == "kill_ps":
    proxy = os.getppid()
    children = Path(f"/proc/{proxy}/task/{proxy}/children").read_text().split()
    ps = [int(pid) for pid in children if int(pid) != os.getpid()]
    print("KILLING", ps, flush=True)
    os.kill(ps[0], signal.SIGKILL)
    while True:
        coordinator.schedule(nap)
        coordinator.join()
elif MODE == "single":
    pid = coordinator.schedule(os.getpid).fetch()
    print("KILLING", pid, flush=True)
    os.kill(pid, signal.SIGKILL)
    time.sleep(30)
    print("SURVIVED", flush=True)
elif MODE == "one_left":
    with strategy.scope():
        total = hd.Variable(np.float32(0))

    def inc():
        time.sleep(0.02)
        total.assign_add(np.float32(1))
        return os.getpid()

    pids = set()
    while len(pids) < len(rt.roles.workers):
        pids |= {rv.fetch() for rv in [coordinator.schedule(slow_pid) for _ in range(8)]}
    victim = min(pids)
    rvs = [coordinator.schedule(inc) for _ in range(20)]
    os.kill(victim, signal.SIGKILL)
    coordinator.join()
    ran = [rv.fetch() for rv in rvs]
    after = [coordinator.schedule(inc).fetch() for _ in range(5)]
    count = float(total.read_value())
    ok = count >= 25 and victim not in after and len(rt.present_workers()) == len(pids) - 1
    check("one_left", ok, (count, victim, set(ran), set(after), rt.present_workers()))
