"""What ``hpcdist info`` reports: the MPI library, ranks and nodes, GPUs, settings."""

from __future__ import annotations

import importlib.util
import os
import sys

import h5py
import mpi4py
import numpy as np
from mpi4py import MPI

from hpcdist import comm as hd_comm
from hpcdist import core as _core  # noqa: F401  (sets the heap's thresholds as a program does)
from hpcdist._version import __version__
from hpcdist.cluster import resolve
from hpcdist.cluster.gpus import pick_gpu, visible_gpu_count
from hpcdist.settings import get_settings
from hpcdist.utils import heap

__all__ = ["info_lines"]

_THREAD_LEVELS = {0: "single", 1: "funneled", 2: "serialized", 3: "multiple"}


def _cuda_report() -> tuple[str, str]:
    if importlib.util.find_spec("cupy") is None:
        return "no (CuPy not installed)", "no (CuPy not installed)"
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        cuda = f"yes ({count} device(s), runtime {cupy.cuda.runtime.runtimeGetVersion()})"
    except Exception as exc:  # no driver or no device
        return f"no ({type(exc).__name__}: {exc})", "no"
    try:
        from cupy.cuda import nccl

        return cuda, f"yes (NCCL {nccl.get_version()})"
    except Exception as exc:
        return cuda, f"no ({type(exc).__name__})"


def _cuda_aware_mpi() -> str:
    if get_settings().cuda_aware_mpi:
        return "yes (HPCDIST_CUDA_AWARE_MPI=1: GPU buffers go to MPI directly)"
    hint = " (the library mentions CUDA: try HPCDIST_CUDA_AWARE_MPI=1)"
    mentions = "CUDA" in MPI.Get_library_version().upper()
    return "no: GPU arrays not carried by NCCL are staged through pinned host memory" + (
        hint if mentions else ""
    )


def _gpu_binding(local_rank: int) -> str:
    count = visible_gpu_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
    if count == 0:
        return f"none (no visible GPU; CUDA_VISIBLE_DEVICES={visible})"
    try:
        device = pick_gpu(local_rank, count, get_settings().gpu)
    except ValueError as exc:
        return f"invalid: {exc}"
    return (
        f"local rank {local_rank} -> CUDA device {device} of {count} visible "
        f"(CUDA_VISIBLE_DEVICES={visible})"
    )


def info_lines() -> list[str]:
    """Return the lines ``hpcdist info`` prints (collective when several ranks run it)."""
    resolver = resolve()
    comm = hd_comm.world()
    cuda, nccl = _cuda_report()
    hosts = sorted(set(comm.layout.hosts))
    lines = [
        f"hpcdist {__version__} (python {sys.version.split()[0]}, numpy {np.__version__}, "
        f"mpi4py {mpi4py.__version__}, h5py {h5py.version.version})",
        f"MPI library:      {MPI.Get_library_version().splitlines()[0].strip()}",
        f"MPI standard:     {'.'.join(map(str, MPI.Get_version()))}",
        f"thread level:     {_THREAD_LEVELS.get(MPI.Query_thread(), MPI.Query_thread())}",
        f"ranks:            {comm.size} on {comm.num_nodes} node(s) ({', '.join(hosts)})",
        f"resolver:         {type(resolver).__name__} "
        f"(task {resolver.task_type}:{resolver.task_id}, chief={resolver.is_chief})",
        f"local ranks:      {comm.local_size} on this node",
        f"CUDA:             {cuda}",
        f"NCCL:             {nccl}",
        f"GPU binding:      {_gpu_binding(resolver.local_rank)}",
        f"CUDA-aware MPI:   {_cuda_aware_mpi()}",
        f"h5py parallel:    {'yes (mpio driver)' if h5py.get_config().mpi else 'no (serial HDF5)'}",
        f"freed memory:     {heap.status()}",
        f"settings:         {get_settings()}",
    ]
    return lines
