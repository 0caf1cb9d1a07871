"""``tf.Session``: run fetches of a TF1 graph.

``session.run(fetches, feed_dict)`` walks ``fetches`` (nested lists, tuples, dicts): the
variables fetched are read first (TF's reads do not wait for a train op of the same run), then
the operations run in the order they appear (``tf.assign``/``tf.assign_add`` give the new value,
others None), then placeholders give their fed value and functions (TF1 tensors written as
``def loss(): ...``) are called once per run: a function fetched twice in one run, or computed
by a train op's gradient tape, gives one value, the one the gradient came from. Fetches wrapped
in `AfterOperations` (a monitored session's hooks') read their variables after the operations.
Reading a variable of this process before its initializer ran raises
`FailedPreconditionError`, as TF does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from hpcdist.compat.v1 import task_cluster
from hpcdist.compat.v1.graph import (
    Deferred,
    GraphKeys,
    Operation,
    default_session,
    get_default_graph,
)
from hpcdist.compat.v1.placement import place_graph, renew_local_variables
from hpcdist.compat.v1.variables import Placeholder, Variable
from hpcdist.core.autodiff import IndexedSlices, Tensor
from hpcdist.errors import FailedPreconditionError
from hpcdist.utils.xp import to_numpy

__all__ = [
    "AfterOperations",
    "RunState",
    "Session",
    "global_variables_initializer",
    "local_variables_initializer",
    "variables_initializer",
]


class RunState:
    """One ``session.run``: the values computed so far and the fed placeholders.

    Args:
        session: The session running.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self._values: dict[Any, Any] = {}
        self._done: set[int] = set()

    def run_op(self, op: Operation) -> None:
        """Run ``op`` (once per run)."""
        if id(op) in self._done:
            return
        self._done.add(id(op))
        result = op.execute(self)
        if op.has_value:
            self._values[("op", id(op))] = (op, result)

    def read_early(self, fetch: Any) -> None:
        """Read a fetched variable before the run's operations update it.

        TF reads a fetched variable without waiting for the train op of the same run (the
        read does not depend on it): ``run([train_op, global_step])`` gives the step before
        the update. A variable not readable yet (its initializer runs in this run) is read
        after the operations.
        """
        if isinstance(fetch, Variable) and ("read", id(fetch)) not in self._values:
            try:
                self._values[("read", id(fetch))] = (fetch, _host(fetch))
            except FailedPreconditionError:
                return

    def remember(self, fn: Any, value: Any) -> None:
        """Record ``value`` as the result of function ``fn`` in this run."""
        self._values[id(fn)] = (fn, value)

    def once(self, key: Any, compute: Callable[[], Any]) -> Any:
        """``compute()``, called the first time ``key`` is asked for in this run.

        Args:
            key: A hashable key other than an ``id`` (those name the functions of `remember`).
            compute: Returns the value; it may call `remember`. Keep whatever ``key`` refers to
                alive inside the value, so that an ``id`` in the key is not reused.
        """
        if key not in self._values:
            self._values[key] = compute()
        return self._values[key]

    def evaluate(self, fetch: Any, after_operations: bool = False) -> Any:
        """The value of one fetch (a function is called once per run).

        Args:
            fetch: The fetch.
            after_operations: Read a variable now, not as `read_early` found it.
        """
        if isinstance(fetch, Operation):
            self.run_op(fetch)
            return _host(self._values[("op", id(fetch))][1]) if fetch.has_value else None
        if (
            not after_operations
            and isinstance(fetch, Variable)
            and ("read", id(fetch)) in self._values
        ):
            return self._values[("read", id(fetch))][1]
        if isinstance(fetch, Variable | Placeholder):
            return _host(fetch)
        if isinstance(fetch, Tensor):
            return to_numpy(fetch.value)
        if isinstance(fetch, Deferred):
            return _host(fetch.value(self))
        if callable(fetch):
            key = id(fetch)
            if key not in self._values:
                self._values[key] = (fetch, fetch())
            return _host(self._values[key][1])
        return fetch


def _host(value: Any) -> Any:
    if isinstance(value, IndexedSlices):  # TF's IndexedSlicesValue: numpy values and indices
        return IndexedSlices(to_numpy(value.values), to_numpy(value.indices), value.dense_shape)
    if isinstance(value, Tensor):
        value = value.value
    elif isinstance(value, Variable):
        value = value.numpy()
    elif isinstance(value, Placeholder):
        value = value.as_tensor().value
    return to_numpy(value)


