"""The checkpoint protocol: what an object declares so that `hpcdist.Checkpoint` can save it.

A checkpoint never looks inside the objects it saves (Keras 3's ``save_own_variables``, TF's
trackable children and slot variables). Each object says what it holds through the protocols
below, and the checkpoint names every value by its place:

- a `CheckpointVariable` passed as ``name=`` is saved at ``name``;
- a `Trackable`'s children are saved at ``name/<key>``, nested trackables recursively
  (``model/weights/3``, ``optimizer/iterations``, ``metric/state/0``);
- a `SlotTrackable`'s slot variables are saved at ``name/slots/<slot>/<primary path>``, where
  ``<primary path>`` is where the slot's primary variable is saved in the same checkpoint
  (``optimizer/slots/m/model/weights/3``); slots of variables not in the checkpoint are left out;
- a `StateTrackable`'s arrays are saved at ``name/state/<key>`` (a distributed iterator's
  position: ``iterator/state/steps``).

Restoring assigns each saved value to the same place through `CheckpointVariable.assign`, so a
checkpoint restores into freshly built objects of the same structure. The protocols are
structural (`typing.Protocol`): an object takes part by having the methods, whatever its class.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "CheckpointVariable",
    "SlicedValue",
    "SlotTrackable",
    "StateTrackable",
    "Trackable",
    "is_checkpointable",
]


@runtime_checkable
class SlicedValue(Protocol):
    """A value too large to hold at once, given as consecutive pieces along its first axis.

    Attributes:
        shape: The whole value's shape.
        dtype: Its dtype.
    """

    shape: tuple[int, ...]
    dtype: np.dtype

    def slices(self) -> Iterator[np.ndarray]:
        """The pieces in order; together they cover ``shape[0]`` rows."""
        ...


@runtime_checkable
class CheckpointVariable(Protocol):
    """A variable whose whole logical value a checkpoint saves and assigns back.

    `hpcdist.core.Variable` and every strategy's variables implement it.
    """

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical shape (a restored value must have it)."""
        ...

    def checkpoint_value(self) -> np.ndarray | SlicedValue:
        """The whole logical value on the host, without a copy where possible.

        The array may be the variable's own storage: read it before the variable changes. A
        variable too large for one process returns a `SlicedValue` instead. Reading can be a
        collective (a sync-on-read variable reduces its copies): every rank calls it.
        """
        ...

    def assign(self, value: Any, read_value: bool = True) -> Any:
        """Set the whole logical value (a restore calls it with ``read_value=False``)."""
        ...


@runtime_checkable
class Trackable(Protocol):
    """An object that saves named variables and nested objects (layers, models, metrics)."""

    def checkpoint_children(self) -> dict[str, Any]:
        """The variables and nested checkpointable objects to save, by relative path.

        Returns:
            ``{key: child}``: ``key`` is a path relative to this object (it may contain
            ``/``, e.g. ``"weights/3"``); ``child`` is a `CheckpointVariable` or an object
            implementing one of this module's protocols (saved under ``<path>/<key>/...``).
            Called again after `SlotTrackable.build_checkpoint_slots`, so the children may
            grow as the object builds its state.
        """
        ...


@runtime_checkable
class SlotTrackable(Trackable, Protocol):
    """A `Trackable` holding one slot variable per (slot, primary variable) (optimizers)."""

    def checkpoint_slots(self) -> list[tuple[str, Any, Any]]:
        """Every slot variable as ``(slot_name, primary_variable, slot_variable)``.

        The slot is saved at ``<path>/slots/<slot_name>/<path of primary_variable>`` when the
        primary variable is saved in the same checkpoint (matched by
        `hpcdist.core.variables.variable_key`).
        """
        ...

    def build_checkpoint_slots(self, primaries: list[Any]) -> None:
        """Create the state a restore is about to fill, before the object built it itself.

        Called before restoring when the file holds values under this object's path, with the
        primary variables whose slots the file has (possibly none): afterwards
        `checkpoint_children` and `checkpoint_slots` list the variables to assign.
        """
        ...


@runtime_checkable
class StateTrackable(Protocol):
    """An object whose state is a few arrays rather than variables (dataset iterators)."""

    def checkpoint_state(self) -> dict[str, np.ndarray]:
        """The state to save, by key (saved at ``<path>/state/<key>``)."""
        ...

    def restore_state(self, state: dict[str, Any]) -> None:
        """Return to a saved state (the arrays `checkpoint_state` returned, by key)."""
        ...


def is_checkpointable(obj: Any) -> bool:
    """Whether ``obj`` implements at least one of the checkpoint protocols."""
    return isinstance(obj, (CheckpointVariable, Trackable, StateTrackable))
