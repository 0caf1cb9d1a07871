"""TF1 sessions, monitored sessions, hooks and checkpoints: ``tf.compat.v1`` beside hpcdist's.

Each case builds its graph in ``with tf.Graph().as_default():`` and runs it in a local session
(``tf.compat.v1.Session(graph=...)``, ``MonitoredTrainingSession`` without a cluster), as a TF1
program on one machine; TF stays eager outside those blocks. Checkpoint files differ by design
(one ``.h5`` per checkpoint instead of ``.index``/``.data-*``/``.meta``): the cases compare the
checkpoint prefixes (``model.ckpt-N``), what ``latest_checkpoint`` and ``get_checkpoint_state``
return, and the values restored.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conformance.helpers import assert_documented, assert_same, attempt, outcome
from tests.conformance.tf1_sides import HD1, TF1, V1

F32 = np.float32


def conform1(case: Callable[..., Any], tmp_path: Path, *args: Any) -> Any:
    """Run ``case(side, directory, *args)`` with each library in its own directory; compare."""
    results = []
    for side in (TF1, HD1):
        directory = tmp_path / side.name
        directory.mkdir()
        results.append(outcome(case, side, str(directory), *args))
    assert_same(*results)
    return results[0]


def short(var: Any) -> str:
    """A variable's name without TF's ``:0``."""
    return var.name.split(":")[0]


def prefixes(directory: str) -> list[str]:
    """The checkpoint prefixes (``model.ckpt-N``) of the files in ``directory``, sorted by N."""
    found = {m.group(1) for f in os.listdir(directory) if (m := re.match(r"(.+-\d+)\.", f))}
    return sorted(found, key=lambda p: int(p.rsplit("-", 1)[1]))


def state(lib: V1, directory: str) -> dict[str, Any]:
    """``latest_checkpoint`` and ``get_checkpoint_state``, as names relative to ``directory``."""
    t = lib.tf
    latest = t.train.latest_checkpoint(directory)
    ckpt = t.train.get_checkpoint_state(directory)
    relative = (lambda p: os.path.relpath(p, directory)) if ckpt is not None else None
    return {
        "latest": None if latest is None else os.path.relpath(latest, directory),
        "model_checkpoint_path": None if ckpt is None else relative(ckpt.model_checkpoint_path),
        "all": None if ckpt is None else [relative(p) for p in ckpt.all_model_checkpoint_paths],
    }


W0 = np.array([[0.5], [-1.0]], F32)
X = np.array([[1.0, 2.0], [3.0, -1.0]], F32)
Y = np.array([[1.0], [0.0]], F32)


def linear_model(lib: V1) -> tuple[Any, ...]:
    """``w``, a global step, and the train op of a squared-error loss (GD 0.05)."""
    t = lib.tf
    w = t.Variable(W0, name="w")
    global_step = t.train.get_or_create_global_step()
    loss = lib.tensor(lambda: t.reduce_mean(t.square(t.matmul(t.constant(X), w) - Y)))
    train_op = t.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=global_step)
    return w, global_step, loss, train_op


# -- plain sessions ---------------------------------------------------------------------------


def uninitialized_reads(lib: V1, directory: str) -> dict[str, Any]:
    """Reads and updates before the initializers ran, per variable and per session."""
    del directory
    t = lib.tf
    graph = t.Graph()
    with graph.as_default():
        w = t.Variable(np.array([1.0, 2.0], F32), name="w")
        v = t.Variable(np.float32(3.0), name="v")
        add = t.assign_add(w, np.array([1.0, 1.0], F32))
        out: dict[str, Any] = {}
        with t.Session(graph=graph) as sess:
            out["read"] = attempt(lambda: sess.run(w))
            out["assign_add"] = attempt(lambda: sess.run(add))
            sess.run(t.variables_initializer([w]))
            out["w"] = sess.run(w)
            out["v_not_yet"] = attempt(lambda: sess.run(v))
            sess.run(v.initializer)
            out["both"] = sess.run([w, v])
            sess.run(add)
            out["added"] = sess.run(w)
        with t.Session(graph=graph) as again:
            out["new_session"] = attempt(lambda: again.run(w))
            again.run(t.global_variables_initializer())
            out["new_session_initialized"] = again.run(w)
    return out


def test_reading_before_the_initializer_raises(tmp_path: Path) -> None:
    """``FailedPreconditionError`` until the initializer runs, in each new local session."""
    expected = conform1(uninitialized_reads, tmp_path)
    assert expected["read"].family == "FailedPreconditionError"
    assert expected["new_session"].family == "FailedPreconditionError"


def session_basics(lib: V1, directory: str) -> dict[str, Any]:
    """Fetch structures, feeds, strings, errors of a plain session."""
    del directory
    t = lib.tf
    graph = t.Graph()
    with graph.as_default():
        x = t.placeholder(t.float32, [None, 2], name="x")
        w = t.Variable(np.array([[1.0], [2.0]], F32), name="w")
        y = lib.tensor(lambda: t.matmul(x, w))
        hello = t.constant("Hello, distributed TensorFlow!")
        out: dict[str, Any] = {}
        sess = t.Session(graph=graph)
        sess.run(t.global_variables_initializer())
        feed = {x: X}
        out["nested"] = sess.run({"a": [y, w], "b": (w,)}, feed)
        out["hello"] = sess.run(hello)
        out["scalar"] = sess.run(t.constant(2.5))
        out["unfed"] = attempt(lambda: sess.run(y))
        out["bad_shape"] = attempt(lambda: sess.run(y, {x: np.ones((2, 3), F32)}))
        out["callable"] = sess.make_callable(y, [x])(X)
        sess.close()
        out["closed"] = attempt(lambda: sess.run(w))
    return out


def test_session_basics(tmp_path: Path) -> None:
    """Nested fetches, ``bytes`` for strings, TF's errors for missing and misshapen feeds."""
    expected = conform1(session_basics, tmp_path)
    assert expected["hello"] == b"Hello, distributed TensorFlow!"


