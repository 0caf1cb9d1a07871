"""TF1 session-run hooks: the numbers of TF's basic_session_run_hooks_test.

Hooks are driven as TF's tests drive them through ``_HookedSession``: a real `Session` over a
fresh `Graph`, real `SessionRunContext`/`SessionRunValues`, the hooks' fetches merged into the
run (`_Hooked` below).
"""

import logging
import os

import numpy as np
import pytest

from hpcdist.compat.v1.graph import Graph, Operation
from hpcdist.compat.v1.hooks import (
    CheckpointSaverHook,
    FeedFnHook,
    FinalOpsHook,
    LoggingTensorHook,
    NanLossDuringTrainingError,
    NanTensorHook,
    SecondOrStepTimer,
    StepCounterHook,
    StopAtStepHook,
    SummarySaverHook,
)
from hpcdist.compat.v1.saver import CheckpointSaverListener, Saver, latest_checkpoint
from hpcdist.compat.v1.session import AfterOperations, Session, global_variables_initializer
from hpcdist.compat.v1.session_run_hook import SessionRunArgs, SessionRunContext, SessionRunValues
from hpcdist.compat.v1.variables import (
    Variable,
    assign,
    assign_add,
    constant,
    get_or_create_global_step,
    placeholder,
)
from hpcdist.logger import get_logger


class _Hooked:
    """TF's ``monitored_session._HookedSession``: runs through the hooks of a raw session."""

    def __init__(self, session: Session, hooks: list) -> None:
        self.session, self.hooks, self._stop = session, hooks, False

    def run(self, fetches, feed_dict=None):
        context = SessionRunContext(SessionRunArgs(fetches, feed_dict), self.session)
        extra = [hook.before_run(context) for hook in self.hooks]
        feeds = dict(feed_dict or {})
        for args in extra:
            if args is not None and args.feed_dict:
                feeds.update(args.feed_dict)
        hook_fetches = [None if a is None else a.fetches for a in extra]
        outputs, hook_values = self.session.run(
            [fetches, AfterOperations(hook_fetches)], feed_dict=feeds
        )
        for hook, value in zip(self.hooks, hook_values, strict=True):
            hook.after_run(context, SessionRunValues(value, None, None))
        self._stop = self._stop or context.stop_requested
        return outputs

    def should_stop(self) -> bool:
        return self._stop


