"""``tf.contrib`` names the TF1 guide uses.

``framework.get_or_create_global_step`` and ``training.GreedyLoadBalancingStrategy`` /
``byte_size_load_fn``.
"""

from types import SimpleNamespace

from hpcdist.compat.v1.device_setter import GreedyLoadBalancingStrategy, byte_size_load_fn
from hpcdist.compat.v1.variables import get_global_step, get_or_create_global_step

__all__ = ["framework", "training"]

framework = SimpleNamespace(
    get_or_create_global_step=get_or_create_global_step, get_global_step=get_global_step
)
training = SimpleNamespace(
    GreedyLoadBalancingStrategy=GreedyLoadBalancingStrategy, byte_size_load_fn=byte_size_load_fn
)