# -- MonitoredTrainingSession, StopAtStepHook, CheckpointSaverHook ----------------------------


def monitored_session_run(lib: V1, directory: str, last_step: int) -> dict[str, Any]:
    """One ``MonitoredTrainingSession`` to ``last_step`` on ``directory``, without a cluster."""
    t = lib.tf
    graph = t.Graph()
    with graph.as_default():
        w, global_step, _loss, train_op = linear_model(lib)
        start: list[Any] = []

        class Start(t.train.SessionRunHook):
            def after_create_session(self, session: Any, coord: Any) -> None:
                start.append(session.run([global_step, w]))

        runs = 0
        with t.train.MonitoredTrainingSession(
            checkpoint_dir=directory,
            hooks=[t.train.StopAtStepHook(last_step=last_step), Start()],
            save_checkpoint_steps=3,
            log_step_count_steps=0,
            save_summaries_steps=0,
        ) as sess:
            while not sess.should_stop():
                sess.run(train_op)
                runs += 1
        return {
            "start": start,
            "runs": runs,
            "checkpoints": prefixes(directory),
            **state(lib, directory),
            "finalized_after_close": graph.finalized,
        }


def monitored_training(lib: V1, directory: str) -> dict[str, Any]:
    """Two ``MonitoredTrainingSession``s on one checkpoint directory (to steps 7, then 10)."""
    return {
        "session1": monitored_session_run(lib, directory, 7),
        "session2": monitored_session_run(lib, directory, 10),
    }


def test_monitored_training_session_checkpoints(tmp_path: Path) -> None:
    """Saves at creation, every 3 steps and at the end; the second session restores step 7."""
    expected = conform1(monitored_training, tmp_path)
    assert expected["session1"]["checkpoints"] == [
        "model.ckpt-0",
        "model.ckpt-3",
        "model.ckpt-6",
        "model.ckpt-7",
    ]
    assert int(expected["session2"]["start"][0][0]) == 7


