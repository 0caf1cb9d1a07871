"""TF's device strings: ``/job:ps/replica:0/task:1/device:CPU:0``, parsed and merged.

A `DeviceSpec` has five optional fields. Merging fills the unset fields of one spec from
another (`DeviceSpec.make_merged_spec`: the argument's set fields win), which is how nested
``tf.device`` scopes and `replica_device_setter` combine (``tensorflow/python/framework/
device_spec.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["DeviceSpec", "canonical_name", "merge_device"]


@dataclass(frozen=True)
class DeviceSpec:
    """A (partial) device: job, replica, task, device type and index, each optional.

    Args:
        job: Job name (``"ps"``).
        replica: Replica index.
        task: Task index.
        device_type: ``"CPU"`` or ``"GPU"`` (upper-cased).
        device_index: Device index, None for any (``*``).
    """

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    device_type: str | None = None
    device_index: int | None = None

    @classmethod
    def from_string(cls, spec: str | None) -> DeviceSpec:
        """Parse ``/job:ps/task:0/cpu:0``, ``/device:GPU:1``, ``/gpu:*`` and the like.

        Raises:
            ValueError: A part that is not one of TF's forms (names the part).
        """
        values: dict[str, Any] = {}
        for part in (spec or "").split("/"):
            if not part:
                continue
            pieces = part.split(":")
            key = pieces[0].lower()
            if len(pieces) == 2 and key in ("job", "replica", "task"):
                values[key] = pieces[1] if key == "job" else int(pieces[1])
            elif len(pieces) == 2 and key in ("cpu", "gpu"):
                values["device_type"] = key.upper()
                values["device_index"] = None if pieces[1] == "*" else int(pieces[1])
            elif len(pieces) in (2, 3) and key == "device":
                values["device_type"] = pieces[1].upper()
                if len(pieces) == 3:
                    values["device_index"] = None if pieces[2] == "*" else int(pieces[2])
            else:
                raise ValueError(f"unknown device specification part {part!r} in {spec!r}")
        return cls(**values)

    def to_string(self) -> str:
        """The canonical string (``/job:ps/task:0/device:CPU:0``), ``""`` when empty."""
        out = ""
        if self.job is not None:
            out += f"/job:{self.job}"
        if self.replica is not None:
            out += f"/replica:{self.replica}"
        if self.task is not None:
            out += f"/task:{self.task}"
        if self.device_type is not None:
            index = "*" if self.device_index is None else self.device_index
            out += f"/device:{self.device_type}:{index}"
        return out

    def make_merged_spec(self, dev: DeviceSpec) -> DeviceSpec:
        """A copy of this spec with every field that ``dev`` sets taken from ``dev``."""
        merged = {f.name: getattr(dev, f.name) for f in fields(dev)}
        return replace(self, **{k: v for k, v in merged.items() if v is not None})

    def replace(self, **kwargs: Any) -> DeviceSpec:
        """A copy with the given fields changed."""
        return replace(self, **kwargs)

    def __str__(self) -> str:
        return self.to_string()


def canonical_name(device: str | DeviceSpec | None) -> str:
    """``device`` in canonical form (``/cpu:0`` -> ``/device:CPU:0``)."""
    if isinstance(device, DeviceSpec):
        return device.to_string()
    return DeviceSpec.from_string(device).to_string()


def merge_device(spec: str | DeviceSpec) -> Callable[[Any], str]:
    """The device function of a device string: the op's own fields win, unset ones filled."""
    base = spec if isinstance(spec, DeviceSpec) else DeviceSpec.from_string(spec)

    def device_function(op: Any) -> str:
        return base.make_merged_spec(DeviceSpec.from_string(op.device)).to_string()

    return device_function
