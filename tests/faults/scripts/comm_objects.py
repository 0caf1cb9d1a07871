"""Object collectives where one rank's object cannot be pickled: every rank must raise.

Each rank prints one line per call (``rank R CALL raised TYPE: MESSAGE`` or ``... returned``);
after the failures the communicator must still work (``rank R usable``).
"""

import threading

import hpcdist as hd

comm = hd.comm.world()
bad = comm.size - 1
lock = threading.Lock()
calls = {
    "allgather_object": lambda: comm.allgather_object(lock if comm.rank == bad else comm.rank),
    "broadcast_object": lambda: comm.broadcast_object(
        (lambda: 0) if comm.rank == bad else None, root=bad
    ),
}
for name, call in calls.items():
    try:
        call()
        print(f"rank {comm.rank} {name} returned", flush=True)
    except Exception as exc:
        print(f"rank {comm.rank} {name} raised {type(exc).__name__}: {exc}", flush=True)
assert comm.allgather_object(comm.rank) == list(range(comm.size))
assert comm.broadcast_object("from bad" if comm.rank == bad else None, root=bad) == "from bad"
print(f"rank {comm.rank} usable", flush=True)