def stop_at_num_steps(lib: V1, directory: str) -> dict[str, Any]:
    """``StopAtStepHook(num_steps=3)`` counts from the step the session starts at."""
    t = lib.tf
    out: dict[str, Any] = {}
    for session in (1, 2):
        graph = t.Graph()
        with graph.as_default():
            _, _global_step, _, train_op = linear_model(lib)
            runs = 0
            with t.train.MonitoredTrainingSession(
                checkpoint_dir=directory,
                hooks=[t.train.StopAtStepHook(num_steps=3)],
                log_step_count_steps=0,
                save_summaries_steps=0,
            ) as sess:
                while not sess.should_stop():
                    sess.run(train_op)
                    runs += 1
            out[f"session{session}"] = {
                "runs": runs,
                "checkpoints": prefixes(directory),
                **state(lib, directory),
            }
    return out


def test_stop_at_step_hook_num_steps(tmp_path: Path) -> None:
    """Three runs per session; the default 600 s saver writes at creation and at the end."""
    conform1(stop_at_num_steps, tmp_path)


def listener_events(lib: V1, directory: str) -> list[Any]:
    """A `CheckpointSaverListener`'s calls around ``save_steps=2`` saves up to step 5."""
    t = lib.tf
    events: list[Any] = []

    class Listener(t.train.CheckpointSaverListener):
        def begin(self) -> None:
            events.append(("begin",))

        def before_save(self, session: Any, global_step_value: Any) -> None:
            events.append(("before_save", int(global_step_value)))

        def after_save(self, session: Any, global_step_value: Any) -> None:
            events.append(("after_save", int(global_step_value), prefixes(directory)[-1]))

        def end(self, session: Any, global_step_value: Any) -> None:
            events.append(("end", int(global_step_value)))

    graph = t.Graph()
    with graph.as_default():
        _, _global_step, _, train_op = linear_model(lib)
        hooks = [
            t.train.StopAtStepHook(last_step=5),
            t.train.CheckpointSaverHook(directory, save_steps=2, listeners=[Listener()]),
        ]
        with t.train.MonitoredSession(t.train.ChiefSessionCreator(), hooks=hooks) as sess:
            while not sess.should_stop():
                sess.run(train_op)
    return events


def test_checkpoint_saver_hook_listeners(tmp_path: Path) -> None:
    """Listener calls at steps 0, 2, 4 and the end's 5, with the files saved by then."""
    conform1(listener_events, tmp_path)


# -- LoggingTensorHook, StepCounterHook -------------------------------------------------------


def logging_cadence(lib: V1, directory: str, every_n_iter: int) -> list[Any]:
    """The runs at which a LoggingTensorHook logs over 8 runs (and at the end), and its tags.

    Which value TF fetches for a variable its train op updates in the same run is a race (the
    read does not wait for the update), so the case compares when the hook logs and what, and
    the values only at the end.
    """
    del directory
    t = lib.tf
    logged: list[Any] = []
    runs = [0]

    def formatter(values: dict[str, Any]) -> str:
        logged.append((runs[0], sorted(values)))
        return ""

    graph = t.Graph()
    with graph.as_default():
        w, global_step, _loss, train_op = linear_model(lib)
        hook = t.train.LoggingTensorHook(
            {"step": global_step, "w": w}, every_n_iter=every_n_iter, formatter=formatter
        )
        at_end = t.train.LoggingTensorHook(
            {"step": global_step, "w": w},
            at_end=True,
            formatter=lambda values: logged.append(("end", dict(values))) or "",
        )
        stop = t.train.StopAtStepHook(last_step=8)
        hooks = [hook, at_end, stop]
        with t.train.MonitoredSession(t.train.ChiefSessionCreator(), hooks=hooks) as sess:
            while not sess.should_stop():
                runs[0] += 1
                sess.run(train_op)
    return logged


@pytest.mark.parametrize("every_n_iter", [1, 3, 5])
def test_logging_tensor_hook_cadence(tmp_path: Path, every_n_iter: int) -> None:
    """Logged at runs 0, N, 2N... of the session (hook calls count every run) and at the end."""
    conform1(logging_cadence, tmp_path, every_n_iter)


