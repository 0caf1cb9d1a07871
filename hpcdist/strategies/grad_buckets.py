"""Gradient all-reduce overlapped with the backward pass (the bucketed reducer of torch's DDP).

Without overlap, a step all-reduces its gradients once the whole backward pass is done
(`StrategyExtended.batch_reduce_to` -> `Communicator.grouped_allreduce`). With it, the variables
are grouped into buckets of about ``HPCDIST_OVERLAP_BUCKET_BYTES`` bytes, from the last variable
to the first (gradients become final in that order, the last layer's first; the first bucket is
smaller, at most `FIRST_BUCKET_BYTES`, so communication starts early, as in DDP). The tape
reports each gradient as soon as it is final (``GradientTape.gradient(..., on_final=...)``); once
every gradient of a bucket is in, and every earlier bucket has been started, the bucket's
all-reduce starts on the communicator's background thread (`Communicator.grouped_allreduce_async`)
while the tape goes on with the earlier layers. `OverlappedReduction.finish` starts what is left
(buckets holding a sparse or an unconnected gradient) and waits for all of them.

Buckets start in bucket order on every rank, so all ranks issue the same collectives in the same
order. The sum of each element is the one of the non-overlapped path wherever the backend's
summation order does not depend on where the element sits in the message: the shared-memory
backend (on one node, and inside each node of the hierarchical one) adds the ranks in rank order
for every element, so the results are bitwise identical there (`implementation="ring"` or
``"mpi"`` at three or more ranks may round differently, as changing ``bytes_per_pack`` does).

Overlap applies to strategies with one replica per process and a communicator across processes
(`MultiWorkerMirroredStrategy` on several ranks). Several local replicas (`MirroredStrategy`)
run one after another, so their gradients are complete only after the last replica's backward
pass; they keep the fused reduction, as do `CentralStorageStrategy` and the parameter-server
strategy.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from hpcdist.comm.communicator import Communicator, Handle
from hpcdist.comm.options import CommunicationOptions
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.core.autodiff import IndexedSlices, Tensor
from hpcdist.settings import Settings, get_settings
from hpcdist.strategies.strategy import Strategy, StrategyExtended
from hpcdist.utils.xp import as_array

__all__ = ["FIRST_BUCKET_BYTES", "OverlappedReduction", "overlapped_reduction", "plan_buckets"]

#: Largest first bucket (DDP's ``_DEFAULT_FIRST_BUCKET_BYTES``).
FIRST_BUCKET_BYTES = 1 << 20
# One pack per dtype in each bucket: the bucket is the unit of fusion.
_ONE_PACK = CommunicationOptions(bytes_per_pack=0)


def plan_buckets(
    nbytes: Sequence[int], bucket_bytes: int, first_bytes: int = FIRST_BUCKET_BYTES
) -> list[list[int]]:
    """Group variables into buckets, walking them from the last to the first.

    A bucket closes once it holds at least its cap: ``min(first_bytes, bucket_bytes)`` for the
    first bucket, ``bucket_bytes`` for the others (0 puts every variable in its own bucket).

    Args:
        nbytes: Byte size of each variable, in the order of the variable list.
        bucket_bytes: Cap of the buckets after the first.
        first_bytes: Cap of the first bucket.

    Returns:
        Lists of variable indices, in the order the buckets start; indices descend in each.
    """
    buckets: list[list[int]] = []
    current: list[int] = []
    size = 0
    cap = min(first_bytes, bucket_bytes)
    for index in reversed(range(len(nbytes))):
        current.append(index)
        size += int(nbytes[index])
        if size >= cap:
            buckets.append(current)
            current, size, cap = [], 0, bucket_bytes
    if current:
        buckets.append(current)
    return buckets


@functools.lru_cache(maxsize=64)
def _cached_plan(nbytes: tuple[int, ...], bucket_bytes: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(b) for b in plan_buckets(nbytes, bucket_bytes))


def _dense(grad: Any) -> Any:
    """A gradient as one array (sparse gradients made dense, as the fused path does)."""
    if isinstance(grad, IndexedSlices):
        return grad.dense()
    if isinstance(grad, Tensor):
        return grad.value
    return as_array(grad)


class OverlappedReduction:
    """One step's SUM all-reduce of the gradients, started bucket by bucket.

    Pass `ready` as the tape's ``on_final``, then call `finish` with the gradients the tape
    returned.

    Args:
        communicator: Carries the all-reduces.
        plan: Buckets of variable indices, in the order they start (`plan_buckets`).
        count: Number of variables.
    """

    def __init__(
        self, communicator: Communicator, plan: Sequence[Sequence[int]], count: int
    ) -> None:
        self._comm = communicator
        self._plan = plan
        self._bucket_of = [0] * count
        for b, members in enumerate(plan):
            for index in members:
                self._bucket_of[index] = b
        self._missing = [len(members) for members in plan]
        self._grads: list[Any] = [None] * count
        self._started: list[tuple[list[int], Handle]] = []
        self._next = 0  # the first bucket not started yet

    @property
    def buckets_started(self) -> int:
        """How many buckets have started so far."""
        return self._next

    def ready(self, index: int, grad: Any) -> None:
        """Record that the gradient of variable ``index`` is final; start what is complete."""
        self._grads[index] = grad
        bucket = self._bucket_of[index]
        self._missing[bucket] -= 1
        while self._next < len(self._plan) and self._missing[self._next] <= 0:
            self._start(self._next)

    def _start(self, bucket: int) -> None:
        members = [i for i in self._plan[bucket] if self._grads[i] is not None]
        self._next = bucket + 1
        if members:
            arrays = [_dense(self._grads[i]) for i in members]
            handle = self._comm.grouped_allreduce_async(arrays, ReduceOp.SUM, _ONE_PACK)
            self._started.append((members, handle))

    def finish(self, grads: Sequence[Any]) -> list[Any]:
        """Start the buckets left, wait for every bucket, return the summed gradients.

        Args:
            grads: The gradients the tape returned (None where unconnected), in variable order.

        Returns:
            The gradients summed over all ranks, as dense arrays (None where ``grads`` is None).

        Raises:
            ValueError: ``grads`` does not have one entry per variable.
        """
        if len(grads) != len(self._grads):
            raise ValueError(
                f"expected one gradient per variable ({len(self._grads)}), got {len(grads)} on "
                f"rank {self._comm.rank}"
            )
        for index, grad in enumerate(grads):
            if self._grads[index] is None:
                self._grads[index] = grad
        while self._next < len(self._plan):
            self._start(self._next)
        out: list[Any] = [None] * len(self._grads)
        error: BaseException | None = None
        for members, handle in self._started:  # wait for all, even after an error
            try:
                reduced = handle.wait()
            except BaseException as exc:  # raised below, after waiting for the others
                error = error or exc
                continue
            for index, value in zip(members, reduced, strict=True):
                out[index] = value
        self._started.clear()
        if error is not None:
            raise error
        return out


def overlapped_reduction(
    strategy: Strategy, variables: Sequence[Any], settings: Settings | None = None
) -> OverlappedReduction | None:
    """The overlapped reduction of one step of ``strategy``, or None where it does not apply.

    It applies when ``HPCDIST_OVERLAP_GRADIENTS`` is on and the strategy is synchronous with one
    replica per process and a communicator across processes (see the module docstring).

    Args:
        strategy: The model's strategy.
        variables: The variables whose gradients the step computes.
        settings: Library settings; read from the environment by default.
    """
    ext = strategy.extended
    if type(ext) is not StrategyExtended or ext.communicator is None or ext.local_replicas != 1:
        return None
    settings = settings or get_settings()
    if not settings.overlap_gradients or not variables:
        return None
    nbytes = tuple(
        int(np.prod(v.shape, dtype=np.int64)) * np.dtype(v.dtype).itemsize for v in variables
    )
    plan = _cached_plan(nbytes, settings.overlap_bucket_bytes)
    return OverlappedReduction(ext.communicator, plan, len(variables))
