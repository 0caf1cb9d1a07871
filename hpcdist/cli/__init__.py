"""The command-line layer: the ``hpcdist`` command and what only it uses.

``hpcdist info|run|bench|timeline`` (`hpcdist.cli.commands`), starting and stopping a job with
mpiexec or srun (`hpcdist.cli.launch`), ``--max-restarts`` (`hpcdist.cli.restarts`), the
fault-tolerant parameter-server launch ``--ps P --workers W`` (`hpcdist.cli.ps_launch`), the
report of ``hpcdist info`` (`hpcdist.cli.info`, the only module here that starts MPI, loaded
when ``info`` runs) and the summary of a recorded timeline (`hpcdist.cli.timeline_summary`).
``python -m hpcdist`` (`hpcdist.__main__`) and the ``hpcdist`` console script
(``hpcdist.cli:main``) enter here.
"""

from hpcdist.cli.commands import main
from hpcdist.cli.launch import launcher_command

__all__ = ["launcher_command", "main"]
