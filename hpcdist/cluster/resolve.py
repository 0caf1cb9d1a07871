"""`resolve()`: pick the resolver that describes how this process was launched."""

from __future__ import annotations

import os
from collections.abc import Mapping

from mpi4py import MPI

from hpcdist.cluster.base import ClusterResolver
from hpcdist.cluster.launched import launched_resolver, read_launch
from hpcdist.cluster.mpi import MPIClusterResolver
from hpcdist.cluster.simple import SimpleClusterResolver
from hpcdist.cluster.slurm import SlurmClusterResolver
from hpcdist.cluster.tfconfig import TFConfigClusterResolver
from hpcdist.errors import ClusterConfigError
from hpcdist.settings import get_settings

__all__ = ["resolve", "slurm_step_tasks"]


def slurm_step_tasks() -> int | None:
    """Number of tasks of the Slurm step this process belongs to, or None outside a step.

    Only ``srun`` steps set ``SLURM_STEP_NUM_TASKS``; a batch script running ``python`` directly
    is not a step of several tasks.
    """
    text = os.environ.get("SLURM_STEP_NUM_TASKS")
    if text is None or "SLURM_PROCID" not in os.environ:
        return None
    try:
        return int(text)
    except ValueError:
        raise ClusterConfigError(f"SLURM_STEP_NUM_TASKS={text!r} is not an integer") from None


def resolve(jobs: Mapping[str, int] | None = None) -> ClusterResolver:
    """Auto-detect the cluster: Slurm step > MPI launcher (size > 1) > ``TF_CONFIG`` > one process.

    Under ``hpcdist run --ps P --workers W`` (``HPCDIST_PS_LAUNCH`` set) the launch file says
    the task (`hpcdist.cluster.launched`), and ``jobs`` is not used.

    Args:
        jobs: ``{role: count}`` for the Slurm and MPI resolvers. Default: with
            ``HPCDIST_NUM_PS=n``, ``{"chief": 1, "ps": n, "worker": rest}`` (what
            `hpcdist.ParameterServerStrategy` uses without a resolver), else every rank a
            worker (see `hpcdist.cluster.base.default_jobs`).

    Returns:
        A resolver.

    Raises:
        ClusterConfigError: Slurm started several tasks but MPI sees one rank (``srun`` without
            ``--mpi=pmi2``), Slurm and MPI disagree on the number of tasks, or
            ``HPCDIST_NUM_PS`` leaves no worker.
    """
    launch = get_settings().ps_launch
    if launch is not None:
        return launched_resolver(read_launch(launch))
    size = MPI.COMM_WORLD.Get_size()
    step = slurm_step_tasks()
    if step is not None:
        if step > 1 and size == 1:
            raise ClusterConfigError(
                f"Slurm started {step} tasks (SLURM_STEP_NUM_TASKS={step}) but MPI sees a "
                "single rank in every process: srun did not connect the tasks to MPI. "
                "Run `srun --mpi=pmi2 ...` (the MPICH wheel; `--mpi=pmix` for Open MPI), or set "
                "MpiDefault=pmi2 in slurm.conf."
            )
        if step == size:
            return SlurmClusterResolver(jobs=jobs, auto_set_gpu=True)
        # mpirun/mpiexec inside an allocation: MPI knows the job, Slurm describes the allocation.
    if size > 1:
        return MPIClusterResolver(jobs=jobs)
    if os.environ.get("TF_CONFIG", "").strip():
        return TFConfigClusterResolver()
    return SimpleClusterResolver({"worker": ["localhost:8888"]}, task_type="worker", task_id=0)
