"""The exit codes hpcdist ends a job with, in one place (launchers and restarts read them).

Importing this module starts nothing (no MPI): ``hpcdist run`` uses it in the launching process.
"""

__all__ = ["ABORT_EXIT_CODE", "EXIT_DEADLINE_CODE", "PREEMPTION_EXIT_CODE"]

#: A rank died of an uncaught exception and the job was aborted (``MPI_Abort``).
ABORT_EXIT_CODE = 17
#: Some ranks did not reach the end of the program within the deadline; the job was aborted.
EXIT_DEADLINE_CODE = 18
#: Every rank exited after a preemption checkpoint (Slurm requeues the job; no restart needed).
PREEMPTION_EXIT_CODE = 42
