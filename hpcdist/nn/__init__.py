"""Models and training on numpy.

Keras-shaped layers, losses, optimizers, metrics, callbacks, `Model.fit` (subclassed,
`Sequential` and functional models), model saving, and reverse-mode autodiff (`GradientTape`).
"""

from hpcdist.core import math_ops as ops
from hpcdist.core.autodiff import GradientTape
from hpcdist.core.tensors import IndexedSlices, Tensor, constant
from hpcdist.nn import (
    activations,
    callbacks,
    functional,
    initializers,
    layers,
    losses,
    metrics,
    models,
    optimizers,
    regularizers,
)
from hpcdist.nn.embedding import embedding_lookup
from hpcdist.nn.initializers import set_random_seed
from hpcdist.nn.input_layer import Input
from hpcdist.nn.keras_tensor import KerasTensor
from hpcdist.nn.loss_scaling import compute_average_loss, scale_regularization_loss
from hpcdist.nn.models import Model, Sequential

__all__ = [
    "GradientTape",
    "IndexedSlices",
    "Input",
    "KerasTensor",
    "Model",
    "Sequential",
    "Tensor",
    "activations",
    "callbacks",
    "compute_average_loss",
    "constant",
    "embedding_lookup",
    "functional",
    "initializers",
    "layers",
    "losses",
    "metrics",
    "models",
    "ops",
    "optimizers",
    "regularizers",
    "scale_regularization_loss",
    "set_random_seed",
]
