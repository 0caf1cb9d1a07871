"""Layer arguments as JSON-able config values and back (for saving models without code).

Activations and initializers are saved by Keras name, regularizers as ``{"l1": ..., "l2":
...}``. An argument that has no such form (a Python callable, an array) cannot be saved:
`config_value` raises, naming it, rather than writing a model that loads differently.
"""

from __future__ import annotations

import inspect
from typing import Any

from hpcdist.nn import activations, regularizers

__all__ = ["activation_config", "config_value", "regularizer_config", "regularizer_from_config"]


def config_value(layer: str, what: str, value: Any) -> Any:
    """``value`` when it is None, a string, a number or a bool.

    Raises:
        ValueError: Anything else (a callable or an array has no config).
    """
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise ValueError(
        f"{layer}: {what} {value!r} has no config (use a Keras name, or save the weights only)"
    )


def activation_config(layer: str, fn: Any) -> str:
    """The Keras name of a built-in activation.

    Raises:
        ValueError: A custom callable.
    """
    name = activations.name_of(fn)
    if name is None:
        raise ValueError(f"{layer}: activation {fn!r} has no config (use a Keras name)")
    return name


def regularizer_config(layer: str, reg: Any) -> Any:
    """None, a name, or ``{"l1": ..., "l2": ...}``.

    Raises:
        ValueError: A custom callable.
    """
    if reg is None or isinstance(reg, str):
        return reg
    if isinstance(reg, regularizers.L1L2):
        return {"l1": reg.l1, "l2": reg.l2}
    raise ValueError(f"{layer}: regularizer {reg!r} has no config")


def regularizer_from_config(value: Any) -> Any:
    """The inverse of `regularizer_config` (anything else is returned as it is)."""
    if isinstance(value, dict):
        return regularizers.L1L2(**value)
    return value


def constructor_parameters(obj: Any) -> set[str]:
    """The parameter names of every ``__init__`` in ``obj``'s class hierarchy (its config keys)."""
    return {
        name
        for cls in type(obj).__mro__
        if "__init__" in vars(cls)
        for name in inspect.signature(vars(cls)["__init__"]).parameters
    }
