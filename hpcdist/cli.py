"""The ``hpcdist`` command: ``info``, ``run`` and ``bench``."""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["info_lines", "launcher_command", "main"]

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
    from mpi4py import MPI

    from hpcdist.settings import get_settings

    if get_settings().cuda_aware_mpi:
        return "yes (HPCDIST_CUDA_AWARE_MPI=1: GPU buffers go to MPI directly)"
    hint = " (the library mentions CUDA: try HPCDIST_CUDA_AWARE_MPI=1)"
    mentions = "CUDA" in MPI.Get_library_version().upper()
    return "no: GPU arrays not carried by NCCL are staged through pinned host memory" + (
        hint if mentions else ""
    )


def _gpu_binding(local_rank: int) -> str:
    from hpcdist.cluster.gpus import pick_gpu, visible_gpu_count

    count = visible_gpu_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
    if count == 0:
        return f"none (no visible GPU; CUDA_VISIBLE_DEVICES={visible})"
    try:
        from hpcdist.settings import get_settings

        device = pick_gpu(local_rank, count, get_settings().gpu)
    except ValueError as exc:
        return f"invalid: {exc}"
    return (
        f"local rank {local_rank} -> CUDA device {device} of {count} visible "
        f"(CUDA_VISIBLE_DEVICES={visible})"
    )


def info_lines() -> list[str]:
    """Return the lines ``hpcdist info`` prints (collective when several ranks run it)."""
    import h5py
    import mpi4py
    import numpy as np
    from mpi4py import MPI

    import hpcdist
    from hpcdist.cluster import resolve

    resolver = resolve()
    comm = hpcdist.comm.world()
    cuda, nccl = _cuda_report()
    hosts = sorted(set(comm.layout.hosts))
    lines = [
        f"hpcdist {hpcdist.__version__} (python {sys.version.split()[0]}, numpy {np.__version__}, "
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
        f"settings:         {hpcdist.settings.get_settings()}",
    ]
    return lines


def launcher_command(
    nprocs: int, argv: list[str], environ: dict[str, str] | None = None
) -> list[str]:
    """The command that starts ``argv`` on ``nprocs`` ranks: srun inside Slurm, else mpiexec."""
    environ = os.environ if environ is None else environ
    python_prefix = [sys.executable, "-m", "hpcdist"] if argv and argv[0].endswith(".py") else []
    if "SLURM_JOB_ID" in environ and shutil.which("srun"):
        return ["srun", "--mpi=pmi2", "-n", str(nprocs), *python_prefix, *argv]
    local = Path(sys.executable).parent / "mpiexec"
    mpiexec = str(local) if local.exists() else shutil.which("mpiexec") or "mpiexec"
    return [mpiexec, "-n", str(nprocs), *python_prefix, *argv]


def _cmd_info(_: argparse.Namespace) -> int:
    from hpcdist.log import process_rank

    lines = info_lines()
    if process_rank()[0] == 0:
        print("\n".join(lines))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    command = launcher_command(args.n, [args.script, *args.args])
    return subprocess.call(command)


def _cmd_bench(args: argparse.Namespace) -> int:
    bench_dir = Path(__file__).resolve().parent.parent / "benchmarks"
    available = sorted(p.stem for p in bench_dir.glob("*.py") if not p.stem.startswith("_"))
    if not args.name:
        print("benchmarks: " + ", ".join(available))
        return 0
    if args.name not in available:
        print(
            f"unknown benchmark {args.name!r}; available: {', '.join(available)}", file=sys.stderr
        )
        return 2
    command = launcher_command(args.n, [str(bench_dir / f"{args.name}.py"), *args.args])
    return subprocess.call(command)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hpcdist`` command."""
    parser = argparse.ArgumentParser(prog="hpcdist", description="tf.distribute on MPI clusters")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="describe the MPI library, ranks, GPUs and the cluster")
    p.set_defaults(fn=_cmd_info)
    p = sub.add_parser("run", help="run a script on N ranks (srun in Slurm, else mpiexec)")
    p.add_argument("-n", type=int, required=True, help="number of ranks")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(fn=_cmd_run)
    p = sub.add_parser("bench", help="run a benchmark from benchmarks/ (list them without a name)")
    p.add_argument("name", nargs="?")
    p.add_argument("-n", type=int, default=2, help="number of ranks")
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(fn=_cmd_bench)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
