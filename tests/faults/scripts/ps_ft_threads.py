"""``hpcdist run --ps 1 --workers 1 ps_ft_threads.py OUT_DIR``, below MPI_THREAD_MULTIPLE.

Run with ``MPI4PY_RC_THREAD_LEVEL=serialized`` (every job of the launch: ``python -m hpcdist``
starts MPI before this script runs): every rank of the server job must raise the same
`ClusterConfigError` naming both of its ranks (printed as ``RAISED <rank> <message>``, then
exit code 3), and the launch must end with nothing left running.
"""

import os
import sys

import hpcdist as hd

try:
    hd.ParameterServerStrategy()
except hd.errors.ClusterConfigError as exc:
    sys.stdout.write(f"RAISED {os.environ.get('PMI_RANK')} {exc}\n")
    sys.stdout.flush()
    sys.exit(3)
print("NOT RAISED", flush=True)
