"""Who is who in a parameter-server job: the coordinator, the ps ranks and the workers."""

from __future__ import annotations

from hpcdist.errors import ClusterConfigError
from hpcdist.settings import get_settings

__all__ = ["Roles"]


class Roles:
    """Which rank is the coordinator, which are ps and workers (same on every rank).

    Args:
        coordinator: Rank of the coordinator.
        ps: Ranks of the parameter servers, by ps index.
        workers: Ranks of the workers, by worker index.
        size: Number of ranks in the job.
        jobs: Number of tasks of each job name (for messages); by default counted from the
            other arguments.
    """

    def __init__(
        self,
        coordinator: int,
        ps: list[int],
        workers: list[int],
        size: int,
        jobs: dict[str, int] | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.ps = list(ps)
        self.workers = list(workers)
        self.others = [r for r in range(size) if r != coordinator]
        self.jobs = (
            jobs if jobs is not None else {"chief": 1, "ps": len(ps), "worker": len(workers)}
        )

    @classmethod
    def from_tasks(cls, tasks: list[tuple[str, int]]) -> Roles:
        """The roles of a job whose rank ``r`` runs task ``tasks[r]`` (``(job name, index)``).

        Raises:
            ClusterConfigError: Fewer than 3 ranks, two ranks with the same task, not exactly
                one ``chief``, or no ``ps`` or ``worker`` task.
        """
        if len(tasks) < 3:
            raise ClusterConfigError(
                f"ParameterServerStrategy needs at least 3 ranks (a coordinator, a ps and a "
                f"worker), got {len(tasks)}: launch with e.g. `HPCDIST_NUM_PS=1 mpiexec -n 3`"
            )
        seen: dict[tuple[str, int], int] = {}
        for rank, task in enumerate(tasks):
            if task in seen:
                raise ClusterConfigError(
                    f"ranks {seen[task]} and {rank} both claim task {task[0]}:{task[1]}"
                )
            seen[task] = rank
        by_role: dict[str, list[tuple[int, int]]] = {}
        for rank, (role, index) in enumerate(tasks):
            by_role.setdefault(role, []).append((index, rank))
        jobs = {role: len(v) for role, v in sorted(by_role.items())}
        num_ps = get_settings().num_ps
        if num_ps is None:
            fix = (
                "set HPCDIST_NUM_PS=<n> (rank 0 coordinates, ranks 1..n are ps) or give the "
                "resolver jobs={'chief': 1, 'ps': n, 'worker': m}"
            )
        else:
            fix = (
                f"HPCDIST_NUM_PS={num_ps} applies only to resolvers built without jobs; give "
                f"this resolver jobs={{'chief': 1, 'ps': {num_ps}, 'worker': m}}"
            )
        chief = by_role.get("chief", [])
        if len(chief) != 1:
            raise ClusterConfigError(
                "ParameterServerStrategy needs exactly one chief task (the coordinator), got "
                f"jobs {jobs}; {fix}"
            )
        for role in ("ps", "worker"):
            if not by_role.get(role):
                raise ClusterConfigError(
                    f"ParameterServerStrategy needs at least one {role} task, got jobs {jobs} "
                    f"({len(tasks)} ranks); {fix}"
                )
        return cls(
            chief[0][1],
            [rank for _, rank in sorted(by_role["ps"])],
            [rank for _, rank in sorted(by_role["worker"])],
            len(tasks),
            jobs,
        )