def _result(value: Any) -> Any:
    """What TF returns for a value: numpy arrays, numpy scalars for 0-d, bytes for strings."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        item = value[()]
        return item if not isinstance(item, str) else item.encode()
    return value


class AfterOperations:
    """Fetches whose variables are read after the run's operations (a monitored session's hooks).

    A hook sees the state its run left (the global step after the train op), which keeps
    `StopAtStepHook` and the summary hooks exact; the caller's own fetched variables are read
    before the update, as TF's reads do not wait for the train op. ``run`` returns the wrapped
    structure's values in its place.

    Args:
        fetches: Any fetch structure.
    """

    def __init__(self, fetches: Any) -> None:
        self.fetches = fetches


def _walk(
    fetches: Any, leaf: Callable[[Any], Any], late: Callable[[Any], Any] | None = None
) -> Any:
    """Apply ``leaf`` to every fetch, ``late`` (default ``leaf``) inside `AfterOperations`."""
    if isinstance(fetches, AfterOperations):
        return _walk(fetches.fetches, late or leaf, late)
    if isinstance(fetches, Mapping):
        return type(fetches)((k, _walk(v, leaf, late)) for k, v in fetches.items())
    if isinstance(fetches, tuple) and hasattr(fetches, "_fields"):
        return type(fetches)(*(_walk(v, leaf, late) for v in fetches))
    if isinstance(fetches, list | tuple):
        return type(fetches)(_walk(v, leaf, late) for v in fetches)
    return leaf(fetches)


class Session:
    """``tf.Session(target="", graph=None, config=None)``.

    Creating a session places the graph's variables (in the ps tasks' RMA windows when this
    process runs a task of a `tf.train.Server` cluster). A plain session initializes nothing:
    run ``tf.global_variables_initializer()`` (`MonitoredTrainingSession` does it for you);
    reading a variable of this process before raises `FailedPreconditionError`, as in TF.
    Without a cluster every session has its own variables, uninitialized at its creation (as
    each ``tf.Session()`` of TF); with one, the ps variables are the ps tasks' (what the chief
    initialized), and this process's variables keep their values from session to session.

    Args:
        target: ``""``, a server's ``target``, or any string (all mean this process's cluster).
        graph: The graph (default graph by default).
        config: Accepted and unused (``tf.ConfigProto``).
    """

    def __init__(self, target: str = "", graph: Any = None, config: Any = None) -> None:
        del config
        self.target = target
        self.graph = graph if graph is not None else get_default_graph()
        self.cluster = task_cluster.current()
        fresh = self.graph.binding is not None and self.cluster is None
        self.placement = place_graph(self.graph, self.cluster)
        if fresh:  # a later local session of the graph: its own, uninitialized variables
            renew_local_variables(self.graph, self.cluster)
        self.step_bound: int | None = None  # the global step a train op may not pass
        #: The global step this process's last train op left (or found at the bound), or None.
        self.known_step: int | None = None
        self._closed = False
        self._default: Any = None

    def run(
        self,
        fetches: Any,
        feed_dict: Mapping[Any, Any] | None = None,
        options: Any = None,
        run_metadata: Any = None,
    ) -> Any:
        """Run ``fetches`` once: variables are read, operations run, then other values.

        A variable fetched beside a train op gives its value before the update (TF's reads do
        not wait for the update), except inside `AfterOperations` (hooks' fetches); a function
        the train op differentiated gives the value the gradient came from; other functions are
        evaluated after the operations.

        Raises:
            RuntimeError: The session is closed.
            TypeError: A feed key is not a placeholder.
            ValueError: A fed value does not fit its placeholder's shape.
        """
        del options, run_metadata
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session.")
        fed = []
        for key, value in (feed_dict or {}).items():
            if not isinstance(key, Placeholder):
                raise TypeError(
                    f"feed_dict keys must be tf.placeholder objects, got {type(key).__name__}"
                )
            fed.append(key)
            key.value = key.check(value)
        state = RunState(self)
        try:
            _walk(fetches, state.read_early, lambda f: None)
            _walk(fetches, lambda f: state.run_op(f) if isinstance(f, Operation) else None)
            return _walk(
                fetches,
                lambda f: _result(state.evaluate(f)),
                lambda f: _result(state.evaluate(f, after_operations=True)),
            )
        finally:
            for key in fed:
                key.value = None

    def make_callable(self, fetches: Any, feed_list: Any = None) -> Callable[..., Any]:
        """A function running ``fetches``, fed positionally from ``feed_list``."""
        feeds = list(feed_list or [])
        return lambda *values: self.run(fetches, dict(zip(feeds, values, strict=True)))

    def close(self) -> None:
        """Close (later runs raise)."""
        self._closed = True

    def as_default(self) -> Any:
        """Make this the default session inside the block."""
        return default_session(self)

    def __enter__(self) -> Session:
        self._default = default_session(self)
        self._default.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._default.__exit__(*exc)
        self.close()


def variables_initializer(var_list: list[Variable], name: str = "init") -> Operation:
    """An operation assigning each variable of ``var_list`` its initial value."""
    variables = list(var_list)

    def init(state: RunState) -> None:
        del state
        for var in variables:
            var.assign(var.initial_value, read_value=False)

    return Operation(init, name)


def global_variables_initializer() -> Operation:
    """Initialize ``GLOBAL_VARIABLES`` of the default graph."""
    return variables_initializer(get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES))


def local_variables_initializer() -> Operation:
    """Initialize ``LOCAL_VARIABLES`` of the default graph."""
    return variables_initializer(get_default_graph().get_collection(GraphKeys.LOCAL_VARIABLES))
