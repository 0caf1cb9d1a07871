"""The TF1 graph: a registry of variables, collections and the device and name scopes.

Nothing is computed when a graph is built: tensors are zero-argument callables evaluated by
`hpcdist.compat.v1.session.Session.run`, and the graph records what TF1 code declares about
them: which variables exist (in creation order, the order every worker sees), where the device
functions place them, and the collections (``GLOBAL_VARIABLES``, ``TRAINABLE_VARIABLES``,
``GLOBAL_STEP``, ...). A finalized graph refuses new variables, as TF's does.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from hpcdist.compat.v1.devices import DeviceSpec, canonical_name, merge_device

__all__ = [
    "Deferred",
    "Graph",
    "GraphKeys",
    "OpRecord",
    "Operation",
    "add_to_collection",
    "device",
    "get_collection",
    "get_default_graph",
    "name_scope",
    "reset_default_graph",
]


class GraphKeys:
    """Standard collection names (TF's ``tf.GraphKeys``)."""

    GLOBAL_VARIABLES = "variables"
    LOCAL_VARIABLES = "local_variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    MODEL_VARIABLES = "model_variables"
    GLOBAL_STEP = "global_step"
    SUMMARIES = "summaries"
    UPDATE_OPS = "update_ops"
    LOSSES = "losses"
    SAVERS = "savers"
    INIT_OP = "init_op"
    LOCAL_INIT_OP = "local_init_op"
    READY_OP = "ready_op"
    TRAIN_OP = "train_op"


class _Output:
    """The first output of an op as a device function sees it (shape and dtype)."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    def get_shape(self) -> tuple[int, ...]:
        """The shape."""
        return self.shape


class OpRecord:
    """What a device function receives for an op being placed (TF's ``Operation``/``NodeDef``).

    Args:
        type: Op type (``"VarHandleOp"`` for variables).
        name: Op name.
        shape: Shape of its output.
        dtype: Dtype of its output.
        device: Device requested so far (merged from inner scopes).
    """

    def __init__(
        self,
        type: str,
        name: str,
        shape: tuple[int, ...] = (),
        dtype: Any = np.float32,
        device: str = "",
    ) -> None:
        self.type, self.name, self.device = type, name, device
        self.outputs = [_Output(shape, dtype)]
        self._attrs = {"shape": tuple(shape), "dtype": np.dtype(dtype)}

    @property
    def op(self) -> str:
        """The op type (``NodeDef.op``)."""
        return self.type

    @property
    def node_def(self) -> OpRecord:
        """Itself (device functions read ``op.node_def.op``)."""
        return self

    def get_attr(self, name: str) -> Any:
        """``"shape"`` or ``"dtype"``."""
        return self._attrs[name]


class Operation:
    """A deferred action (TF's ``Operation``): `Session.run` calls it and fetches None.

    Args:
        fn: What running it does; called with the session's run state (`RunState`).
        name: Name.
        inputs: Operations run before this one in the same ``run``.
        has_value: Whether fetching it gives what ``fn`` returned (``tf.assign`` and
            ``tf.assign_add`` give the new value, as TF's tensors do), not None.
    """

    def __init__(
        self,
        fn: Callable[[Any], Any] | None,
        name: str,
        inputs: tuple = (),
        has_value: bool = False,
    ) -> None:
        self._fn, self.name, self.inputs = fn, name, tuple(inputs)
        self.type = "NoOp" if fn is None else "Op"
        self.has_value = has_value

    def execute(self, state: Any) -> Any:
        """Run the inputs, then this operation, in run ``state`` (`Session.run` calls it).

        Returns:
            What ``fn`` returned (None without one).
        """
        for op in self.inputs:
            state.run_op(op)
        return None if self._fn is None else self._fn(state)

    def run(self, feed_dict: dict | None = None, session: Any = None) -> None:
        """Run in ``session`` (default: the current default session)."""
        from_session(session).run(self, feed_dict=feed_dict)

    def __repr__(self) -> str:
        return f"<Operation {self.name!r}>"


class Deferred:
    """A value computed when a run needs it (a gradient of `compute_gradients`).

    `Session.run` fetches it as its `value` in that run: what TF's ``sess.run`` of the
    tensor gives (numpy arrays, or `IndexedSlices` of numpy arrays for a sparse gradient).
    """

    def value(self, state: Any) -> Any:
        """The value in run ``state`` (`hpcdist.compat.v1.session.RunState`)."""
        raise NotImplementedError(f"{type(self).__name__} must define value(state)")


def from_session(session: Any) -> Any:
    """``session``, or the default session (set by ``with tf.Session():``)."""
    if session is not None:
        return session
    if _default_sessions.stack:
        return _default_sessions.stack[-1]
    raise ValueError("Cannot evaluate without a session: pass session= or use `with tf.Session():`")


class _DefaultSessions(threading.local):
    def __init__(self) -> None:
        self.stack: list[Any] = []


_default_sessions = _DefaultSessions()


@contextlib.contextmanager
def default_session(session: Any) -> Iterator[Any]:
    """Make ``session`` the default for `Operation.run` and ``Variable.eval``."""
    _default_sessions.stack.append(session)
    try:
        yield session
    finally:
        _default_sessions.stack.pop()


class Graph:
    """A registry of variables, collections, and the device and name scopes of a TF1 program."""

    def __init__(self) -> None:
        self._collections: dict[str, list[Any]] = {}
        self._names: dict[str, int] = {}
        self._device_stack: list[Callable[[Any], str] | None] = []
        self._colocation: list[Any] = []
        self._name_stack = ""
        self._finalized = False
        self.variables: list[Any] = []  # every variable, in creation order
        self.binding: Any = None  # set when a session places the variables (`placement`)
        self.seed: int | None = None

    # -- default graph --------------------------------------------------------------------------

    @contextlib.contextmanager
    def as_default(self) -> Iterator[Graph]:
        """Make this graph the default inside the block."""
        _graphs.stack.append(self)
        try:
            yield self
        finally:
            _graphs.stack.pop()

    # -- finalizing -----------------------------------------------------------------------------

    @property
    def finalized(self) -> bool:
        """Whether the graph refuses changes."""
        return self._finalized

    def finalize(self) -> None:
        """Refuse new variables and ops from now on."""
        self._finalized = True

    def unfinalize(self) -> None:
        """Accept changes again (a `MonitoredSession` that finalized the graph, at close)."""
        self._finalized = False

    _unsafe_unfinalize = unfinalize  # TF's name

    def check_not_finalized(self) -> None:
        """Raise TF's RuntimeError when the graph is finalized."""
        if self._finalized:
            raise RuntimeError("Graph is finalized and cannot be modified.")

    # -- names ----------------------------------------------------------------------------------

    def unique_name(self, name: str, mark_as_used: bool = True) -> str:
        """``name`` under the current name scope, with ``_1``, ``_2`` appended when taken."""
        full = f"{self._name_stack}/{name}" if self._name_stack else name
        key = full.lower()
        i = self._names.get(key, 0)
        if mark_as_used:
            self._names[key] = i + 1
        if i == 0:
            return full
        base = key
        while key in self._names:
            key = f"{base}_{i}"
            i += 1
        if mark_as_used:
            self._names[key] = 1
        return f"{full}_{i - 1}"

    def get_name_scope(self) -> str:
        """The current name scope, without a trailing ``/`` (``""`` at the top)."""
        return self._name_stack

    @contextlib.contextmanager
    def name_scope(self, name: str | None) -> Iterator[str]:
        """Prefix names created inside with ``name/`` (``None`` or ``""`` resets to the top)."""
        previous = self._name_stack
        if not name:
            self._name_stack = ""
        elif name.endswith("/"):
            self._name_stack = name[:-1]
        else:
            self._name_stack = self.unique_name(name)
        try:
            yield self._name_stack + "/" if self._name_stack else ""
        finally:
            self._name_stack = previous

    # -- collections ----------------------------------------------------------------------------

    def add_to_collection(self, name: str, value: Any) -> None:
        """Append ``value`` to collection ``name``."""
        self.check_not_finalized()
        self._collections.setdefault(name, []).append(value)

    def add_to_collections(self, names: Any, value: Any) -> None:
        """Append ``value`` to each collection of ``names`` (a name or a list of names)."""
        for name in [names] if isinstance(names, str) else list(dict.fromkeys(names)):
            self.add_to_collection(name, value)

    def get_collection(self, name: str, scope: str | None = None) -> list[Any]:
        """A copy of collection ``name``, filtered by ``re.match(scope, item.name)``."""
        items = list(self._collections.get(name, []))
        if scope is None:
            return items
        pattern = re.compile(scope)
        return [i for i in items if hasattr(i, "name") and pattern.match(i.name)]

    def get_collection_ref(self, name: str) -> list[Any]:
        """The collection's own list (changes show in the graph)."""
        return self._collections.setdefault(name, [])

    def clear_collection(self, name: str) -> None:
        """Empty collection ``name``."""
        self._collections.pop(name, None)

    # -- devices --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def device(self, device_name_or_function: Any) -> Iterator[None]:
        """Place ops created inside: a device string, a device function, or None (reset)."""
        if device_name_or_function is None:
            entry = None
        elif callable(device_name_or_function):
            entry = device_name_or_function
        else:
            entry = merge_device(DeviceSpec.from_string(str(device_name_or_function)))
        self._device_stack.append(entry)
        try:
            yield
        finally:
            self._device_stack.pop()

    @contextlib.contextmanager
    def colocate_with(self, op: Any) -> Iterator[None]:
        """Place ops created inside on ``op``'s device, whatever the device scopes say."""
        self._colocation.append(op)
        try:
            yield
        finally:
            self._colocation.pop()

    def place(self, record: OpRecord) -> str:
        """The device of ``record``: colocation first, else device functions innermost first.

        As in TF: each function sees the device chosen by the inner ones and may merge into it;
        a ``tf.device(None)`` scope stops the outer ones.
        """
        if self._colocation:
            record.device = self._colocation[-1].device
            return record.device
        for function in reversed(self._device_stack):
            if function is None:
                break
            record.device = canonical_name(function(record) or "")
        return record.device

    # -- variables ------------------------------------------------------------------------------

    def add_variable(self, var: Any) -> None:
        """Record a new variable (in creation order)."""
        self.check_not_finalized()
        self.variables.append(var)


class _Graphs(threading.local):
    def __init__(self) -> None:
        self.stack: list[Graph] = []


_graphs = _Graphs()
_root = [Graph()]


def get_default_graph() -> Graph:
    """The innermost ``as_default`` graph, else the global default graph."""
    return _graphs.stack[-1] if _graphs.stack else _root[0]


def reset_default_graph() -> None:
    """Replace the global default graph by a new one.

    Raises:
        AssertionError: Called inside a ``with graph.as_default():`` block (TF's rule).
    """
    if _graphs.stack:
        raise AssertionError(
            "Do not use tf.reset_default_graph() to clear nested graphs. If you need a cleared "
            "graph, exit the nesting and create a new graph."
        )
    _root[0] = Graph()


def device(device_name_or_function: Any) -> contextlib.AbstractContextManager[None]:
    """``tf.device``: place the ops (variables) created inside."""
    return get_default_graph().device(device_name_or_function)


def colocate_with(op: Any, ignore_existing: bool = False) -> contextlib.AbstractContextManager:
    """``tf.colocate_with``: place what is created inside beside ``op``."""
    del ignore_existing
    return get_default_graph().colocate_with(op)


def name_scope(name: str | None, default_name: str | None = None, values: Any = None) -> Any:
    """``tf.name_scope``: prefix the names of variables created inside."""
    del values
    return get_default_graph().name_scope(name if name is not None else default_name)


def add_to_collection(name: str, value: Any) -> None:
    """Append ``value`` to collection ``name`` of the default graph."""
    get_default_graph().add_to_collection(name, value)


def get_collection(key: str, scope: str | None = None) -> list[Any]:
    """Collection ``key`` of the default graph."""
    return get_default_graph().get_collection(key, scope)


def get_collection_ref(key: str) -> list[Any]:
    """The list of collection ``key`` of the default graph."""
    return get_default_graph().get_collection_ref(key)
