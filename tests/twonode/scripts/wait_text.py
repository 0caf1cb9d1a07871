"""What a slow wait reports, on a real arrival board: a late rank vs data still moving.

Every rank publishes collective #5; rank 0 then waits (under a 0.3 s deadline that cannot be
met) in #5, where every rank has arrived, and in #6, which the last rank has not entered.
Prints one line per case on rank 0.
"""

import numpy as np
from mpi4py import MPI

from hpcdist.comm.checks import KINDS, Header, dtype_code
from hpcdist.comm.deadline import Deadline
from hpcdist.comm.envelope import ArrivalBoard
from hpcdist.errors import DeadlineExceededError

comm = MPI.COMM_WORLD.Dup()
board = ArrivalBoard(comm)
board.publish(5)
if comm.rank < comm.size - 1:
    board.publish(6)
comm.Barrier()
if comm.rank == 0:
    for seq, progress in ((5, None), (5, (1024, 4096)), (6, None)):
        header = Header(seq, KINDS["allreduce"], 1, dtype_code(np.dtype(np.float32)), (1024,))
        deadline = Deadline(0.3, None, header, board)
        if progress:
            deadline.moved(*progress)
        try:
            deadline.wait(lambda: False)
        except DeadlineExceededError as exc:
            print(f"seq {seq} missing={list(exc.missing_ranks)}: {exc}", flush=True)
        missing, unread, notes = deadline.report()
        print(f"seq {seq} warning: {deadline.situation(missing, unread, notes, error=False)}")
comm.Barrier()
board.free()
