"""Some ranks never create the communicator (or create it late); the others must not hang.

argv[1]: what is created: ``world`` (`hd.comm.world()`), ``channel`` (a ``p2p.Channel`` over
the world), ``sub`` (a `Communicator` over ``COMM_WORLD.Split(rank % 2)``) or ``window`` (an
``rma.Window`` of 8 bytes per rank over a ``p2p.Channel`` that every rank created first).
argv[2]: the world ranks that do not create it, comma-separated (``2``, ``0,2``).
argv[3]: what they do: ``never`` (sleep 60 s, then exit without creating it) or ``late:S``
(create it S seconds late).
argv[4]: what the others do with their `DeadlineExceededError`: ``catch`` (print it, then
``sys.exit(1)``) or ``raise`` (print it, then re-raise it, uncaught).

Every rank prints its pid (the test kills what is left). With ``late``, every rank prints the
sum of an all-reduce and whether a message is left in ``COMM_WORLD``'s queue afterwards (for
``window``, or in the channel's).
"""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import hpcdist as hd
from hpcdist.comm.p2p import Channel
from hpcdist.comm.rma import Window


def say(line: str) -> None:
    """Print ``line`` in one write, so that other ranks' lines cannot land inside it."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


what, skipped, how, others = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rank = MPI.COMM_WORLD.Get_rank()
say(f"rank {rank} pid {os.getpid()}")
parent = MPI.COMM_WORLD.Split(rank % 2, rank) if what == "sub" else MPI.COMM_WORLD
channel = Channel() if what == "window" else None
MPI.COMM_WORLD.Barrier()  # every rank is in the job before the clock starts

if rank in {int(r) for r in skipped.split(",")}:
    if how == "never":
        say(f"rank {rank} does not create the {what} communicator")
        time.sleep(60)
        sys.exit(0)
    time.sleep(float(how.split(":")[1]))


def create() -> object:
    if what == "world":
        return hd.comm.world()
    if what == "channel":
        return Channel()
    if what == "window":
        return Window.allocate(channel, 8)
    return hd.comm.Communicator(parent)


start = time.monotonic()
try:
    made = create()
except hd.errors.DeadlineExceededError as exc:
    say(
        f"rank {rank} DeadlineExceededError missing={list(exc.missing_ranks)} after "
        f"{time.monotonic() - start:.2f} s at {time.time():.3f}: {exc}"
    )
    if others == "catch":
        sys.exit(1)
    raise
say(f"rank {rank} created the {what} communicator in {time.monotonic() - start:.2f} s")
if what == "channel":
    made.barrier()
    made.free()
left_in_channel = False
if what == "window":
    made.free()
    channel.barrier()  # every rank's announcements, if any, were sent before it
    left_in_channel = channel.comm.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
    channel.free()
if what in ("channel", "window"):
    total = hd.comm.world().allreduce(np.ones(1))[0]
else:
    total = made.allreduce(np.ones(1))[0]
MPI.COMM_WORLD.Barrier()
left = MPI.COMM_WORLD.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG) or left_in_channel
say(f"rank {rank} sum {total:g} leftover {left}")