class _Records(logging.Handler):
    """Collects the messages of hpcdist's logger (which does not propagate)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def logs():
    logger = get_logger()
    records, level = _Records(), logger.level
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    yield records
    logger.removeHandler(records)
    logger.setLevel(level)


def _noop() -> Operation:
    return Operation(None, "NoOp")


# -- StopAtStepHook -------------------------------------------------------------------------------


def test_stop_at_step_arguments():
    with pytest.raises(ValueError, match="One of num_steps or last_step must be specified"):
        StopAtStepHook()
    with pytest.raises(ValueError, match="Only one of num_steps or last_step"):
        StopAtStepHook(num_steps=10, last_step=20)
    with Graph().as_default(), pytest.raises(RuntimeError, match="Global step should be created"):
        StopAtStepHook(last_step=3).begin()


def test_stop_based_on_last_step():
    with Graph().as_default():
        hook = StopAtStepHook(last_step=10)
        step = get_or_create_global_step()
        hook.begin()
        with Session() as sess:
            sess.run(global_variables_initializer())
            hooked = _Hooked(sess, [hook])
            hook.after_create_session(sess, None)
            assert hook.last_step == 10
            for value, stops in [(5, False), (9, False), (10, True)]:
                sess.run(assign(step, np.int64(value)))
                hooked.run(_noop())
                assert hooked.should_stop() is stops, value


def test_stop_based_on_num_step():
    with Graph().as_default():
        hook = StopAtStepHook(num_steps=10)
        step = get_or_create_global_step()
        hook.begin()
        with Session() as sess:
            sess.run(global_variables_initializer())
            sess.run(assign(step, np.int64(5)))
            hook.after_create_session(sess, None)
            assert hook.last_step == 15
            hooked = _Hooked(sess, [hook])
            for value, stops in [(13, False), (14, False), (15, True)]:
                sess.run(assign(step, np.int64(value)))
                hooked.run(_noop())
                assert hooked.should_stop() is stops, value


def test_stop_with_a_train_op_incrementing_the_step():
    with Graph().as_default():
        step = get_or_create_global_step()
        train = assign_add(step, np.int64(1))
        hook = StopAtStepHook(last_step=3)
        hook.begin()
        with Session() as sess:
            sess.run(global_variables_initializer())
            hook.after_create_session(sess, None)
            hooked = _Hooked(sess, [hook])
            seen = []
            while not hooked.should_stop():
                hooked.run(train)
                seen.append(int(sess.run(step)))
            assert seen == [1, 2, 3]


# -- CheckpointSaverHook --------------------------------------------------------------------------


class _CountingListener(CheckpointSaverListener):
    def __init__(self) -> None:
        self.counts = {"begin": 0, "before_save": 0, "after_save": 0, "end": 0}
        self.steps: list[int] = []
        self.ask_for_stop = False

    def begin(self) -> None:
        self.counts["begin"] += 1

    def before_save(self, session, global_step_value) -> None:
        self.counts["before_save"] += 1

    def after_save(self, session, global_step_value) -> bool:
        self.counts["after_save"] += 1
        self.steps.append(int(global_step_value))
        return self.ask_for_stop

    def end(self, session, global_step_value) -> None:
        self.counts["end"] += 1


def _monitored(hooks, body):
    """begin, create the session, after_create_session, ``body(hooked, step)``, end."""
    for hook in hooks:
        hook.begin()
    with Session() as sess:
        sess.run(global_variables_initializer())
        for hook in hooks:
            hook.after_create_session(sess, None)
        hooked = _Hooked(sess, hooks)
        result = body(hooked)
        for hook in hooks:
            hook.end(sess)
        return result


def test_checkpoint_saver_arguments(tmp_path):
    with pytest.raises(ValueError, match="Either every_secs or every_steps"):
        CheckpointSaverHook(str(tmp_path))
    with pytest.raises(ValueError, match="Can not provide both"):
        CheckpointSaverHook(str(tmp_path), save_secs=10, save_steps=20)
    with pytest.raises(ValueError, match="cannot provide both saver and scaffold"):
        CheckpointSaverHook(str(tmp_path), save_steps=1, saver=object(), scaffold=object())
    with Graph().as_default(), pytest.raises(RuntimeError, match="CheckpointSaverHook"):
        CheckpointSaverHook(str(tmp_path), save_steps=1).begin()


def test_listener_counts_with_save_steps_1(tmp_path):
    with Graph().as_default():
        step = get_or_create_global_step()
        train = assign_add(step, np.int64(1))
        listener = _CountingListener()
        hook = CheckpointSaverHook(str(tmp_path), save_steps=1, listeners=[listener])

        def body(hooked):
            hooked.run(train)
            hooked.run(train)
            return int(hooked.session.run(step))

        assert _monitored([hook], body) == 2
    # Saves at session creation (0), after each run (1, 2); end: the step did not move.
    assert listener.counts == {"begin": 1, "before_save": 3, "after_save": 3, "end": 1}
    assert listener.steps == [0, 1, 2]
    assert latest_checkpoint(str(tmp_path)) == os.path.join(str(tmp_path), "model.ckpt-2")


def test_listener_stops_training_in_after_save(tmp_path):
    with Graph().as_default():
        step = get_or_create_global_step()
        train = assign_add(step, np.int64(1))
        listener = _CountingListener()
        hook = CheckpointSaverHook(str(tmp_path), save_steps=1, listeners=[listener])

        def body(hooked):
            hooked.run(train)
            assert not hooked.should_stop()
            listener.ask_for_stop = True
            hooked.run(train)
            return hooked.should_stop()

        assert _monitored([hook], body) is True


def test_save_steps_saves_periodically_and_at_end(tmp_path):
    with Graph().as_default():
        w = Variable(np.float32(1.0), name="w")
        step = get_or_create_global_step()
        train = Operation(None, "train", (assign_add(w, np.float32(1.0)), assign_add(step, 1)))
        listener = _CountingListener()
        saver = Saver(max_to_keep=10)
        hook = CheckpointSaverHook(str(tmp_path), save_steps=2, saver=saver, listeners=[listener])

        def body(hooked):
            for _ in range(5):
                hooked.run(train)

        _monitored([hook], body)
        assert listener.steps == [0, 2, 4, 5]  # every 2 steps, then the moved step at end
        names = sorted(f for f in os.listdir(tmp_path) if f.endswith(".h5"))
        assert names == [f"model.ckpt-{n}.h5" for n in (0, 2, 4, 5)]
        with Session() as sess:
            saver.restore(sess, str(tmp_path / "model.ckpt-4"))
            assert sess.run(w) == np.float32(5.0) and sess.run(step) == 4


# -- SecondOrStepTimer ----------------------------------------------------------------------------


def test_second_or_step_timer_steps():
    timer = SecondOrStepTimer(every_steps=1)
    assert timer.should_trigger_for_step(1)
    assert timer.update_last_triggered_step(1) == (None, None)
    assert timer.last_triggered_step() == 1
    assert not timer.should_trigger_for_step(1)
    assert timer.should_trigger_for_step(2)
    elapsed_secs, elapsed_steps = timer.update_last_triggered_step(5)
    assert elapsed_steps == 4 and elapsed_secs >= 0
    assert timer.update_last_triggered_step(7)[1] == 2
    assert timer.last_triggered_step() == 7


def test_second_or_step_timer_every_steps_3():
    timer = SecondOrStepTimer(every_steps=3)
    timer.update_last_triggered_step(1)
    assert not timer.should_trigger_for_step(2) and not timer.should_trigger_for_step(3)
    assert timer.should_trigger_for_step(4)


def test_second_or_step_timer_arguments():
    with pytest.raises(ValueError, match="Either every_secs or every_steps"):
        SecondOrStepTimer()
    with pytest.raises(ValueError, match="Can not provide both"):
        SecondOrStepTimer(every_secs=1, every_steps=1)


# -- LoggingTensorHook ----------------------------------------------------------------------------


def test_logging_tensor_hook_arguments():
    with pytest.raises(ValueError, match="Invalid every_n_iter"):
        LoggingTensorHook(tensors=["t"], every_n_iter=0)
    with pytest.raises(ValueError, match="Invalid every_n_iter"):
        LoggingTensorHook(tensors=["t"], every_n_iter=-10)
    with pytest.raises(ValueError, match="exactly one of every_n_iter and every_n_secs"):
        LoggingTensorHook(tensors=["t"])
    with pytest.raises(ValueError, match="exactly one of every_n_iter and every_n_secs"):
        LoggingTensorHook(tensors=["t"], every_n_iter=5, every_n_secs=5)


def test_logging_every_n_iter_logs_runs_1_11_21_31(logs):
    with Graph().as_default():
        counter = Variable(np.int64(0), name="counter")
        train = assign_add(counter, np.int64(1))
        hook = LoggingTensorHook(tensors={"run": counter}, every_n_iter=10)
        hook.begin()
        with Session() as sess:
            sess.run(global_variables_initializer())
            hooked = _Hooked(sess, [hook])
            for _ in range(35):
                hooked.run(train)
    runs = [m.split(" (")[0] for m in logs.messages if m.startswith("run = ")]
    assert runs == ["run = 1", "run = 11", "run = 21", "run = 31"]
    assert next(m for m in logs.messages if m.startswith("run = 11")).endswith(" sec)")


def test_logging_formatter_and_at_end(logs):
    with Graph().as_default():
        t = Variable(np.float32(42.0), name="foo")
        hook = LoggingTensorHook(
            tensors=[t], every_n_iter=1, formatter=lambda items: f"qqq={items[t.name]}"
        )
        at_end = LoggingTensorHook(tensors={"foo": t}, at_end=True)
        hooks = [hook, at_end]
        _ = _monitored(hooks, lambda hooked: hooked.run(_noop()))
    assert logs.messages.count("qqq=42.0") == 1
    assert logs.messages.count("foo = 42.0") == 1  # at_end only: once, at the end


# -- NanTensorHook --------------------------------------------------------------------------------


def test_nan_tensor_hook_raises_or_requests_stop(logs):
    with Graph().as_default():
        loss = placeholder(np.float32, ())
        with Session() as sess:
            ok = _Hooked(sess, [NanTensorHook(loss)])
            ok.run(_noop(), {loss: 2.5})
            assert not ok.should_stop()
            with pytest.raises(NanLossDuringTrainingError, match="NaN loss during training"):
                ok.run(_noop(), {loss: np.nan})
            lenient = _Hooked(sess, [NanTensorHook(loss, fail_on_nan_loss=False)])
            lenient.run(_noop(), {loss: 1.0})
            assert not lenient.should_stop()
            lenient.run(_noop(), {loss: np.nan})
            assert lenient.should_stop()
    assert logs.messages.count("Model diverged with loss = NaN.") == 2


# -- StepCounterHook, SummarySaverHook, FinalOpsHook, FeedFnHook ----------------------------------


def test_step_counter_logs_global_step_per_sec(logs):
    with Graph().as_default():
        step = get_or_create_global_step()
        train = assign_add(step, np.int64(1))
        hook = StepCounterHook(every_n_steps=10)
        _monitored([hook], lambda hooked: [hooked.run(train) for _ in range(30)])
    # TF (test_step_counter_every_n_steps): the clock starts at step 1, rates at 11 and 21.
    assert [s for s, _ in hook.history] == [11, 21]
    assert all(rate > 0 for _, rate in hook.history)
    assert sum(m.startswith("global_step/sec: ") for m in logs.messages) == 2
    with pytest.raises(ValueError, match="exactly one of every_n_steps and every_n_secs"):
        StepCounterHook(every_n_steps=None)


def test_step_counter_warns_when_the_step_does_not_move(logs):
    with Graph().as_default():
        get_or_create_global_step()
        hook = StepCounterHook(every_n_steps=10)
        _monitored([hook], lambda hooked: [hooked.run(_noop()) for _ in range(8)])
    warnings = [m for m in logs.messages if m.startswith("It seems that global step")]
    assert len(warnings) == 5  # TF logs it for the first five times only


def test_summary_saver_final_ops_and_feed_fn(tmp_path):
    with pytest.raises(ValueError, match="Either every_secs or every_steps"):
        SummarySaverHook(output_dir=str(tmp_path))
    SummarySaverHook(save_steps=100, output_dir=str(tmp_path))
    assert os.listdir(tmp_path) == []  # writes nothing
    with Graph().as_default():
        x = placeholder(np.float32, ())
        total = Variable(np.float32(0.0), name="total")
        train = assign_add(total, lambda: x)
        feeds = iter([1.0, 2.0, 4.0])
        final = FinalOpsHook(lambda: constant(10.0) + total.numpy())
        hooks = [FeedFnHook(lambda: {x: next(feeds)}), final]
        _monitored(hooks, lambda hooked: [hooked.run(train) for _ in range(3)])
    assert final.final_ops_values == np.float32(17.0)


def test_stop_at_step_hook_uses_the_step_its_train_op_left():
    """The step fetched before a run is stale by other workers' steps; the train op's is not."""
    with Graph().as_default():
        gs = get_or_create_global_step()
        hook = StopAtStepHook(last_step=5)
        hook.begin()
        with Session() as sess:
            sess.run(global_variables_initializer())
            sess.run(assign(gs, np.int64(5)))
            context = SessionRunContext(SessionRunArgs(None), sess)
            hook.after_run(context, SessionRunValues(np.int64(3), None, None))
            assert not context.stop_requested  # TF's estimate, 3 + 1, is short of 5
            sess.known_step = 5  # this worker's train op reserved the last step
            hook.after_run(context, SessionRunValues(np.int64(3), None, None))
            assert context.stop_requested
