"""The last rank leaves the program while the others still need it.

argv[1] (how it leaves): ``early`` (its main function returns: exit status 0), ``caught`` (it
catches an error and calls ``sys.exit(1)``), ``clean`` (it leaves early, but the others need
no more collectives: the job must end normally).
argv[2] (what the others do with their `DeadlineExceededError`): ``catch`` (print it, then
``sys.exit(1)``) or ``raise`` (uncaught: the abort hook ends the job).
"""

import sys
import time

import numpy as np

import hpcdist as hd


def main() -> int:
    how, others = sys.argv[1], sys.argv[2]
    comm = hd.comm.world()
    comm.allreduce(np.ones(4))  # every rank is in the job
    leaver = comm.size - 1
    if comm.rank == leaver:
        print(f"rank {leaver} leaves at {time.time():.3f}", flush=True)
        if how == "caught":
            try:
                raise ValueError(f"boom on rank {leaver}")
            except ValueError:
                sys.exit(1)
        return 0
    if how == "clean":
        time.sleep(1)  # the others finish later, without the leaver
        return 0
    try:
        comm.allreduce(np.ones(4))
    except hd.errors.DeadlineExceededError as exc:
        print(f"rank {comm.rank} DeadlineExceededError: {exc}", flush=True)
        if others == "catch":
            sys.exit(1)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
