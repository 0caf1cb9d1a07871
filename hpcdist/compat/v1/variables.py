"""TF1 variables, placeholders, constants and the global step.

A `Variable` is declared in the default graph: its name, initial value, collections and
device are fixed at creation (the device functions of ``tf.device`` scopes run then). It has
no value until a session places it (`hpcdist.compat.v1.placement`): in a parameter server's
RMA window when its device is ``/job:ps/task:k``, else in this process. Reading one before
that, or (in this process) before its initializer ran, raises `FailedPreconditionError`, as
reading an uninitialized variable does in TF. ``tf.gather`` of a variable reads only its rows
(`Variable.sparse_read`), for TF's sparse gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.compat.v1.graph import GraphKeys, Operation, OpRecord, from_session, get_default_graph
from hpcdist.core.autodiff import Tensor, register_tensor_conversion
from hpcdist.core.tensors import Operators
from hpcdist.core.variables import Storage
from hpcdist.core.variables import Variable as _BaseVariable
from hpcdist.errors import FailedPreconditionError, InvalidArgumentError
from hpcdist.strategies.ps.store import RmaStorage

__all__ = [
    "Placeholder",
    "Variable",
    "assign",
    "assign_add",
    "constant",
    "create_global_step",
    "get_global_step",
    "get_or_create_global_step",
    "get_variable",
    "global_variables",
    "local_variables",
    "placeholder",
    "trainable_variables",
]

#: The op type a device function sees for a variable (TF 2.x graphs use resource variables).
VARIABLE_OP = "VarHandleOp"


class _Unplaced(Storage):
    """The storage of a variable no session has placed yet: every access is an error."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _fail(self, *_: Any) -> Any:
        raise FailedPreconditionError(
            f"Attempting to use uninitialized value {self.name}: TF1 variables have values "
            "only inside a session (tf.Session or tf.train.MonitoredTrainingSession); read "
            "them with session.run(variable) or inside a function that session.run evaluates"
        )

    read = write = add = local_array = _fail


class Variable(_BaseVariable):
    """``tf.Variable`` of a TF1 graph.

    Args:
        initial_value: Array-like or a callable returning one (evaluated now: its shape and
            dtype are part of the graph).
        trainable: Whether it joins ``TRAINABLE_VARIABLES`` (what optimizers update).
        collections: Collections to join (default ``[GLOBAL_VARIABLES]``).
        name: Name (made unique in the graph, under the current name scope).
        dtype: Cast the initial value to this dtype.
        **kwargs: TF's other arguments (validate_shape, caching_device, use_resource, ...),
            accepted and ignored.

    Raises:
        RuntimeError: The default graph is finalized.
        ValueError: No initial value.
    """

    def __init__(
        self,
        initial_value: Any = None,
        trainable: bool = True,
        collections: list[str] | None = None,
        name: str | None = None,
        dtype: Any = None,
        **kwargs: Any,
    ) -> None:
        graph = get_default_graph()
        graph.check_not_finalized()
        if initial_value is None:
            raise ValueError("initial_value must be specified.")
        value = initial_value() if callable(initial_value) else initial_value
        if isinstance(value, Tensor):
            value = value.value
        self._initial = np.array(value, dtype=None if dtype is None else np.dtype(dtype))
        if (
            dtype is None
            and self._initial.dtype == np.float64
            and not isinstance(value, np.ndarray)
        ):
            self._initial = self._initial.astype(np.float32)  # TF's default for Python floats
        self.name = graph.unique_name(name or "Variable")
        self.trainable = trainable
        self.graph = graph
        self._storage = [_Unplaced(self.name)]
        self.op = OpRecord(VARIABLE_OP, self.name, self._initial.shape, self._initial.dtype)
        self._device = graph.place(self.op)
        if collections is None:
            collections = [GraphKeys.GLOBAL_VARIABLES]
        collections = list(collections)
        if trainable and GraphKeys.TRAINABLE_VARIABLES not in collections:
            collections.append(GraphKeys.TRAINABLE_VARIABLES)
        graph.add_variable(self)
        graph.add_to_collections(collections, self)
        self.synchronization = kwargs.get("synchronization")
        self.aggregation = kwargs.get("aggregation")

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape (known at creation)."""
        return self._initial.shape

    @property
    def dtype(self) -> np.dtype:
        """The dtype (known at creation)."""
        return self._initial.dtype

    @property
    def device(self) -> str:
        """The device the graph's device functions chose (``/job:ps/task:0``), or ``""``."""
        return self._device

    @property
    def initial_value(self) -> np.ndarray:
        """The initial value (a copy)."""
        return self._initial.copy()

    def get_shape(self) -> tuple[int, ...]:
        """The shape."""
        return self.shape

    @property
    def initializer(self) -> Any:
        """An operation that assigns the initial value."""
        return Operation(
            lambda state: self.assign(self._initial, read_value=False), f"{self.name}/Assign"
        )

    def eval(self, session: Any = None) -> np.ndarray:
        """The value, read in ``session`` (default: the current default session)."""
        return from_session(session).run(self)

    def load(self, value: Any, session: Any = None) -> None:
        """Assign ``value`` in ``session``."""
        del session
        self.assign(value, read_value=False)

    def sparse_read(self, ids: Any) -> np.ndarray:
        """Rows ``ids`` (sorted, unique) of the value, reading only those rows.

        `tf.gather` and ``tf.nn.embedding_lookup`` read a variable so: under a tape the
        gradient is then `IndexedSlices` over those rows, as TF's.
        """
        ids = np.asarray(ids, np.int64)
        storage = self.storage
        if isinstance(storage, RmaStorage):
            return storage.read_rows(ids)
        return np.array(storage.read()[ids])

    def place(self, storage: Storage) -> None:
        """Give this variable its memory (`hpcdist.compat.v1.placement` calls it)."""
        self._storage = [storage]

    def __repr__(self) -> str:
        shape = "(" + ", ".join(map(str, self.shape)) + ("," if len(self.shape) == 1 else "") + ")"
        return f"<tf.Variable '{self.name}:0' shape={shape} dtype={self.dtype.name}>"

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: Any) -> Any:
        if isinstance(other, Variable):
            return self is other
        return super().__eq__(other)