class RecordingWriter:
    """A summary writer that keeps the steps and tags written (TF's and hpcdist's calls)."""

    def __init__(self) -> None:
        self.points: list[tuple[int, str]] = []

    def add_summary(self, summary: Any, global_step: Any = None) -> None:
        """TF's call: a ``Summary`` proto at a step."""
        self.points.extend((int(global_step), v.tag) for v in summary.value)

    def add_scalars(self, scalars: dict[str, float], step: int) -> None:
        """hpcdist's call: scalars by tag at a step."""
        self.points.extend((int(step), tag) for tag in scalars)

    def flush(self) -> None:
        """Nothing buffered."""


def step_counter_cadence(lib: V1, directory: str, every_n_steps: int) -> list[Any]:
    """The global steps at which a StepCounterHook writes its rate over 9 steps."""
    del directory
    t = lib.tf
    writer = RecordingWriter()
    graph = t.Graph()
    with graph.as_default():
        _, _, _, train_op = linear_model(lib)
        hooks = [
            t.train.StepCounterHook(every_n_steps=every_n_steps, summary_writer=writer),
            t.train.StopAtStepHook(last_step=9),
        ]
        with t.train.MonitoredSession(t.train.ChiefSessionCreator(), hooks=hooks) as sess:
            while not sess.should_stop():
                sess.run(train_op)
    return writer.points


@pytest.mark.parametrize("every_n_steps", [1, 2, 4])
def test_step_counter_hook_cadence(tmp_path: Path, every_n_steps: int) -> None:
    """A rate every N global steps after the first trigger, tagged ``global_step/sec``."""
    conform1(step_counter_cadence, tmp_path, every_n_steps)


# -- Saver ------------------------------------------------------------------------------------


def saver_numbering(lib: V1, directory: str) -> dict[str, Any]:
    """``Saver(max_to_keep=2)``: names returned, files kept, state, restore of a kept one."""
    t = lib.tf
    graph = t.Graph()
    with graph.as_default():
        v = t.Variable(np.float32(0.0), name="v")
        global_step = t.train.get_or_create_global_step()
        saver = t.train.Saver(max_to_keep=2)
        out: dict[str, Any] = {"empty": state(lib, directory), "saved": []}
        path = os.path.join(directory, "model.ckpt")
        with t.Session(graph=graph) as sess:
            sess.run(t.global_variables_initializer())
            for n in range(1, 5):
                sess.run(t.assign(v, np.float32(n)))
                sess.run(t.assign(global_step, np.int64(10 * n)))
                step = global_step if n % 2 else n
                out["saved"].append(os.path.relpath(saver.save(sess, path, step), directory))
            out["files"] = prefixes(directory)
            out["state"] = state(lib, directory)
            out["last_checkpoints"] = [
                os.path.relpath(p, directory) for p in saver.last_checkpoints
            ]
            saver.restore(sess, t.train.latest_checkpoint(directory))
            out["restored"] = sess.run([v, global_step])
            out["exists"] = [
                bool(t.train.checkpoint_exists(os.path.join(directory, name)))
                for name in ("model.ckpt-30", "model.ckpt-4", "model.ckpt-10")
            ]
            out["missing"] = attempt(lambda: saver.restore(sess, os.path.join(directory, "nope")))
    return out


def test_saver_numbering_and_state(tmp_path: Path) -> None:
    """``-N`` from a step number or a global-step variable; the two newest kept and listed."""
    expected = conform1(saver_numbering, tmp_path)
    assert expected["saved"] == ["model.ckpt-10", "model.ckpt-2", "model.ckpt-30", "model.ckpt-4"]


def unnumbered_save(lib: V1, directory: str) -> dict[str, Any]:
    """``saver.save(sess, path)`` without ``global_step``, then a numbered one."""
    t = lib.tf
    graph = t.Graph()
    with graph.as_default():
        v = t.Variable(np.float32(1.5), name="v")
        saver = t.train.Saver()
        with t.Session(graph=graph) as sess:
            sess.run(t.global_variables_initializer())
            path = os.path.join(directory, "model.ckpt")
            first = os.path.relpath(saver.save(sess, path), directory)
            after_first = state(lib, directory)
            sess.run(t.assign(v, np.float32(2.5)))
            second = os.path.relpath(saver.save(sess, path, global_step=3), directory)
            after_second = state(lib, directory)
            saver.restore(sess, os.path.join(directory, first))
            return {
                "first": first,
                "after_first": after_first,
                "second": second,
                "latest_after_second": after_second["latest"],
                "restored_first": sess.run(v),
                "listed_after_second": after_second["all"],
            }


