"""``tf.train.SyncReplicasOptimizer`` on RMA windows: exactly R gradients per update.

TF keeps a conditional accumulator per variable and a token queue on the ps tasks, and a
chief thread that waits for R gradients, applies their mean and hands out tokens. Here the
same state lives in the ps windows and the workers drive it themselves, with MPI atomics:

* an admission word ``step << 20 | admitted`` beside the global step: a worker whose local step
  equals the word's step and finds fewer than R gradients admitted takes a place with a
  compare-and-swap, else its gradient is stale (or surplus) and dropped, as TF drops stale ones;
* a sum buffer per variable, beside the variable: admitted workers add their gradients
  (``Accumulate``; a sparse one only its rows, counted in a row buffer) and count themselves
  done;
* the worker that took the R-th place waits for the others' sums, applies the mean with the
  wrapped optimizer (to the rows the gradients touched when all were sparse, as TF's
  ``SparseConditionalAccumulator`` gives an ``IndexedSlices``), advances the global step and
  the word, and enqueues ``max(N, R)`` tokens carrying the new step into a ring beside the
  global step;
* every worker that pushed (or was dropped) takes one token: its new local step.

No chief thread: ``close()`` returns at once (TF waits up to 120 s). A worker whose local step
reached the session's step bound (a `StopAtStepHook`) pushes nothing and takes no token, so
the last update is exactly the last step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from hpcdist.compat.v1.atomics import atomic_read, compare_and_swap, fetch_add
from hpcdist.compat.v1.graph import GraphKeys, Operation, get_default_graph
from hpcdist.compat.v1.optimizers import Optimizer, add_rows, evaluate_gradient
from hpcdist.compat.v1.session_run_hook import SessionRunHook
from hpcdist.compat.v1.variables import Variable
from hpcdist.core.autodiff import IndexedSlices
from hpcdist.errors import DeadlineExceededError
from hpcdist.logger import get_logger
from hpcdist.settings import get_settings
from hpcdist.utils.waiting import wait_value

__all__ = ["SyncReplicasOptimizer"]

_COUNT_BITS = 20
_COUNT_MASK = (1 << _COUNT_BITS) - 1
_EMPTY = -1

T = TypeVar("T")


def _word(step: int, admitted: int) -> int:
    return (step << _COUNT_BITS) | admitted


def _wait(what: str, ready: Callable[[], T | None]) -> T:
    """Poll ``ready()`` until it returns a value other than None (bounded by the deadline).

    Raises:
        DeadlineExceededError: Nothing came within ``HPCDIST_TIMEOUT_SECONDS``.
    """
    settings = get_settings()
    deadline = settings.timeout_seconds

    def stalled(elapsed: float) -> None:
        del elapsed
        get_logger().warning("SyncReplicasOptimizer: still waiting for %s", what)

    def late(elapsed: float) -> BaseException:
        return DeadlineExceededError(
            f"SyncReplicasOptimizer: waited {elapsed:.1f} s for {what} (HPCDIST_TIMEOUT_SECONDS="
            f"{deadline:g}); are all {what.split()[0]} workers still training?"
        )

    value = wait_value(ready, deadline, settings.stall_warning_seconds, stalled, late)
    assert value is not None  # the waiter raises at its deadline
    return value


class SyncReplicasOptimizer(Optimizer):
    """Aggregate ``replicas_to_aggregate`` gradients per update (TF1's synchronous training).

    Args:
        opt: The optimizer applying the averaged gradients.
        replicas_to_aggregate: Gradients per update (R).
        total_num_replicas: Workers pushing gradients (N; N > R leaves backup workers).
        variable_averages: Not supported (must be None).
        variables_to_average: Not supported (must be None).
        use_locking: Accepted.
        name: Name.

    Raises:
        ValueError: R or N below 1, or R above 2**20 - 1.
        NotImplementedError: ``variable_averages`` given.
    """

    def __init__(
        self,
        opt: Optimizer,
        replicas_to_aggregate: int,
        total_num_replicas: int | None = None,
        variable_averages: Any = None,
        variables_to_average: Any = None,
        use_locking: bool = False,
        name: str = "sync_replicas",
    ) -> None:
        if total_num_replicas is None:
            total_num_replicas = replicas_to_aggregate
        if not 1 <= replicas_to_aggregate <= _COUNT_MASK or total_num_replicas < 1:
            raise ValueError(
                f"replicas_to_aggregate must be in [1, {_COUNT_MASK}] and total_num_replicas >= 1, "
                f"got {replicas_to_aggregate} and {total_num_replicas}"
            )
        if variable_averages is not None or variables_to_average is not None:
            raise NotImplementedError("SyncReplicasOptimizer: variable_averages is not supported")
        super().__init__(use_locking, name)
        self._opt = opt
        self._replicas_to_aggregate = int(replicas_to_aggregate)
        self._total_num_replicas = int(total_num_replicas)
        self._tokens_per_step = max(self._total_num_replicas, self._replicas_to_aggregate)
        self._gradients_applied = False
        self._global_step: Variable | None = None
        self._state: Variable | None = None
        self._queue: Variable | None = None
        self._sums: list[Variable] = []
        self._touched: list[Variable | None] = []
        self._variables: list[Variable] = []
        self._local_step: Variable | None = None
        self._capacity = 0

    @property
    def gradients_applied(self) -> bool:
        """Whether `apply_gradients` was called (the hook and queue runner need it first)."""
        return self._gradients_applied

    # -- delegation -------------------------------------------------------------------------

    def compute_gradients(self, *args: Any, **kwargs: Any) -> list[tuple[Any, Variable]]:
        """The wrapped optimizer's gradients."""
        return self._opt.compute_gradients(*args, **kwargs)

    def get_slot(self, var: Variable, name: str) -> Variable | None:
        """The wrapped optimizer's slot."""
        return self._opt.get_slot(var, name)

    def get_slot_names(self) -> list[str]:
        """The wrapped optimizer's slot names."""
        return self._opt.get_slot_names()

    def variables(self) -> list[Variable]:
        """The wrapped optimizer's variables."""
        return self._opt.variables()

    # -- building -------------------------------------------------------------------------------

    def apply_gradients(
        self, grads_and_vars: Any, global_step: Variable | None = None, name: str | None = None
    ) -> Operation:
        """A train op: push the gradients, apply the mean when R arrived, take a token.

        Raises:
            ValueError: No pairs ("Must supply at least one variable"), or no ``global_step``
                ("Global step is required to check staleness").
        """
        pairs = list(grads_and_vars)
        if not pairs:
            raise ValueError("Must supply at least one variable")
        if global_step is None:
            raise ValueError("Global step is required to check staleness")
        graph = get_default_graph()
        self._global_step = global_step
        self._variables = [v for _, v in pairs]
        self._opt.create_slots([v for g, v in pairs if g is not None])
        self._capacity = 4 * self._tokens_per_step + 64
        with graph.name_scope(None):
            with graph.colocate_with(global_step):
                self._state = Variable(
                    np.zeros(2, np.int64), trainable=False, collections=[], name="sync_state"
                )
                self._queue = Variable(
                    np.concatenate([[0, 0], np.full(self._capacity, _EMPTY)]).astype(np.int64),
                    trainable=False,
                    collections=[],
                    name="sync_token_q",
                )
            self._sums, self._touched = [], []
            for var in self._variables:
                with graph.colocate_with(var):
                    self._sums.append(
                        Variable(
                            np.zeros(var.shape, var.dtype),
                            trainable=False,
                            collections=[],
                            name=f"{var.name}/sync_accumulator",
                        )
                    )
                    # Per row: how many sparse gradients touched it; the last word counts the
                    # dense ones. The mean is applied sparsely (TF's SparseConditionalAccumulator)
                    # when only sparse gradients arrived.
                    self._touched.append(
                        Variable(
                            np.zeros(var.shape[0] + 1, np.int64),
                            trainable=False,
                            collections=[],
                            name=f"{var.name}/sync_accumulator_rows",
                        )
                        if len(var.shape) >= 1
                        else None
                    )
            self._local_step = Variable(
                np.int64(0),
                trainable=False,
                collections=[GraphKeys.LOCAL_VARIABLES],
                name="sync_rep_local_step",
            )
        self._gradients_applied = True

        def step(state: Any) -> None:
            grads = [evaluate_gradient(state, g) for g, _ in pairs]
            self._step(state, grads)

        return Operation(step, name or self._name)

    # -- running --------------------------------------------------------------------------------

    def _step(self, state: Any, grads: list[Any]) -> None:
        local = int(self._local_step.numpy())
        bound = state.session.step_bound
        if bound is not None and local >= bound:
            return
        place = self._admit(local)
        if place is not None:
            for grad, total, touched, var in zip(
                grads, self._sums, self._touched, self._variables, strict=True
            ):
                if grad is None:
                    continue
                if isinstance(grad, IndexedSlices):
                    grad = grad.deduplicate()
                    ids = np.asarray(grad.indices, np.int64)
                    add_rows(total, ids, np.asarray(grad.values, var.dtype))
                    if touched is not None:
                        add_rows(touched, ids, np.ones(len(ids), np.int64))
                    continue
                total.assign_add(np.asarray(grad, var.dtype), read_value=False)
                if touched is not None:
                    fetch_add(touched, 1, index=var.shape[0])
            fetch_add(self._state, 1, index=1)
            if place == self._replicas_to_aggregate:
                self._update(state, local)
        token = self._take_token()
        self._local_step.assign(np.int64(token), read_value=False)

    def _admit(self, local: int) -> int | None:
        """This gradient's place (1..R) at step ``local``, or None when stale or surplus."""
        word = atomic_read(self._state, 0)
        while True:
            step, admitted = word >> _COUNT_BITS, word & _COUNT_MASK
            if step != local or admitted >= self._replicas_to_aggregate:
                return None
            found = compare_and_swap(self._state, word, word + 1, 0)
            if found == word:
                return admitted + 1
            word = found

    def _update(self, state: Any, step: int) -> None:
        r = self._replicas_to_aggregate
        _wait(
            f"{r} gradients of step {step} to finish arriving",
            lambda: True if atomic_read(self._state, 1) >= r else None,
        )
        means: list[Any] = []
        for total, touched, var in zip(self._sums, self._touched, self._variables, strict=True):
            mean = total.numpy() / r
            if touched is not None:
                counts = touched.numpy()
                if not counts.any():  # no gradient for this variable (TF skips it)
                    mean = None
                elif counts[-1] == 0:  # only sparse gradients: apply their rows only
                    ids = np.flatnonzero(counts[:-1])
                    mean = IndexedSlices(mean[ids], ids, var.shape)
                touched.assign(np.zeros_like(counts), read_value=False)
            means.append(mean)
            total.assign(np.zeros(var.shape, var.dtype), read_value=False)
        compare_and_swap(self._state, r, 0, 1)
        self._opt.apply_values(state, means, self._variables)
        new_step = fetch_add(self._global_step, 1) + 1
        state.session.known_step = new_step
        compare_and_swap(self._state, _word(step, r), _word(step + 1, 0), 0)
        self._enqueue(new_step, self._tokens_per_step)

    def _enqueue(self, value: int, count: int) -> None:
        tail = fetch_add(self._queue, count, index=1)
        for i in range(tail, tail + count):
            slot = 2 + i % self._capacity
            if compare_and_swap(self._queue, _EMPTY, value, slot) != _EMPTY:
                raise RuntimeError(
                    f"SyncReplicasOptimizer: the token queue is full ({self._capacity} tokens): "
                    "more tokens were handed out than workers take; check total_num_replicas"
                )

    def _take_token(self) -> int:
        head = fetch_add(self._queue, 1, index=0)
        slot = 2 + head % self._capacity

        def taken() -> int | None:
            value = atomic_read(self._queue, slot)
            if value == _EMPTY or compare_and_swap(self._queue, value, _EMPTY, slot) != value:
                return None
            return value

        return _wait("a token (the next synchronous step)", taken)

    # -- initialisation -------------------------------------------------------------------------

    def _chief_init(self, session: Any) -> None:
        """Sums zero, then the admission word at the global step (TF's ``chief_init_op``).

        The token queue keeps its state (initialized with the graph's variables).
        """
        step = int(session.run(self._global_step))
        for total in self._sums:
            total.assign(np.zeros(total.shape, total.dtype), read_value=False)
        self._state.assign(np.array([_word(step, 0), 0], np.int64), read_value=False)

    @property
    def chief_init_op(self) -> Operation:
        """Reset the accumulators to the global step (run once by the chief)."""
        return Operation(lambda state: self._chief_init(state.session), "sync_chief_init")

    @property
    def local_step_init_op(self) -> Operation:
        """``local_step := global_step``."""
        return Operation(
            lambda state: self._local_step.assign(self._global_step.numpy(), read_value=False),
            "sync_local_step_init",
        )

    def get_init_tokens_op(self, num_tokens: int = -1) -> Operation:
        """Enqueue ``num_tokens`` tokens (default R) carrying the global step.

        Raises:
            ValueError: Fewer than ``R - N`` tokens ("Too few tokens to finish the first step").
        """
        needed = self._replicas_to_aggregate - self._total_num_replicas
        if num_tokens == -1:
            num_tokens = self._replicas_to_aggregate
        elif num_tokens < needed:
            raise ValueError(
                f"Too few tokens to finish the first step: {num_tokens} (given) vs {needed} "
                "(needed)"
            )
        return Operation(
            lambda state: self._enqueue(int(self._global_step.numpy()), num_tokens),
            "sync_init_tokens",
        )

    def get_chief_queue_runner(self) -> None:
        """None: there is no chief thread (the worker completing R gradients applies them)."""
        if not self._gradients_applied:
            raise ValueError("Should be called after apply_gradients().")
        return None

    def make_session_run_hook(self, is_chief: bool, num_tokens: int = -1) -> SessionRunHook:
        """The hook initializing the local step (and, on the chief, accumulators and tokens)."""
        return _SyncReplicasHook(self, is_chief, num_tokens)


class _SyncReplicasHook(SessionRunHook):
    def __init__(self, opt: SyncReplicasOptimizer, is_chief: bool, num_tokens: int) -> None:
        self._opt, self._is_chief, self._num_tokens = opt, is_chief, num_tokens

    def begin(self) -> None:
        if not self._opt.gradients_applied:
            raise ValueError(
                "SyncReplicasOptimizer.apply_gradient should be called before using the hook."
            )
        self._init_tokens = self._opt.get_init_tokens_op(self._num_tokens)

    def after_create_session(self, session: Any, coord: Any) -> None:
        if self._is_chief:
            session.run(self._opt.chief_init_op)
            session.run(self._init_tokens)
        session.run(self._opt.local_step_init_op)
