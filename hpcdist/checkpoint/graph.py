"""The object graph of a checkpoint: every saved value's path, found through the protocol.

Objects are walked only through `hpcdist.core.trackable`'s protocols; the paths follow the
layout documented there (``model/weights/3``, ``optimizer/slots/m/model/weights/3``,
``iterator/state/steps``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from hpcdist.checkpoint.format import CheckpointMismatchError
from hpcdist.core.trackable import (
    CheckpointVariable,
    SlotTrackable,
    StateTrackable,
    Trackable,
    is_checkpointable,
)
from hpcdist.core.variables import variable_key

__all__ = ["Match", "ObjectGraph", "collect", "describe_unsupported", "match_values"]


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


@dataclasses.dataclass
class Match:
    """What a restore will do, once every value was found to fit.

    Attributes:
        assignments: ``(variable, value)`` pairs to assign.
        states: ``(object, {key: array})`` pairs for `StateTrackable.restore_state`.
        missing: Object paths without a value in the file.
        unused: File values that no object takes.
    """

    assignments: list[tuple[CheckpointVariable, np.ndarray]]
    states: list[tuple[StateTrackable, dict[str, np.ndarray]]]
    missing: list[str]
    unused: list[str]


def match_values(
    path: str, arrays: Mapping[str, np.ndarray], graph: ObjectGraph, with_counter: bool
) -> Match:
    """Pair every value of a checkpoint with its object, changing nothing.

    Args:
        path: The file, for messages.
        arrays: What the file holds, by path.
        graph: The objects, from `collect`.
        with_counter: Whether ``save_counter`` is restored too.

    Raises:
        CheckpointMismatchError: A value's shape differs from its variable's, or a state's keys
            differ from its object's; lists every mismatch, each with the path and both sides.
    """
    assignments: list[tuple[CheckpointVariable, np.ndarray]] = []
    states: list[tuple[StateTrackable, dict[str, np.ndarray]]] = []
    used: set[str] = set()
    missing: list[str] = []
    wrong: list[str] = []
    for p, var in graph.variables.items():
        if p == "save_counter" and not with_counter:
            used.add(p)
        elif p not in arrays:
            missing.append(p)
        elif tuple(arrays[p].shape) != tuple(var.shape):
            wrong.append(
                f"{p} has shape {tuple(arrays[p].shape)} in the file, the object has "
                f"{tuple(var.shape)}"
            )
        else:
            assignments.append((var, arrays[p]))
            used.add(p)
    for name, obj in graph.states.items():
        prefix = f"{name}/state/"
        state = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
        if not state:
            missing.append(prefix)
            continue
        expected = sorted(obj.checkpoint_state())
        if sorted(state) != expected:
            wrong.append(
                f"{name} has state keys {sorted(state)} in the file, the object has {expected}"
            )
            continue
        states.append((obj, state))
        used.update(prefix + k for k in state)
    if wrong:
        raise CheckpointMismatchError(
            f"checkpoint {path!r} does not fit the objects (nothing was restored): "
            + "; ".join(wrong)
        )
    return Match(assignments, states, sorted(missing), sorted(set(arrays) - used))


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