UNNUMBERED = (
    "docs/differences-from-tensorflow.md: A checkpoint saved without `global_step` is the "
    "latest one but is not kept in the list"
)


def test_saver_save_without_global_step(tmp_path: Path) -> None:
    """An unnumbered save is ``model.ckpt``, the latest checkpoint until the next save."""
    results = []
    for side in (TF1, HD1):
        directory = tmp_path / side.name
        directory.mkdir()
        results.append(outcome(unnumbered_save, side, str(directory)))
    expected, got = results
    listed = expected.pop("listed_after_second"), got.pop("listed_after_second")
    assert_same(expected, got)
    assert_documented(UNNUMBERED)
    assert listed == (["model.ckpt", "model.ckpt-3"], ["model.ckpt-3"])


def scaffold_session(lib: V1, directory: str) -> dict[str, Any]:
    """A session with a Scaffold ``init_fn``, a FinalOpsHook and a FeedFnHook, two steps."""
    t = lib.tf
    graph = t.Graph()
    with graph.as_default():
        _w, global_step, _loss, train_op = linear_model(lib)
        extra = t.Variable(np.float32(0.0), name="extra")
        fed = t.placeholder(t.float32, [], name="fed")
        bump = t.assign_add(extra, lib.tensor(lambda: fed * 1.0))
        calls: list[str] = []
        set_extra = t.assign(extra, np.float32(10.0))

        def init_fn(scaffold: Any, sess: Any) -> None:
            calls.append("init_fn")
            sess.run(set_extra)

        final = t.train.FinalOpsHook([extra, global_step])
        feed = t.train.FeedFnHook(lambda: {fed: np.float32(2.0)})
        with t.train.MonitoredTrainingSession(
            checkpoint_dir=directory,
            scaffold=t.train.Scaffold(init_fn=init_fn),
            hooks=[final, feed, t.train.StopAtStepHook(num_steps=2)],
            log_step_count_steps=0,
            save_summaries_steps=0,
        ) as sess:
            while not sess.should_stop():
                sess.run([train_op, bump])
        return {"calls": calls, "final": final.final_ops_values}


def scaffold_and_hooks(lib: V1, directory: str) -> dict[str, Any]:
    """Two such sessions: the second restores, so its ``init_fn`` does not run."""
    return {
        "session1": scaffold_session(lib, directory),
        "session2": scaffold_session(lib, directory),
    }


def test_scaffold_init_fn_final_ops_and_feed_fn_hooks(tmp_path: Path) -> None:
    """``init_fn`` runs only without a checkpoint; final values after two steps per session."""
    conform1(scaffold_and_hooks, tmp_path)


def names_and_collections(lib: V1, directory: str) -> dict[str, Any]:
    """Default and scoped names, slots of a scoped variable, collections in creation order."""
    del directory
    t = lib.tf
    graph = t.Graph()
    with graph.as_default():
        a = t.Variable(1.0)
        b = t.Variable(2.0)
        with t.name_scope("layer"):
            w = t.Variable(np.ones((2, 1), F32), name="w")
            w2 = t.Variable(np.ones((2, 1), F32), name="w")
        with t.name_scope("layer"):
            again = t.Variable(0.0, name="w")
        local = t.Variable(3.0, name="local", collections=[t.GraphKeys.LOCAL_VARIABLES])
        frozen = t.Variable(4.0, name="frozen", trainable=False)
        loss = lib.tensor(lambda: t.reduce_sum(w) + t.reduce_sum(w2) + a * b)
        opt = t.train.AdamOptimizer(0.1)
        opt.minimize(loss, var_list=[w, w2, a])
        names = [short(v) for v in (a, b, w, w2, again, local, frozen)]
        slots = [short(opt.get_slot(v, s)) for v in (w, w2, a) for s in ("m", "v")]
        with t.Session(graph=graph) as sess:
            sess.run([t.global_variables_initializer(), t.local_variables_initializer()])
            with sess.as_default():
                value = w2.eval()
        return {
            "names": names,
            "slots": slots,
            "global": [short(v) for v in t.global_variables()],
            "trainable": [short(v) for v in t.trainable_variables()],
            "local": [short(v) for v in t.local_variables()],
            "scoped": [short(v) for v in t.global_variables(scope="layer")],
            "eval": value,
        }


