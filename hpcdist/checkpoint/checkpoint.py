"""`Checkpoint`: save and restore variables, models, optimizers, metrics and counters.

Every rank calls `save`/`restore` (reading some variables is collective: sync-on-read values are
reduced); the chief writes the file, and every rank reads it. Objects are found by their place
in the checkpoint: ``model/weights/3``, ``optimizer/slots/m/model/weights/3``,
``optimizer/iterations``, ``save_counter``; so a checkpoint restores into freshly built objects
of the same structure, on any number of ranks (values are whole logical tensors).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
from typing import Any

import numpy as np

from hpcdist.checkpoint.format import CheckpointError, read_arrays, write_arrays
from hpcdist.core import context
from hpcdist.core.variables import Variable, variable_key
from hpcdist.log import get_logger
from hpcdist.utils.xp import to_numpy

__all__ = ["Checkpoint", "CheckpointLoadStatus", "CheckpointOptions"]


@dataclasses.dataclass(frozen=True)
class CheckpointOptions:
    """Options of `Checkpoint.save` / `write`.

    Args:
        experimental_enable_async_checkpoint: Snapshot values to host memory and write the file
            on a background thread; `Checkpoint.sync` (or the next save) waits for it.
    """

    experimental_enable_async_checkpoint: bool = False


def _world() -> Any:
    """The world communicator, or None on one rank and on a parameter-server coordinator.

    A parameter-server coordinator is the only rank running the program: no collectives.
    """
    from mpi4py import MPI

    from hpcdist.strategies.ps.strategy import coordinator_only

    if coordinator_only():
        return None
    if MPI.COMM_WORLD.Get_size() > 1:
        from hpcdist.comm import world

        return world()
    return None


class CheckpointLoadStatus:
    """What a restore matched (TF's load status).

    Attributes:
        path: The file read.
        missing: Object paths that had no value in the file.
        unused: Values in the file that no object took.
    """

    def __init__(self, path: str, missing: list[str], unused: list[str]) -> None:
        self.path, self.missing, self.unused = path, missing, unused

    def assert_consumed(self) -> CheckpointLoadStatus:
        """Every value was used and every object restored.

        Raises:
            AssertionError: Names what was left over on either side.
        """
        if self.missing or self.unused:
            raise AssertionError(
                f"checkpoint {self.path!r} did not match: objects without a value {self.missing}; "
                f"values without an object {self.unused}"
            )
        return self

    def assert_existing_objects_matched(self) -> CheckpointLoadStatus:
        """Every object got a value (values left over in the file are fine).

        Raises:
            AssertionError: Names the objects without a value.
        """
        if self.missing:
            raise AssertionError(f"checkpoint {self.path!r} has no value for {self.missing}")
        return self

    def expect_partial(self) -> CheckpointLoadStatus:
        """Silence the warning about a partial match."""
        return self


def _is_optimizer(obj: Any) -> bool:
    from hpcdist.nn.optimizers import Optimizer

    return isinstance(obj, Optimizer)


class Checkpoint:
    """A set of named objects saved and restored together.

    Args:
        **trackables: Variables, models/layers (``weights``), optimizers (iterations and slots),
            metrics, or any object with ``checkpoint_state() -> dict[str, array]`` and
            ``restore_state(dict)`` (e.g. dataset iterators).

    Raises:
        ValueError: A name is reserved or an object cannot be checkpointed.
    """

    def __init__(self, **trackables: Any) -> None:
        if "save_counter" in trackables:
            raise ValueError("'save_counter' is reserved")
        for name, obj in trackables.items():
            if not self._supported(obj):
                raise ValueError(f"cannot checkpoint {name}={type(obj).__name__}")
        self._trackables = dict(trackables)
        self.save_counter = context.get_strategy().Variable(
            np.int64(0), name="save_counter", trainable=False
        )
        self._pending: concurrent.futures.Future | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    @staticmethod
    def _supported(obj: Any) -> bool:
        return (
            isinstance(obj, Variable)
            or hasattr(obj, "weights")
            or _is_optimizer(obj)
            or hasattr(obj, "checkpoint_state")
            or (hasattr(obj, "variables") and hasattr(obj, "reset_state"))
        )

    # -- object graph -------------------------------------------------------------------------

    def _variables(self) -> dict[str, Any]:
        """Path -> variable for every variable reachable (optimizer slots included)."""
        out: dict[str, Any] = {"save_counter": self.save_counter}
        by_id: dict[Any, str] = {}
        optimizers = []
        for name, obj in self._trackables.items():
            if isinstance(obj, Variable):
                out[name] = obj
            elif _is_optimizer(obj):
                optimizers.append((name, obj))
                continue
            elif hasattr(obj, "weights"):
                for i, w in enumerate(obj.weights):
                    out[f"{name}/weights/{i}"] = w
            elif hasattr(obj, "variables") and hasattr(obj, "reset_state"):  # metrics
                for i, w in enumerate(obj.variables):
                    out[f"{name}/state/{i}"] = w
        for path, var in list(out.items()):
            by_id.setdefault(variable_key(var), path)
        for name, opt in optimizers:
            if opt.iterations is not None:
                out[f"{name}/iterations"] = opt.iterations
            for (var_id, slot), slot_var in opt._slots.items():
                if var_id in by_id:
                    out[f"{name}/slots/{slot}/{by_id[var_id]}"] = slot_var
        return out

    def _snapshot(self, copy: bool) -> dict[str, np.ndarray]:
        """Current values; without ``copy`` they may be the variables' own arrays (write now)."""
        arrays = {
            path: np.array(to_numpy(var._value()), copy=True)
            if copy
            else getattr(var, "checkpoint_slices", None) or to_numpy(var._value())
            for path, var in self._variables().items()
        }
        for name, obj in self._trackables.items():
            if hasattr(obj, "checkpoint_state"):
                for key, value in obj.checkpoint_state().items():
                    arrays[f"{name}/state/{key}"] = np.asarray(value)
        return arrays

    # -- saving -------------------------------------------------------------------------------

    def write(self, file_prefix: str, options: CheckpointOptions | None = None) -> str:
        """Write a checkpoint to ``file_prefix + ".h5"`` without touching `save_counter`.

        Collective: every rank calls it; the chief writes.

        Returns:
            The file path.
        """
        path = file_prefix if file_prefix.endswith(".h5") else f"{file_prefix}.h5"
        self.sync()
        is_async = options is not None and options.experimental_enable_async_checkpoint
        arrays = self._snapshot(copy=is_async)  # async: a host copy, training may go on
        comm = _world()
        if comm is None or comm.rank == 0:
            if options is not None and options.experimental_enable_async_checkpoint:
                if self._executor is None:
                    self._executor = concurrent.futures.ThreadPoolExecutor(1, "hpcdist-ckpt")
                self._pending = self._executor.submit(write_arrays, path, arrays)
            else:
                write_arrays(path, arrays)
        if comm is not None and not (options and options.experimental_enable_async_checkpoint):
            comm.barrier()  # the file exists for everybody when save returns
        return path

    def save(self, file_prefix: str, options: CheckpointOptions | None = None) -> str:
        """Increment `save_counter` and write ``file_prefix-N.h5``; returns the path."""
        self.save_counter.assign_add(1, read_value=False)
        return self.write(f"{file_prefix}-{int(self.save_counter.numpy())}", options)

    def sync(self) -> None:
        """Wait for an asynchronous write to finish (re-raising its error)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    wait = sync

    # -- restoring ----------------------------------------------------------------------------

    def read(self, save_path: str) -> CheckpointLoadStatus:
        """Restore every object found in ``save_path`` except `save_counter`."""
        return self._restore(save_path, with_counter=False)

    def restore(self, save_path: str) -> CheckpointLoadStatus:
        """Restore every object (and `save_counter`) from ``save_path``.

        Raises:
            CheckpointError: The file is missing, truncated or corrupt (names the file).
        """
        return self._restore(save_path, with_counter=True)

    def _restore(self, save_path: str, with_counter: bool) -> CheckpointLoadStatus:
        self.sync()
        path = (
            save_path
            if save_path.endswith(".h5") or os.path.exists(save_path)
            else f"{save_path}.h5"
        )
        arrays, _ = read_arrays(path)
        self._build_optimizer_slots(arrays)
        variables = self._variables()
        used: set[str] = set()
        missing = []
        for p, var in variables.items():
            if p == "save_counter" and not with_counter:
                used.add(p)
                continue
            if p not in arrays:
                missing.append(p)
                continue
            value = arrays[p]
            if tuple(value.shape) != tuple(var.shape):
                raise CheckpointError(
                    f"checkpoint {path!r}: {p} has shape {value.shape}, the object has {var.shape}"
                )
            var.assign(value, read_value=False)
            used.add(p)
        for name, obj in self._trackables.items():
            if hasattr(obj, "restore_state"):
                prefix = f"{name}/state/"
                state = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
                if state:
                    obj.restore_state(state)
                    used.update(prefix + k for k in state)
                else:
                    missing.append(prefix)
        unused = sorted(set(arrays) - used)
        status = CheckpointLoadStatus(path, sorted(missing), unused)
        if missing or unused:
            get_logger().debug(
                "partial restore from %s: missing %s, unused %s", path, missing, unused
            )
        return status

    def _build_optimizer_slots(self, arrays: dict[str, np.ndarray]) -> None:
        """Create optimizer state that the file has but the optimizer has not built yet."""
        base = self._variables()
        for name, obj in self._trackables.items():
            if not _is_optimizer(obj):
                continue
            prefix = f"{name}/slots/"
            targets = sorted(
                {k[len(prefix) :].split("/", 1)[1] for k in arrays if k.startswith(prefix)}
            )
            variables = [base[t] for t in targets if t in base]
            if variables or f"{name}/iterations" in arrays:
                obj._build(variables)
