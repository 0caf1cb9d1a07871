"""No hpcdist collective at all: `python -m hpcdist script.py` must still abort the job."""

from mpi4py import MPI

if MPI.COMM_WORLD.rank == 2:
    raise ValueError("plain failure on rank 2")
MPI.COMM_WORLD.Barrier()
