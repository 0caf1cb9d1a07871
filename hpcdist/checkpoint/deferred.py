"""Restores that wait for their objects, and the load status that reports them.

A value whose object is not built yet (a model before its first call) cannot be assigned when
the checkpoint is read; TF keeps it and assigns it when the object builds. `DeferredValues`
holds such values, `defer_until_built` wraps the objects' ``build`` so they restore on build,
and `CheckpointLoadStatus` (what `Checkpoint.restore` returns) lists what is still waiting.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["CheckpointLoadStatus", "DeferredValues", "defer_until_built"]


@dataclasses.dataclass
class DeferredValues:
    """Values of a restore that wait for their variables (``path`` is the file they are from)."""

    path: str
    values: dict[str, np.ndarray]


class CheckpointLoadStatus:
    """What a restore matched (TF's load status).

    Attributes:
        path: The file read.
        missing: Object paths that had no value in the file.
    """

    def __init__(self, path: str, missing: list[str], deferred: DeferredValues) -> None:
        self.path, self.missing = path, missing
        self._deferred = deferred

    @property
    def unused(self) -> list[str]:
        """Values in the file that no object took yet (deferred values leave once restored)."""
        return sorted(self._deferred.values)

    def assert_consumed(self) -> CheckpointLoadStatus:
        """Every value was used and every object restored.

        Raises:
            AssertionError: Names what was left over on either side.
        """
        unused = self.unused
        if self.missing or unused:
            raise AssertionError(
                f"checkpoint {self.path!r} did not match: objects without a value {self.missing}; "
                f"values without an object {unused}"
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


def defer_until_built(
    trackables: dict[str, Any], deferred: DeferredValues, restore: Callable[[], None]
) -> None:
    """Call ``restore`` when a root object with waiting values builds (TF's deferred restore).

    A root object that has values waiting, ``built`` False and a ``build`` method (a model or
    layer before its first call) gets its ``build`` wrapped, on the instance only: once the
    original returns, ``restore`` assigns every waiting value whose variable now exists (the
    optimizer's slots of the new variables included), and the wrapper removes itself.

    Args:
        trackables: The checkpoint's root objects by name.
        deferred: The values waiting (paths under the roots' names).
        restore: Assigns the waiting values whose variables exist.
    """
    for name, obj in trackables.items():
        if not any(p.startswith(f"{name}/") for p in deferred.values):
            continue
        if getattr(obj, "built", True) or not callable(getattr(obj, "build", None)):
            continue
        if isinstance(obj.build, _BuildThenRestore):
            continue  # wrapped by an earlier restore: it restores the newest values
        try:
            obj.build = _BuildThenRestore(obj, obj.build, restore)
        except (AttributeError, TypeError):  # __slots__ or a read-only attribute
            continue


class _BuildThenRestore:
    """An instance's ``build`` for a deferred restore: the original, then the waiting values.

    Set on the instance only; once the original returns it removes itself (the class's
    ``build`` is back) and assigns the values whose variables now exist.
    """

    def __init__(self, obj: Any, original: Callable[..., Any], restore: Callable[[], None]):
        self.obj, self.original, self.restore = obj, original, restore

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.original(*args, **kwargs)
        finally:
            vars(self.obj).pop("build", None)
            self.restore()