register_tensor_conversion(Variable, Variable.dense_tensor)


class Placeholder(Operators):
    """``tf.placeholder``: a value given to each ``session.run`` through ``feed_dict``.

    Inside the functions a session evaluates it behaves as the fed array (Python's operators
    included: ``x * 2.0``).

    Args:
        dtype: Dtype of the fed value.
        shape: Expected shape (None entries match any size), or None for any shape.
        name: Name.
    """

    def __init__(self, dtype: Any, shape: Any = None, name: str | None = None) -> None:
        self.dtype = np.dtype(dtype)
        self.shape = None if shape is None else tuple(shape)
        self.name = get_default_graph().unique_name(name or "Placeholder")
        self.value: np.ndarray | None = None

    def check(self, value: Any) -> np.ndarray:
        """``value`` as an array of this dtype, if its shape fits.

        Raises:
            ValueError: The shape does not fit (TF's message).
        """
        array = np.asarray(value, self.dtype)
        if self.shape is not None and (
            array.ndim != len(self.shape)
            or any(d is not None and d != a for d, a in zip(self.shape, array.shape, strict=True))
        ):
            want = "(" + ", ".join("?" if d is None else str(d) for d in self.shape) + ")"
            raise ValueError(
                f"Cannot feed value of shape {array.shape} for Tensor '{self.name}:0', which "
                f"has shape '{want}'"
            )
        return array

    def as_tensor(self) -> Tensor:
        """The fed value as a `Tensor`.

        Raises:
            InvalidArgumentError: Nothing was fed (TF's message).
        """
        if self.value is None:
            raise InvalidArgumentError(
                f"You must feed a value for placeholder tensor '{self.name}' with dtype "
                f"{self.dtype.name}"
            )
        return Tensor(self.value)

    def __repr__(self) -> str:
        return f"<tf.placeholder '{self.name}:0' shape={self.shape} dtype={self.dtype.name}>"


register_tensor_conversion(Placeholder, Placeholder.as_tensor)


def placeholder(dtype: Any, shape: Any = None, name: str | None = None) -> Placeholder:
    """``tf.placeholder(dtype, shape=None, name=None)``."""
    return Placeholder(dtype, shape, name)


def constant(value: Any, dtype: Any = None, shape: Any = None, name: str | None = None) -> Any:
    """``tf.constant``: a fixed value (a Python string becomes bytes, as TF returns it).

    Returns:
        A numpy array (0-d for scalars); ``session.run`` returns it as TF would (a numpy
        scalar, or ``bytes`` for a string).
    """
    del name
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, bytes):
        return np.array(value, dtype=object if dtype is None else dtype)
    if dtype is None and isinstance(value, float | list | tuple):
        array = np.asarray(value)
        dtype = np.float32 if array.dtype == np.float64 else None
    array = np.array(value, dtype=dtype)
    if shape is not None:
        array = np.broadcast_to(array, tuple(shape)).copy()
    return array


