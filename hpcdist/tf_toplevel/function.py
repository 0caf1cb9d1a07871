"""``tf.function`` as a no-op decorator: the Python function runs as written.

hpcdist runs eagerly (numpy or CuPy), so there is no graph to trace; the decorator keeps TF's
signature so that decorated programs run unchanged, with and without arguments, on functions
and on methods.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["Function", "function"]


class Function:
    """A function decorated with `function`: calling it calls the Python function.

    Args:
        python_function: The decorated function.
        input_signature: Kept as given (not checked).
        jit_compile: Kept as given (no compilation happens).
    """

    def __init__(
        self,
        python_function: Callable[..., Any],
        input_signature: Any = None,
        jit_compile: bool | None = None,
    ) -> None:
        functools.update_wrapper(self, python_function)
        self.python_function = python_function
        self.input_signature = input_signature
        self.jit_compile = jit_compile

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the Python function."""
        return self.python_function(*args, **kwargs)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        """A decorated method binds to its instance, as a plain method does."""
        if instance is None:
            return self
        bound = self.python_function.__get__(instance, owner)
        return Function(bound, self.input_signature, self.jit_compile)

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> Function:
        """This function itself (eager execution has one implementation for all inputs)."""
        del args, kwargs
        return self

    def experimental_get_tracing_count(self) -> int:
        """0: nothing is ever traced."""
        return 0

    def __repr__(self) -> str:
        return f"<hpcdist.function {getattr(self.python_function, '__qualname__', '?')}>"


def function(
    func: Callable[..., Any] | None = None,
    input_signature: Any = None,
    autograph: bool = True,
    jit_compile: bool | None = None,
    reduce_retracing: bool = False,
    experimental_implements: Any = None,
    experimental_autograph_options: Any = None,
    experimental_attributes: Any = None,
    experimental_relax_shapes: Any = None,
    experimental_compile: Any = None,
    experimental_follow_type_hints: Any = None,
) -> Any:
    """``tf.function``: returns ``func`` as a `Function` that runs it eagerly.

    Used as ``@hd.function``, ``@hd.function(jit_compile=True)`` or ``hd.function(f)``; TF's
    keyword arguments are accepted and have no effect (an unknown keyword is a TypeError, as
    in TF).

    Returns:
        A `Function`, or a decorator making one when ``func`` is None.
    """
    del autograph, reduce_retracing, experimental_implements, experimental_autograph_options
    del experimental_attributes, experimental_relax_shapes, experimental_compile
    del experimental_follow_type_hints

    def decorate(fn: Callable[..., Any]) -> Function:
        if isinstance(fn, Function):
            return fn
        return Function(fn, input_signature, jit_compile)

    return decorate if func is None else decorate(func)
