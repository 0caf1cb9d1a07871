"""The fault-tolerant parameter-server launch: the launch file each job gets, and its resolver.

``hpcdist run --ps P --workers W`` starts a **server job** (the coordinator and ``P`` ps
ranks) and one job per worker. Each job's environment names its launch file
(``HPCDIST_PS_LAUNCH``): a JSON object, readable by its owner only (0600, in a 0700 directory),
with the job's role (``"server"`` or ``"worker"``), the worker's index, the number of ps and
workers, the job's secret (hex) and where the coordinator publishes its admission address.
`launched_resolver` turns it into this process's task: in the server job rank 0 is
``chief:0`` and rank ``r`` is ``ps:r-1``; a worker job's one rank is ``worker:<index>``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

from mpi4py import MPI

from hpcdist.cluster.simple import SimpleClusterResolver
from hpcdist.errors import ClusterConfigError
from hpcdist.utils.files import write_private_text

__all__ = ["PSLaunch", "launched_resolver", "read_launch", "write_launch"]

_ROLES = ("server", "worker")


@dataclasses.dataclass(frozen=True)
class PSLaunch:
    """What one job of a fault-tolerant parameter-server launch knows about the launch.

    Attributes:
        role: ``"server"`` (coordinator + ps ranks) or ``"worker"`` (one worker).
        index: The worker's index (0 in the server job).
        num_ps: Number of ps ranks.
        num_workers: Number of worker tasks.
        secret: The job's secret (hex); a peer is admitted only after proving it.
        address_file: Where the coordinator writes ``host port`` of its admission socket.
        bind: The address the admission socket binds to (an address of the job's hosts);
            empty: the address of the coordinator's host name (workers on other nodes).
    """

    role: str
    index: int
    num_ps: int
    num_workers: int
    secret: str
    address_file: str
    bind: str = "127.0.0.1"


def write_launch(path: str | os.PathLike[str], launch: PSLaunch) -> None:
    """Write ``launch`` to ``path``, readable and writable by this user only (0600)."""
    write_private_text(path, json.dumps(dataclasses.asdict(launch)))


def read_launch(path: str | os.PathLike[str]) -> PSLaunch:
    """The launch file at ``path``.

    Raises:
        ClusterConfigError: The file is missing, readable by others, or not a launch file
            (names what was expected and what was found).
    """
    try:
        mode = os.stat(path).st_mode
        text = Path(path).read_text()
    except OSError as exc:
        raise ClusterConfigError(f"HPCDIST_PS_LAUNCH={path}: cannot read it: {exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ClusterConfigError(
            f"HPCDIST_PS_LAUNCH={path}: expected a file only its owner can read (0600), "
            f"got mode {stat.S_IMODE(mode):o}: it holds the job's secret"
        )
    try:
        launch = PSLaunch(**json.loads(text))
    except (TypeError, ValueError) as exc:
        raise ClusterConfigError(
            f"HPCDIST_PS_LAUNCH={path}: expected the launch file of `hpcdist run --workers`: {exc}"
        ) from None
    if launch.role not in _ROLES or launch.num_ps < 1 or launch.num_workers < 1:
        raise ClusterConfigError(
            f"HPCDIST_PS_LAUNCH={path}: expected role in {_ROLES}, num_ps >= 1 and "
            f"num_workers >= 1, got role={launch.role!r}, num_ps={launch.num_ps}, "
            f"num_workers={launch.num_workers}"
        )
    return launch


def launched_resolver(launch: PSLaunch) -> SimpleClusterResolver:
    """This process's task in the launch (see the module docstring).

    Raises:
        ClusterConfigError: The server job does not have ``1 + num_ps`` ranks, or a worker job
            has more than one rank.
    """
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    spec = {
        "chief": ["localhost:0"],
        "ps": [f"localhost:{i + 1}" for i in range(launch.num_ps)],
        "worker": [f"localhost:{launch.num_ps + 1 + i}" for i in range(launch.num_workers)],
    }
    if launch.role == "server":
        if size != 1 + launch.num_ps:
            raise ClusterConfigError(
                f"the server job of `hpcdist run --ps {launch.num_ps}` expected "
                f"{1 + launch.num_ps} ranks (a coordinator and the ps), got {size}"
            )
        task = ("chief", 0) if rank == 0 else ("ps", rank - 1)
    else:
        if size != 1:
            raise ClusterConfigError(
                f"worker {launch.index}'s job expected 1 rank, got {size}: each worker of "
                "`hpcdist run --workers` is its own one-process MPI job"
            )
        task = ("worker", launch.index)
    return SimpleClusterResolver(spec, task_type=task[0], task_id=task[1], rank=rank)