def test_names_scopes_and_collections(tmp_path: Path) -> None:
    """TF's unique names (``Variable_1``, ``layer_1/w``), slot names, collection order."""
    conform1(names_and_collections, tmp_path)


def nan_loss(lib: V1, directory: str, fail: bool) -> dict[str, Any]:
    """NanTensorHook on a loss that turns NaN at the third run."""
    del directory
    t = lib.tf
    graph = t.Graph()
    with graph.as_default():
        w, _global_step, _loss, train_op = linear_model(lib)
        scale = t.placeholder(t.float32, [])
        watched = lib.tensor(lambda: t.reduce_sum(w) * scale)
        hook = t.train.NanTensorHook(watched, fail_on_nan_loss=fail)
        runs = 0
        outcome_ = "stopped"
        try:
            with t.train.MonitoredSession(t.train.ChiefSessionCreator(), hooks=[hook]) as sess:
                while not sess.should_stop() and runs < 5:
                    sess.run(train_op, {scale: np.float32("nan") if runs == 2 else 1.0})
                    runs += 1
        except Exception as error:  # compared by type name
            outcome_ = type(error).__name__
        return {"runs": runs, "outcome": outcome_}


@pytest.mark.parametrize("fail", [True, False])
def test_nan_tensor_hook(tmp_path: Path, fail: bool) -> None:
    """A NaN raises NanLossDuringTrainingError, or stops after that run."""
    conform1(nan_loss, tmp_path, fail)


def restore_mismatch(lib: V1, directory: str) -> dict[str, Any]:
    """Restoring into a graph with a variable the checkpoint lacks, or of another shape."""
    t = lib.tf
    path = os.path.join(directory, "model.ckpt")
    graph = t.Graph()
    with graph.as_default():
        t.Variable(np.ones(2, F32), name="v")
        with t.Session(graph=graph) as sess:
            sess.run(t.global_variables_initializer())
            t.train.Saver().save(sess, path, global_step=1)
    out: dict[str, Any] = {}
    for name, shape in (("missing", None), ("shape", (3,))):
        graph = t.Graph()
        with graph.as_default():
            v = t.Variable(np.zeros(shape or 2, F32), name="v")
            if shape is None:
                t.Variable(np.float32(0.0), name="extra")
            saver = t.train.Saver()
            with t.Session(graph=graph) as sess:
                sess.run(t.global_variables_initializer())
                out[name] = attempt(lambda: saver.restore(sess, path + "-1"))  # noqa: B023
                out[f"{name}_after"] = sess.run(v)
    return out


RESHAPED = "docs/differences-from-tensorflow.md: `Saver.restore` refuses a value of another shape"


def test_restore_of_a_checkpoint_that_does_not_fit(tmp_path: Path) -> None:
    """A missing key is TF's NotFoundError, nothing restored; another shape: documented."""
    results = []
    for side in (TF1, HD1):
        directory = tmp_path / side.name
        directory.mkdir()
        results.append(outcome(restore_mismatch, side, str(directory)))
    expected, got = results
    reshaped = [(r.pop("shape"), r.pop("shape_after")) for r in results]
    assert_same(expected, got)
    assert_documented(RESHAPED)
    assert reshaped[0][0] is None and reshaped[0][1].tolist() == [1.0, 1.0]
    assert reshaped[1][0].family == "ValueError" and reshaped[1][1].tolist() == [0.0, 0.0, 0.0]
