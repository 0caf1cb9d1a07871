"""Session creation of a monitored session: scaffold, chief and worker session creators.

Readiness belongs to the ps memory and the graph whose variables it holds, as TF's
``ready_op`` (``report_uninitialized_variables``) asks the ps tasks whether this graph's
variables are initialized. A header at the start of ps 0's memory says "the ps tasks hold the
initialized variables of the graph with hash D" (ready word, graph hash, graph generation).

The chief places the graph. With a checkpoint to restore it restores it (TF runs neither
``init_op`` nor ``init_fn`` then); variables the ps tasks do not already hold for this graph
get their initial values first, so a second session of the same graph in the same program
restores over the trained values instead of resetting them. Without a checkpoint it
initializes every variable and runs ``init_op`` and ``init_fn``. Before it writes a graph
that is not the one the header names, it withdraws the header; after, it publishes its graph.

Other workers initialize their own variables and wait (`hpcdist.utils.waiting.Waiter`'s polls,
at most 10 ms apart, not TF's 30 s) up to ``max_wait_secs`` until the header names their graph:
a later session of the graph the ps tasks hold is ready at once, with the trained values, as
in TF. A header naming another graph that the chief published after this worker's previous
session means the chief built a different graph, an error; one already there at this worker's
previous session is an earlier graph's, and the worker waits for the chief. No worker talks to
another worker, so a finished chief never leaves one hanging.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.compat.v1.atomics import atomic_read, fetch_add
from hpcdist.compat.v1.graph import GraphKeys, Operation, get_default_graph
from hpcdist.compat.v1.placement import ps_task
from hpcdist.compat.v1.saver import default_saver, latest_checkpoint
from hpcdist.compat.v1.session import Session
from hpcdist.errors import DeadlineExceededError
from hpcdist.logger import get_logger
from hpcdist.utils.waiting import Waiter

__all__ = ["ChiefSessionCreator", "Scaffold", "WorkerSessionCreator"]

#: The longest pause between two reads of the chief's "ready" word (seconds).
_MAX_POLL_S = 0.01


class Scaffold:
    """What a session needs besides the graph: init ops, an init function, a saver.

    Defaults are made by `finalize`.

    Args:
        init_op: Run by the chief after the default initialization when it restores no
            checkpoint (as TF).
        init_feed_dict: Feeds for ``init_op``.
        init_fn: ``init_fn(scaffold, session)`` called after ``init_op`` (likewise).
        local_init_op: Run by every worker after its variables are initialized.
        saver: The `Saver` restoring and saving (default: every global variable).
        **kwargs: TF's other arguments (ready_op, summary_op, ...), accepted.
    """

    def __init__(
        self,
        init_op: Any = None,
        init_feed_dict: Any = None,
        init_fn: Any = None,
        ready_op: Any = None,
        ready_for_local_init_op: Any = None,
        local_init_op: Any = None,
        summary_op: Any = None,
        saver: Any = None,
        copy_from_scaffold: Any = None,
        **kwargs: Any,
    ) -> None:
        del ready_op, ready_for_local_init_op, summary_op, kwargs
        if copy_from_scaffold is not None:
            if not isinstance(copy_from_scaffold, Scaffold):
                raise TypeError("copy_from_scaffold is not a Scaffold instance.")
            init_op = init_op or copy_from_scaffold.init_op
            init_feed_dict = init_feed_dict or copy_from_scaffold.init_feed_dict
            init_fn = init_fn or copy_from_scaffold.user_init_fn
            local_init_op = local_init_op or copy_from_scaffold.local_init_op
            saver = saver or copy_from_scaffold.saver
        self.init_op, self.init_feed_dict, self.local_init_op = (
            init_op,
            init_feed_dict,
            local_init_op,
        )
        self._user_init_fn = init_fn
        self.saver = saver
        self.finalized = False

    @property
    def user_init_fn(self) -> Any:
        """``init_fn`` as given: ``init_fn(scaffold, session)``, or None."""
        return self._user_init_fn

    @property
    def init_fn(self) -> Any:
        """``init_fn`` bound to this scaffold: ``init_fn(session)``."""
        if self._user_init_fn is None:
            return None
        return lambda session: self._user_init_fn(self, session)

    def finalize(self) -> Scaffold:
        """Create the default saver (once) and finalize the default graph (every call, as TF).

        The default saver is the graph's ``SAVERS`` saver, else ``Saver(sharded=True,
        max_to_keep=5, allow_empty=True)`` of the global variables (TF's
        ``_get_saver_or_default``: a graph without variables still gets a saver).
        """
        graph = get_default_graph()
        if self.saver is None:
            self.saver = default_saver(graph)
        graph.finalize()
        self.finalized = True
        return self

    @staticmethod
    def default_local_init_op() -> Operation:
        """An operation initializing ``LOCAL_VARIABLES``."""
        local = get_default_graph().get_collection(GraphKeys.LOCAL_VARIABLES)
        return Operation(lambda s: [v.assign(v.initial_value) for v in local], "local_init")


class _Header:
    """The header at the start of ps 0's memory: ready word, graph hash, graph generation.

    The ready word is nonzero while the ps tasks hold the initialized variables of the graph
    whose hash follows; the generation counts the graphs the chiefs published, so that a
    worker can tell an earlier graph's header from the chief's current one.
    """

    def __init__(self, cluster: Any) -> None:
        # What `hpcdist.compat.v1.atomics` addresses: a storage, a dtype and a name.
        self.name, self.dtype = "session_header", np.dtype(np.int64)
        self.storage = cluster.storage(0, 0, (3,), self.dtype, self.name)

    def holds(self, digest: int) -> bool:
        """Whether the ps tasks hold the initialized variables of graph ``digest``."""
        words = self.storage.read()
        return bool(words[0]) and int(words[1]) == digest

    def withdraw(self) -> None:
        """The ps memory is about to hold another graph: not ready (the chief only)."""
        words = self.storage.read()
        words[0] = 0
        self.storage.write(words)

    def publish(self, digest: int) -> None:
        """The ps tasks hold graph ``digest``, initialized (the chief only; once per graph)."""
        words = self.storage.read()
        if words[0] and int(words[1]) == digest:
            return
        self.storage.write(np.array([0, digest, int(words[2]) + 1], np.int64))
        fetch_add(self, 1, 0)

    def wait(self, digest: int, max_wait_secs: float, seen: int) -> int:
        """Wait until the header names graph ``digest``; its generation.

        Args:
            digest: This worker's graph hash.
            max_wait_secs: The deadline.
            seen: The generation this worker found at its previous session (0: none).

        Raises:
            DeadlineExceededError: Not ready within ``max_wait_secs``.
            ValueError: The chief published another graph since this worker's last session.
        """
        earlier: list[int] = []

        def ready() -> np.ndarray | None:
            if atomic_read(self, 0) == 0:
                return None
            words = self.storage.read()
            if not words[0]:
                return None
            if int(words[1]) == digest:
                return words
            if int(words[2]) > seen:
                raise ValueError(
                    f"this worker built a different graph than the chief: its parameter-server "
                    f"variables hash to {digest:#x}, the chief's to {int(words[1]):#x}; every "
                    "worker must create the same variables (names, shapes, dtypes, devices) in "
                    "the same order"
                )
            earlier[:] = [int(words[1])]
            return None

        def late(elapsed: float) -> BaseException:
            del elapsed
            why = ""
            if earlier:
                why = (
                    f" The parameter servers hold the variables of an earlier graph (hash "
                    f"{earlier[0]:#x}), not this worker's ({digest:#x}), and the chief has not "
                    "created a session for this worker's graph."
                )
            return DeadlineExceededError(
                f"Session was not ready after waiting {int(max_wait_secs)} secs.{why}"
            )

        waiter = Waiter(max_wait_secs, on_timeout=late, max_sleep_s=_MAX_POLL_S)
        words = waiter.wait_value(ready)
        assert words is not None  # a waiter with a timeout error raises instead
        return int(words[2])


def _header(sess: Session) -> _Header | None:
    """The session header, when the session's graph has variables on the ps tasks."""
    if sess.cluster is None or not sess.placement.remote:
        return None
    return _Header(sess.cluster)


