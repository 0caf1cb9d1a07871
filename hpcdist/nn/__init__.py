"""Models and training on numpy (API section 5). Today: loss scaling for replicas."""

from hpcdist.nn.loss_scaling import compute_average_loss, scale_regularization_loss

__all__ = ["compute_average_loss", "scale_regularization_loss"]
