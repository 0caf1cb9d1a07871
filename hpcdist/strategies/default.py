"""`DefaultStrategy` and `OneDeviceStrategy`: one replica, no communication."""

from __future__ import annotations

from hpcdist.core import context
from hpcdist.strategies.mirrored import check_device_exists
from hpcdist.strategies.replica_context import ReplicaContext
from hpcdist.strategies.strategy import Strategy, StrategyExtended

__all__ = ["DefaultStrategy", "OneDeviceStrategy"]


class DefaultStrategy(Strategy):
    """The strategy in effect when no other is: one replica on this process.

    Use `hpcdist.get_strategy()` outside any scope to get the singleton.
    """

    single_copy_variables = True

    def __init__(self) -> None:
        self.extended = StrategyExtended(self, None)
        self.default_replica_context = ReplicaContext(self, 0)


class OneDeviceStrategy(Strategy):
    """Everything on one device (``"cpu:0"``, ``"gpu:0"``), one replica.

    Args:
        device: The device name.

    Raises:
        ValueError: The device name is not ``cpu:N`` or ``gpu:N``, or names a GPU this process
            does not see (the message says how many it sees).
    """

    single_copy_variables = True

    def __init__(self, device: str) -> None:
        name = check_device_exists(device, "OneDeviceStrategy")
        self.extended = StrategyExtended(self, None, devices=(name,))


context.set_default_strategy_factory(DefaultStrategy)