def _shared(var: Any, cluster: Any) -> bool:
    return cluster is not None and ps_task(var, len(cluster.ps_ranks)) is not None


class _SessionCreator:
    def __init__(self, scaffold: Scaffold | None, master: str, config: Any) -> None:
        self.scaffold = scaffold or Scaffold()
        self.master, self.config = master, config

    def _session(self) -> Session:
        self.scaffold.finalize()
        return Session(self.master, config=self.config)

    @staticmethod
    def _init(variables: list[Any]) -> None:
        for var in variables:
            var.assign(var.initial_value, read_value=False)

    def _local_init(self, sess: Session) -> None:
        if self.scaffold.local_init_op is not None:
            sess.run(self.scaffold.local_init_op)


class ChiefSessionCreator(_SessionCreator):
    """Restore the newest checkpoint (or initialize every variable), then publish "ready".

    Args:
        scaffold: The scaffold (default one).
        master: Session target.
        config: Accepted.
        checkpoint_dir: Restore its newest checkpoint, if any.
        checkpoint_filename_with_path: Restore this checkpoint instead.
    """

    def __init__(
        self,
        scaffold: Scaffold | None = None,
        master: str = "",
        config: Any = None,
        checkpoint_dir: str | None = None,
        checkpoint_filename_with_path: str | None = None,
    ) -> None:
        super().__init__(scaffold, master, config)
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_path = checkpoint_filename_with_path

    def create_session(self) -> Session:
        """A ready session: restored from the newest checkpoint, or initialized."""
        sess = self._session()
        header = _header(sess)
        digest = sess.placement.digest
        held = header is not None and header.holds(digest)
        if header is not None and not held:
            header.withdraw()
        path = self.checkpoint_path or (
            latest_checkpoint(self.checkpoint_dir) if self.checkpoint_dir else None
        )
        if path:
            # The ps tasks' copy of this graph stays until the restore replaces it.
            self._init([v for v in sess.graph.variables if not (held and _shared(v, sess.cluster))])
            get_logger().info("Restoring parameters from %s", path)
            self.scaffold.saver.restore(sess, path)
        else:
            self._init(sess.graph.variables)
            if self.scaffold.init_op is not None:
                sess.run(self.scaffold.init_op, feed_dict=self.scaffold.init_feed_dict)
            if self.scaffold.init_fn is not None:
                self.scaffold.init_fn(sess)
        self._local_init(sess)
        if header is not None:
            header.publish(digest)
        return sess


class WorkerSessionCreator(_SessionCreator):
    """Initialize this worker's own variables and wait until the ps tasks hold this graph.

    Args:
        scaffold: The scaffold.
        master: Session target.
        config: Accepted.
        max_wait_secs: How long to wait for the chief.
    """

    def __init__(
        self,
        scaffold: Scaffold | None = None,
        master: str = "",
        config: Any = None,
        max_wait_secs: float = 30 * 60,
    ) -> None:
        super().__init__(scaffold, master, config)
        self.max_wait_secs = max_wait_secs

    def create_session(self) -> Session:
        """A ready session.

        Raises:
            DeadlineExceededError: The chief was not ready within ``max_wait_secs``.
            ValueError: The chief built a different graph.
        """
        sess = self._session()
        self._init([v for v in sess.graph.variables if not _shared(v, sess.cluster)])
        header = _header(sess)
        if header is not None:
            cluster = sess.cluster
            seen = header.wait(sess.placement.digest, self.max_wait_secs, cluster.seen_generation)
            cluster.seen_generation = seen
        self._local_init(sess)
        return sess
