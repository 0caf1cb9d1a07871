"""Models and training on numpy.

Keras-shaped layers, losses, optimizers, metrics, callbacks and `Model.fit`, with reverse-mode
autodiff (`GradientTape`).
"""

from hpcdist.core import math_ops as ops
from hpcdist.core.autodiff import GradientTape, IndexedSlices, Tensor, constant
from hpcdist.nn import (
    callbacks,
    initializers,
    layers,
    losses,
    metrics,
    optimizers,
    regularizers,
)
from hpcdist.nn.embedding import embedding_lookup
from hpcdist.nn.initializers import set_random_seed
from hpcdist.nn.loss_scaling import compute_average_loss, scale_regularization_loss
from hpcdist.nn.models import Model, Sequential

__all__ = [
    "GradientTape",
    "IndexedSlices",
    "Model",
    "Sequential",
    "Tensor",
    "callbacks",
    "compute_average_loss",
    "constant",
    "embedding_lookup",
    "initializers",
    "layers",
    "losses",
    "metrics",
    "ops",
    "optimizers",
    "regularizers",
    "scale_regularization_loss",
    "set_random_seed",
]
