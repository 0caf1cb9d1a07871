"""Models and training on numpy (API section 5). Today: loss scaling for replicas."""

from hpcdist.nn import ops
from hpcdist.nn.autodiff import GradientTape, Tensor, constant
from hpcdist.nn.loss_scaling import compute_average_loss, scale_regularization_loss

__all__ = [
    "GradientTape",
    "Tensor",
    "compute_average_loss",
    "constant",
    "ops",
    "scale_regularization_loss",
]