def get_variable(
    name: str,
    shape: Any = None,
    dtype: Any = np.float32,
    initializer: Any = None,
    trainable: bool = True,
    collections: list[str] | None = None,
    **kwargs: Any,
) -> Variable:
    """``tf.get_variable``: a new variable named exactly ``name``.

    ``initializer`` is an array-like, or a callable taking ``(shape, dtype)`` (a Keras/hpcdist
    initializer); without one, zeros (TF uses Glorot-uniform for floats: pass
    ``hd.nn.initializers.GlorotUniform()`` for that).

    Raises:
        ValueError: ``name`` exists in the graph already (TF's "Variable w already exists").
    """
    del kwargs
    graph = get_default_graph()
    full = graph.unique_name(name, mark_as_used=False)
    scope = graph.get_name_scope()
    if full != (f"{scope}/{name}" if scope else name):
        raise ValueError(
            f"Variable {name} already exists, disallowed. Did you mean to set reuse=True or "
            "reuse=tf.AUTO_REUSE in VarScope?"
        )
    if initializer is None:
        value: Any = np.zeros(tuple(shape or ()), dtype)
    elif callable(initializer):
        value = np.asarray(initializer(tuple(shape or ()), dtype))
    else:
        value = np.asarray(initializer, dtype)
    return Variable(value, trainable=trainable, collections=collections, name=name, dtype=dtype)


def global_variables(scope: str | None = None) -> list[Variable]:
    """The ``GLOBAL_VARIABLES`` collection of the default graph."""
    return get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES, scope)


def local_variables(scope: str | None = None) -> list[Variable]:
    """The ``LOCAL_VARIABLES`` collection of the default graph."""
    return get_default_graph().get_collection(GraphKeys.LOCAL_VARIABLES, scope)


def trainable_variables(scope: str | None = None) -> list[Variable]:
    """The ``TRAINABLE_VARIABLES`` collection of the default graph."""
    return get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES, scope)


def get_global_step(graph: Any = None) -> Variable | None:
    """The graph's global step variable, or None.

    Raises:
        TypeError: More than one variable in the ``GLOBAL_STEP`` collection.
    """
    graph = graph or get_default_graph()
    found = graph.get_collection(GraphKeys.GLOBAL_STEP)
    if len(found) > 1:
        raise TypeError("Multiple tensors in global_step collection.")
    if found:
        return found[0]
    named = [v for v in graph.variables if v.name == "global_step"]
    return named[0] if named else None


def create_global_step(graph: Any = None) -> Variable:
    """A new int64 scalar ``global_step`` (not trainable), placed by the device scopes.

    Raises:
        ValueError: The graph has one already (TF's '"global_step" already exists.').
    """
    graph = graph or get_default_graph()
    if get_global_step(graph) is not None:
        raise ValueError('"global_step" already exists.')
    with graph.as_default(), graph.name_scope(None):
        return Variable(
            np.int64(0),
            trainable=False,
            name="global_step",
            dtype=np.int64,
            collections=[GraphKeys.GLOBAL_VARIABLES, GraphKeys.GLOBAL_STEP],
        )


def get_or_create_global_step(graph: Any = None) -> Variable:
    """The graph's global step, created if it has none."""
    graph = graph or get_default_graph()
    return get_global_step(graph) or create_global_step(graph)


def assign(ref: Variable, value: Any, name: str | None = None) -> Operation:
    """An operation setting ``ref`` to ``value`` (an array or a function returning one).

    Fetching it gives the new value, as TF's ``tf.assign`` tensor does.
    """
    return Operation(
        lambda state: ref.assign(state.evaluate(value)),
        name or f"{ref.name}/Assign",
        has_value=True,
    )


def assign_add(ref: Variable, value: Any, name: str | None = None) -> Operation:
    """An operation adding ``value`` (an array or a function returning one) to ``ref``.

    Fetching it gives the new value, as TF's ``tf.assign_add`` tensor does.
    """
    return Operation(
        lambda state: ref.assign_add(state.evaluate(value)),
        name or f"{ref.name}/AssignAdd",
        has_value=True,
    )
