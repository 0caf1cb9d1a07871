"""The object graph of a checkpoint: every saved value's path, found through the protocol.

Objects are walked only through `hpcdist.core.trackable`'s protocols; the paths follow the
layout documented there (``model/weights/3``, ``optimizer/slots/m/model/weights/3``,
``iterator/state/steps``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from hpcdist.core.trackable import (
    CheckpointVariable,
    SlotTrackable,
    StateTrackable,
    Trackable,
    is_checkpointable,
)
from hpcdist.core.variables import variable_key

__all__ = ["ObjectGraph", "collect", "describe_unsupported"]


@dataclasses.dataclass
class ObjectGraph:
    """What a checkpoint saves, by path.

    Attributes:
        variables: Path -> variable, slot variables included.
        states: Path -> object whose arrays are saved at ``<path>/state/<key>``.
        slot_holders: Path -> object holding slot variables (optimizers).
    """

    variables: dict[str, CheckpointVariable] = dataclasses.field(default_factory=dict)
    states: dict[str, StateTrackable] = dataclasses.field(default_factory=dict)
    slot_holders: dict[str, SlotTrackable] = dataclasses.field(default_factory=dict)


def describe_unsupported(path: str, obj: Any) -> str:
    """The error message for an object that implements none of the checkpoint protocols."""
    return (
        f"cannot checkpoint {path}={type(obj).__name__}: expected a variable "
        "(checkpoint_value() and assign()), an object with checkpoint_children(), or one with "
        "checkpoint_state() and restore_state() (see hpcdist.core.trackable)"
    )


def collect(roots: Mapping[str, Any]) -> ObjectGraph:
    """Walk ``roots`` (name -> object) and name every variable and state they save.

    Slots are named after the path of their primary variable: the first path, in the order of
    ``roots``, under which that variable is saved.

    Raises:
        ValueError: An object reached implements none of the protocols, or an object contains
            itself through `Trackable.checkpoint_children`.
    """
    graph = ObjectGraph()
    for name, obj in roots.items():
        _visit(name, obj, graph, ())
    primary_paths: dict[Any, str] = {}
    for path, var in graph.variables.items():
        primary_paths.setdefault(variable_key(var), path)
    for path, holder in graph.slot_holders.items():
        for slot, primary, slot_variable in holder.checkpoint_slots():
            target = primary_paths.get(variable_key(primary))
            if target is not None:
                graph.variables[f"{path}/slots/{slot}/{target}"] = slot_variable
    return graph


def _visit(path: str, obj: Any, graph: ObjectGraph, ancestors: tuple[int, ...]) -> None:
    if isinstance(obj, CheckpointVariable):
        graph.variables[path] = obj
        return
    if not is_checkpointable(obj):
        raise ValueError(describe_unsupported(path, obj))
    if id(obj) in ancestors:
        raise ValueError(f"cannot checkpoint {path}: the object contains itself")
    if isinstance(obj, Trackable):
        if isinstance(obj, SlotTrackable):
            graph.slot_holders[path] = obj
        for key, child in obj.checkpoint_children().items():
            _visit(f"{path}/{key}", child, graph, (*ancestors, id(obj)))
    if isinstance(obj, StateTrackable):
        graph.states[path] = obj
