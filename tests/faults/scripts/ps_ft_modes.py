"""Small fault-tolerant parameter-server programs, run by tests/faults/test_ps_fault_tolerance.py.

``hpcdist run --ps 1 --workers W ps_ft_modes.py MODE OUT_DIR``:

* ``wait``: print ``READY`` and schedule sleeping functions until the launcher is signalled;
* ``one_ok``: functions run on every worker (``CHECK one_ok PASS``);
* ``hung``: worker 0 stops itself (SIGSTOP) in a function; the coordinator's deadline asks the
  launcher to kill it; it is restarted and the function runs again (``CHECK hung PASS``);
* ``one_left``: with no restarts left, SIGKILL worker 0; the remaining workers run the rest
  (``CHECK one_left PASS``);
* ``kill_ps``, ``kill_ps_schedule``: SIGKILL the last ps rank (a child of the coordinator's MPI
  proxy) while functions update variables on every ps: ``join`` (``schedule``) raises
  `UnavailableError` naming that ps, and so do the next ``join``, ``done`` and ``schedule``
  (``CHECK <mode> PASS``); the program then exits and the server job is aborted;
* ``kill_ps_block``: as ``kill_ps``, but the program then never calls the coordinator again
  (it sleeps 120 s, as one blocked on the dead ps would): 30 s after the death
  (``PS_FAILURE_ABORT_SECONDS``) the server job is aborted with the message naming the ps;
* ``ps_restart``: under ``--max-restarts 1``: the first attempt saves a checkpoint and loses a
  ps as ``kill_ps``; the second restores it and goes on (``CHECK ps_restart PASS``);
* ``stop_ps``: under ``--worker-restarts 1`` and a deadline: SIGSTOP the ps, then SIGKILL a
  worker; its replacement's admission waits for the ps, and at the deadline ``schedule``/``join``
  raise `UnavailableError` naming the stopped ps (``CHECK stop_ps PASS``); the program exits and
  the server job is aborted;
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
OUT = Path(sys.argv[2])
strategy = hd.ParameterServerStrategy()
coordinator = hd.ClusterCoordinator(strategy)
rt = coordinator_runtime()


def check(name, ok, detail=""):
    print(f"CHECK {name} {'PASS' if ok else 'FAIL ' + str(detail)}", flush=True)


def server_rank_pids():
    """The pid of each ps rank, in rank order: the ps processes, not their guards.

    (A guard's parent is hydra's proxy; the launch directory holds the ranks' own pid files.)
    """
    launch_dir = Path(os.environ["HPCDIST_PS_LAUNCH"]).parent
    files = [launch_dir / f"rank-{r}.pid" for r in range(1, 1 + len(rt.roles.ps))]
    return [int(f.read_text().split()[1]) for f in files]


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
elif MODE == "ps_restart" and os.environ.get("HPCDIST_RESTART_COUNT") == "1":
    # The second attempt of ``hpcdist run --max-restarts 1``: it restores the checkpoint the
    # first attempt saved before its ps died, and goes on from there.
    saved = float(np.load(OUT / "checkpoint.npy"))
    with strategy.scope():
        total = hd.Variable(np.float32(saved))
    coordinator.schedule(lambda: total.assign_add(np.float32(1)))
    coordinator.join()
    check("ps_restart", float(total.read_value()) == saved + 1 == 21, saved)
elif MODE in ("kill_ps", "kill_ps_schedule", "kill_ps_block", "ps_restart"):
    # testPSPreemptionErrorType, testJoinRaisesUnavailableErrorAtPsFailure,
    # testScheduleRaisesUnavailableErrorAtPsFailure: functions that update a variable on
    # every ps run; the last ps rank is SIGKILLed; join (or schedule) raises UnavailableError
    # naming it, within the deadline plus 2 s, and so does every later call.
    with strategy.scope():
        counters = [hd.Variable(np.float32(0)) for _ in rt.roles.ps]

    def inc():
        time.sleep(0.01)
        for c in counters:
            c.assign_add(np.float32(1))

    for _ in range(20):
        coordinator.schedule(inc)
    coordinator.join()
    np.save(OUT / "checkpoint.npy", counters[0].read_value())  # 20: the last checkpoint
    ps = server_rank_pids()
    victim = len(ps) - 1  # the last ps
    print("KILLING", ps[victim], flush=True)
    t0 = time.monotonic()
    os.kill(ps[victim], signal.SIGKILL)
    if MODE == "kill_ps_block":
        time.sleep(120)  # never back in schedule/join/done: only the abort timer ends this
        print("SURVIVED", flush=True)
        sys.exit(0)
    raised = None
    try:
        if MODE == "kill_ps_schedule":
            while time.monotonic() - t0 < 30:
                coordinator.schedule(inc)
                time.sleep(0.01)
        else:
            for _ in range(50):
                coordinator.schedule(inc)
            while time.monotonic() - t0 < 30:
                coordinator.join()
                coordinator.schedule(inc)
    except hd.errors.UnavailableError as exc:
        raised = exc
        named = f"ps {victim} (rank {victim + 1}" in str(exc)
        # One write of one line: hydra may end this process any moment, even between the
        # pieces of a print() on an unbuffered stdout.
        sys.stdout.write(f"RAISED_AFTER {time.monotonic() - t0:.3f} NAMED {named}\n")
        sys.stdout.flush()
    named = raised is not None and f"ps {victim} (rank {victim + 1}" in str(raised)
    check(MODE, named, raised)
    again = []
    for call in (coordinator.join, coordinator.done, lambda: coordinator.schedule(inc)):
        try:
            call()
        except hd.errors.UnavailableError as exc:
            again.append(str(exc))
    check(f"{MODE}_again", len(again) == 3 and all(f"ps {victim}" in a for a in again), again)
    sys.exit(0)  # a clean exit still ends the server job (aborted: MPI cannot end it in order)
elif MODE == "stop_ps":
    pids = set()
    while len(pids) < len(rt.roles.workers):
        pids |= {rv.fetch() for rv in [coordinator.schedule(slow_pid) for _ in range(8)]}
    ps = server_rank_pids()
    os.kill(ps[-1], signal.SIGSTOP)  # stopped, not dead: its socket stays open
    victim = min(pids)
    print("KILLING", victim, flush=True)
    t0 = time.monotonic()
    os.kill(victim, signal.SIGKILL)  # the launcher restarts it; its admission needs the ps
    raised = None
    try:
        while time.monotonic() - t0 < 60:
            coordinator.schedule(slow_pid)
            coordinator.join()
    except hd.errors.UnavailableError as exc:
        raised = exc
    sys.stdout.write(f"RAISED_AFTER {time.monotonic() - t0:.3f}\n")
    sys.stdout.flush()
    last = len(ps) - 1
    named = raised is not None and f"ps {last} (rank {last + 1}" in str(raised)
    check("stop_ps", named and "stopped or hung" in str(raised), raised)
    sys.exit(0)  # the server job is aborted: MPI cannot end it in order without the ps
elif MODE == "single":
    pid = coordinator.schedule(os.getpid).fetch()
    print("KILLING", pid, flush=True)
    os.kill(pid, signal.SIGKILL)
    time.sleep(30)
    print("SURVIVED", flush=True)
elif MODE == "one_ok":
    # Every worker present, and functions run on all of them.
    pids = set()
    deadline = time.monotonic() + 60
    while len(pids) < len(rt.roles.workers) and time.monotonic() < deadline:
        pids |= {rv.fetch() for rv in [coordinator.schedule(slow_pid) for _ in range(8)]}
    check("one_ok", len(pids) == len(rt.present_workers()) == len(rt.roles.workers), pids)
elif MODE == "hung":
    # Worker 0's first start stops itself (SIGSTOP) inside a function: at the deadline
    # (HPCDIST_TIMEOUT_SECONDS) the launcher kills and restarts it, and the function runs again.
    def stop_once():
        launch = os.environ.get("HPCDIST_PS_LAUNCH", "")
        if launch.endswith("worker-0.json") and os.environ.get("HPCDIST_RESTART_COUNT") == "0":
            os.kill(os.getpid(), signal.SIGSTOP)
        return os.getpid()

    pids = set()
    while len(pids) < len(rt.roles.workers):
        pids |= {rv.fetch() for rv in [coordinator.schedule(slow_pid) for _ in range(8)]}
    t0 = time.monotonic()
    rvs = [coordinator.schedule(stop_once) for _ in range(8)]
    coordinator.join()
    took = time.monotonic() - t0
    ran = [rv.fetch() for rv in rvs]
    deadline = float(os.environ["HPCDIST_TIMEOUT_SECONDS"])
    wait_deadline = time.monotonic() + 30
    while len(rt.present_workers()) < len(rt.roles.workers) and time.monotonic() < wait_deadline:
        coordinator.done()
        time.sleep(0.05)
    after = {coordinator.schedule(slow_pid).fetch() for _ in range(16)}
    ok = all(isinstance(pid, int) for pid in ran) and rt.deaths >= 1 and took >= deadline
    ok = ok and len(rt.present_workers()) == len(rt.roles.workers) and bool(after - pids)
    print("MEASURE hung_handled", f"{took:.3f}", flush=True)
    check("hung", ok, (ran, rt.deaths, took, rt.present_workers(), after, pids))
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
