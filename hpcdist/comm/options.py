"""`CommunicationOptions` and `CommunicationImplementation` (TF's names)."""

from __future__ import annotations

import dataclasses
import enum

__all__ = ["COMPRESSIONS", "CommunicationImplementation", "CommunicationOptions"]

COMPRESSIONS = (None, "fp16", "bf16")


class CommunicationImplementation(str, enum.Enum):
    """Which backend carries all-reduce traffic.

    AUTO picks per message (shared memory inside a node, hierarchical across nodes, MPI for
    small messages where measured faster). MPI uses the MPI library's own collective. SHM uses
    a node shared-memory segment (hierarchical when the job spans several nodes). RING is a
    ring reduce-scatter/all-gather over MPI point-to-point messages. NCCL is the GPU backend.
    """

    AUTO = "auto"
    MPI = "mpi"
    SHM = "shm"
    NCCL = "nccl"
    RING = "ring"

    @classmethod
    def parse(cls, value: CommunicationImplementation | str) -> CommunicationImplementation:
        """Return the member for a member or its name (any case).

        Raises:
            ValueError: Unknown implementation.
        """
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            valid = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown implementation {value!r}; expected one of {valid}") from None


@dataclasses.dataclass(frozen=True)
class CommunicationOptions:
    """Options of cross-replica communication.

    Args:
        bytes_per_pack: Fusion bucket size of `grouped_allreduce` (TF's packing rule); 0 puts
            all tensors of one dtype in a single pack. None uses ``HPCDIST_BYTES_PER_PACK``.
            On one node through shared memory a dtype is always one pack (`hpcdist.comm.fusion`).
        timeout_seconds: Deadline of each collective; None uses ``HPCDIST_TIMEOUT_SECONDS``
            (which defaults to no deadline). Exceeding it raises
            `hpcdist.errors.DeadlineExceededError`.
        implementation: A `CommunicationImplementation` or its name.
        compression: None, ``"fp16"`` or ``"bf16"``: floating-point all-reduce traffic is sent
            in 16 bits and accumulated in the input precision.
    """

    bytes_per_pack: int | None = None
    timeout_seconds: float | None = None
    implementation: CommunicationImplementation | str = CommunicationImplementation.AUTO
    compression: str | None = None

    def __post_init__(self) -> None:
        impl = CommunicationImplementation.parse(self.implementation)
        object.__setattr__(self, "implementation", impl)
        if self.bytes_per_pack is not None and (
            not isinstance(self.bytes_per_pack, int) or self.bytes_per_pack < 0
        ):
            raise ValueError(f"bytes_per_pack must be an int >= 0, got {self.bytes_per_pack!r}")
        if self.timeout_seconds is not None and not self.timeout_seconds > 0:
            raise ValueError(f"timeout_seconds must be > 0 or None, got {self.timeout_seconds!r}")
        compression = self.compression.lower() if isinstance(self.compression, str) else None
        if self.compression is not None and compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {COMPRESSIONS}, got {self.compression!r}")
        object.__setattr__(self, "compression", compression)

    def merge(self, other: CommunicationOptions | None) -> CommunicationOptions:
        """Return these options with the non-default fields of ``other`` taking precedence."""
        if other is None:
            return self
        fields = {}
        defaults = CommunicationOptions()
        for f in dataclasses.fields(self):
            value = getattr(other, f.name)
            fields[f.name] = value if value != getattr(defaults, f.name) else getattr(self, f.name)
        return CommunicationOptions(**fields)
