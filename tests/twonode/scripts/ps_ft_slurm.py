"""A fault-tolerant parameter-server launch in Slurm job steps on two nodes.

``hpcdist run --ps 1 --workers 3 --worker-restarts 1 ps_ft_slurm.py [FUNCTIONS SECONDS]``
inside a two-node allocation: each job is a step. With ``FT_DIE_ON=node-b`` every worker that
runs on node-b SIGKILLs itself in its first function (its first start only,
``HPCDIST_RESTART_COUNT=0``); the launcher restarts it and the functions it was running go back
on the queue. FUNCTIONS functions (60) of SECONDS each (0.02) add 1 to a variable: all must
finish and the variable must count every run (at-least-once: >= FUNCTIONS). Prints ``JOINED``
once every worker ran a function, and where the functions ran.
"""

import os
import signal
import socket
import sys
import time

import hpcdist as hd

FUNCTIONS = int(sys.argv[1]) if len(sys.argv) > 1 else 60
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 0.02
DIE_ON = os.environ.get("FT_DIE_ON")
strategy = hd.ParameterServerStrategy()
coordinator = hd.ClusterCoordinator(strategy)
with strategy.scope():
    counter = hd.Variable(0.0)
print(f"FT_STARTED on {socket.gethostname()}", flush=True)  # progress, for a job that hangs


def check(name, ok, detail=""):
    print(f"CHECK {name} {'PASS' if ok else 'FAIL ' + str(detail)}", flush=True)


def step():
    """Count one run; a first-start worker on host DIE_ON dies instead."""
    if socket.gethostname() == DIE_ON and os.environ.get("HPCDIST_RESTART_COUNT") == "0":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(SECONDS)
    counter.assign_add(1.0)
    return f"{socket.gethostname()} {os.getpid()}"


def where():
    time.sleep(0.1)
    return f"{socket.gethostname()} {os.getpid()}"


if DIE_ON is None:  # every worker has joined: the test may now take a node away
    seen = set()
    while len(seen) < 3:
        seen |= {rv.fetch() for rv in [coordinator.schedule(where) for _ in range(6)]}
    print(f"JOINED {' | '.join(sorted(seen))}", flush=True)
results = [coordinator.schedule(step) for _ in range(FUNCTIONS)]
print(f"FT_SCHEDULED {FUNCTIONS}", flush=True)
coordinator.join()
ran_on = sorted({rv.fetch() for rv in results})
print(f"RAN_ON {' | '.join(ran_on)}", flush=True)
print(f"COORDINATOR {socket.gethostname()}", flush=True)
check("slurm_every_function", len(ran_on) >= 1 and all(rv.fetch() for rv in results))
check("slurm_counted", float(counter.numpy()) >= FUNCTIONS, float(counter.numpy()))
