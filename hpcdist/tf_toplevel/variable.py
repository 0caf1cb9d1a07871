"""``tf.Variable``: a variable of the current strategy.

``hd.Variable(1.0)`` creates what ``hd.get_strategy().Variable`` creates (a plain variable
outside any scope, a `MirroredVariable` under a mirrored strategy, a ps variable under
`ParameterServerStrategy`), with TF's dtype rule for Python data (``1.0`` is float32).
``isinstance(v, hd.Variable)`` is true for every variable type of hpcdist.
"""

from __future__ import annotations

from typing import Any

import hpcdist.strategies  # noqa: F401 - registers the default strategy with the context
from hpcdist.core import context
from hpcdist.core.dtypes import as_dtype
from hpcdist.core.tensors import is_python_data, python_array
from hpcdist.core.variables import Variable as BaseVariable
from hpcdist.core.variables import VariableAggregation, VariableSynchronization

__all__ = ["Variable"]


class _VariableMeta(type):
    """Calling the class creates a strategy variable; every hpcdist variable is an instance."""

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, BaseVariable)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, BaseVariable)

    def __call__(
        cls,
        initial_value: Any = None,
        trainable: bool | None = None,
        validate_shape: bool = True,
        caching_device: Any = None,
        name: str | None = None,
        variable_def: Any = None,
        dtype: Any = None,
        import_scope: Any = None,
        constraint: Any = None,
        synchronization: Any = VariableSynchronization.AUTO,
        aggregation: Any = VariableAggregation.NONE,
        shape: Any = None,
        experimental_enable_variable_lifting: bool = True,
    ) -> Any:
        """Create a variable of the current strategy (TF's arguments; see `Variable`).

        Raises:
            ValueError: No ``initial_value``, or an argument hpcdist does not support
                (``variable_def``, ``constraint``).
        """
        del validate_shape, caching_device, import_scope, shape
        del experimental_enable_variable_lifting
        if initial_value is None:
            raise ValueError("Variable needs an initial_value, got None")
        if variable_def is not None or constraint is not None:
            raise ValueError(
                "Variable(variable_def=, constraint=) is not supported: pass the initial value, "
                "and apply a constraint after each update"
            )
        if not callable(initial_value) and is_python_data(initial_value):
            initial_value = python_array(initial_value)
        return context.get_strategy().Variable(
            initial_value,
            name=name,
            trainable=trainable,
            synchronization=synchronization,
            aggregation=aggregation,
            dtype=None if dtype is None else as_dtype(dtype),
        )


class Variable(metaclass=_VariableMeta):
    """``tf.Variable(initial_value, trainable=None, name=None, dtype=None, ...)``.

    Creates the current strategy's variable (``hd.get_strategy().Variable``): inside
    ``strategy.scope()`` a distributed one, outside any scope a plain one. Python numbers and
    lists follow TF's dtype rule (float32, int32). TF's graph-only arguments
    (``validate_shape``, ``caching_device``, ``import_scope``, ``shape``,
    ``experimental_enable_variable_lifting``) are accepted and ignored.
    """
