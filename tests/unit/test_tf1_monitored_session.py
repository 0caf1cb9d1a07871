"""TF1 monitored sessions: the cases and numbers of TF's monitored_session_test.

One process, each test on a fresh `tf.Graph`; checkpoints are real HDF5 files in ``tmp_path``.
TF's ``do_step = tf.assign_add(gstep, 1)`` returns the new step; here an assign is an
operation (None when run), so ``run([do_step, gstep])`` runs it and then reads the step.
"""

from collections import Counter

import numpy as np
import pytest

import hpcdist.compat.v1 as tf
from hpcdist.compat.v1.hooks import CheckpointSaverHook, StepCounterHook, SummarySaverHook
from hpcdist.compat.v1.session import Session
from hpcdist.errors import AbortedError, FailedPreconditionError, OutOfRangeError


class FakeHook(tf.train.SessionRunHook):
    """TF's FakeHook: counts calls, returns ``request`` from before_run, may request a stop."""

    def __init__(self):
        self.should_stop = False
        self.request = None
        self.call_counter = Counter()
        self.last_run_context = None
        self.last_run_values = None

    def begin(self):
        self.call_counter["begin"] += 1

    def after_create_session(self, session, coord):
        self.call_counter["after_create_session"] += 1

    def before_run(self, run_context):
        self.call_counter["before_run"] += 1
        self.last_run_context = run_context
        return self.request

    def after_run(self, run_context, run_values):
        self.call_counter["after_run"] += 1
        self.last_run_values = run_values
        if self.should_stop:
            run_context.request_stop()

    def end(self, session):
        self.call_counter["end"] += 1


class RaiseOnceAtCountN(tf.train.SessionRunHook):
    """TF's hook raising ``ex`` in the N-th before_run (once)."""

    def __init__(self, n, ex):
        self.n, self.ex, self.raised = n, ex, False
        self.created = 0
        self.ended = 0

    def after_create_session(self, session, coord):
        self.created += 1

    def before_run(self, run_context):
        self.n -= 1
        if self.n == 0 and not self.raised:
            self.raised = True
            raise self.ex
        return None

    def end(self, session):
        self.ended += 1


def _step_graph():
    """The global step and TF's ``do_step`` (assign_add 1)."""
    gstep = tf.train.get_or_create_global_step()
    return gstep, tf.assign_add(gstep, 1)


def _step(session, do_step, gstep):
    """Run ``do_step`` and return the new global step (TF's ``session.run(do_step)``)."""
    return int(session.run(do_step))


# -- MonitoredTrainingSession -----------------------------------------------------------------


def test_saving_restoring_checkpoint(tmp_path):
    logdir = str(tmp_path / "test_saving_restoring_checkpoint")
    with tf.Graph().as_default():
        gstep, do_step = _step_graph()
        with tf.train.MonitoredTrainingSession(is_chief=True, checkpoint_dir=logdir) as session:
            assert session.run(gstep) == 0
            assert _step(session, do_step, gstep) == 1
            assert _step(session, do_step, gstep) == 2
        assert tf.train.latest_checkpoint(logdir).endswith("model.ckpt-2")
        # A restart finds the checkpoint and recovers automatically.
        with tf.train.MonitoredTrainingSession(is_chief=True, checkpoint_dir=logdir) as session:
            assert session.run(gstep) == 2


def test_custom_saving(tmp_path):
    logdir = str(tmp_path / "test_custom_saving")
    fake_hook = FakeHook()
    with tf.Graph().as_default():
        gstep, do_step = _step_graph()
        with tf.train.MonitoredTrainingSession(
            is_chief=True,
            checkpoint_dir=logdir,
            chief_only_hooks=[fake_hook],
            save_checkpoint_secs=0,
        ) as session:
            assert session.run(gstep) == 0
            assert _step(session, do_step, gstep) == 1
            assert _step(session, do_step, gstep) == 2
        assert fake_hook.call_counter["begin"] == 1
        assert tf.train.latest_checkpoint(logdir) is None
        # A restart finds no checkpoint: nothing was saved.
        with tf.train.MonitoredTrainingSession(is_chief=True, checkpoint_dir=logdir) as session:
            assert session.run(gstep) == 0


def test_training_session_default_hooks(tmp_path):
    with tf.Graph().as_default():
        _step_graph()
        with tf.train.MonitoredTrainingSession() as session:
            # No checkpoint_dir nor summary_dir: no saver, counter or summary hook.
            assert session._hooks == []
    with tf.Graph().as_default():
        _step_graph()
        with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path)) as session:
            assert [type(h) for h in session._hooks] == [
                StepCounterHook,
                SummarySaverHook,
                CheckpointSaverHook,
            ]
            counter, summaries, saver_hook = session._hooks
            assert counter._timer._every_steps == 100
            assert summaries._timer._every_steps == 100
            # Neither save_checkpoint_secs nor save_checkpoint_steps: every 600 s.
            assert saver_hook._timer._every_secs == 600
            assert saver_hook._timer._every_steps is None
    with tf.Graph().as_default():
        _step_graph()
        with tf.train.MonitoredTrainingSession(
            checkpoint_dir=str(tmp_path / "steps"), save_checkpoint_steps=7
        ) as session:
            (saver_hook,) = [h for h in session._hooks if isinstance(h, CheckpointSaverHook)]
            assert (saver_hook._timer._every_secs, saver_hook._timer._every_steps) == (None, 7)


def test_chief_only_hooks_run_only_on_the_chief(tmp_path):
    with tf.Graph().as_default():
        gstep, do_step = _step_graph()
        chief_hook, user_hook = FakeHook(), FakeHook()
        with tf.train.MonitoredTrainingSession(
            is_chief=True,
            checkpoint_dir=str(tmp_path),
            hooks=[user_hook],
            chief_only_hooks=[chief_hook],
        ) as session:
            assert session._hooks[0] is chief_hook
            assert session._hooks[-1] is user_hook
            assert any(isinstance(h, CheckpointSaverHook) for h in session._hooks)
            _step(session, do_step, gstep)
        for hook in (chief_hook, user_hook):
            assert hook.call_counter["begin"] == 1
            assert hook.call_counter["after_run"] == 1
            assert hook.call_counter["end"] == 1
    with tf.Graph().as_default():
        gstep, do_step = _step_graph()
        chief_hook, user_hook = FakeHook(), FakeHook()
        with tf.train.MonitoredTrainingSession(
            is_chief=False,
            checkpoint_dir=str(tmp_path / "worker"),
            hooks=[user_hook],
            chief_only_hooks=[chief_hook],
        ) as session:
            assert session._hooks == [user_hook]
            # One process: the worker's global step is its own, initialized without waiting.
            assert _step(session, do_step, gstep) == 1
        assert chief_hook.call_counter == Counter()
        assert user_hook.call_counter["after_run"] == 1
        assert not (tmp_path / "worker").exists()


# -- StopAtStepHook through MonitoredSession ------------------------------------------------------


def test_last_step(tmp_path):
    with tf.Graph().as_default():
        gstep, do_step = _step_graph()
        # Run till step 3 and save.
        scaffold = tf.train.Scaffold().finalize()
        with tf.train.MonitoredSession(hooks=[tf.train.StopAtStepHook(last_step=3)]) as session:
            assert session.run(gstep) == 0
            assert not session.should_stop()
            for expected in (1, 2):
                assert _step(session, do_step, gstep) == expected
                assert not session.should_stop()
            assert _step(session, do_step, gstep) == 3
            assert session.should_stop()
            save_path = scaffold.saver.save(session._sess, str(tmp_path / "step-3"))

        # Run till step 5.
        def load_ckpt(scaffold, sess):
            scaffold.saver.restore(sess, save_path)

        creator = tf.train.ChiefSessionCreator(tf.train.Scaffold(init_fn=load_ckpt))
        hooks = [tf.train.StopAtStepHook(last_step=5)]
        with tf.train.MonitoredSession(hooks=hooks, session_creator=creator) as session:
            assert session.run(gstep) == 3
            assert not session.should_stop()
            assert _step(session, do_step, gstep) == 4
            assert not session.should_stop()
            assert _step(session, do_step, gstep) == 5
            assert session.should_stop()


def test_num_steps(tmp_path):
    with tf.Graph().as_default():
        gstep, do_step = _step_graph()
        scaffold = tf.train.Scaffold().finalize()
        with tf.train.MonitoredSession(hooks=[tf.train.StopAtStepHook(num_steps=3)]) as session:
            for stops in (False, False, True):
                session.run(do_step)
                assert session.should_stop() is stops
            save_path = scaffold.saver.save(session._sess, str(tmp_path / "step-3"))

        def load_ckpt(scaffold, sess):
            scaffold.saver.restore(sess, save_path)

        creator = tf.train.ChiefSessionCreator(scaffold=tf.train.Scaffold(init_fn=load_ckpt))
        hooks = [tf.train.StopAtStepHook(num_steps=4)]
        with tf.train.MonitoredSession(hooks=hooks, session_creator=creator) as session:
            assert _step(session, do_step, gstep) == 4
            for stops in (False, False, True):
                session.run(do_step)
                assert session.should_stop() is stops


def test_minimize_never_passes_last_step():
    with tf.Graph().as_default():
        gstep = tf.train.get_or_create_global_step()
        w = tf.Variable(np.float32(1.0), name="w")

        def loss():
            return tf.square(w)

        train_op = tf.train.GradientDescentOptimizer(0.25).minimize(loss, global_step=gstep)
        runs = 0
        with tf.train.MonitoredSession(hooks=[tf.train.StopAtStepHook(last_step=3)]) as session:
            while not session.should_stop():
                session.run(train_op)
                runs += 1
            raw = session._sess
            assert raw.step_bound == 3
            assert (runs, int(raw.run(gstep))) == (3, 3)
            # w <- w - 0.25 * 2w = w / 2, three times.
            assert raw.run(w) == pytest.approx(0.125)
            # A raw run at the bound reserves no step and applies nothing.
            raw.run(train_op)
            assert int(raw.run(gstep)) == 3
            assert raw.run(w) == pytest.approx(0.125)


# -- hooks protocol ---------------------------------------------------------------------------


def test_hooks_fetches_and_feeds_are_merged():
    with tf.Graph().as_default():
        a = tf.placeholder(tf.float32, name="a")
        b = tf.placeholder(tf.float32, name="b")
        c = tf.placeholder(tf.float32, name="c")

        def add():
            return tf.add(tf.add(a, b), c)

        def five():
            return tf.constant([5])

        hook, hook2 = FakeHook(), FakeHook()
        hook.request = tf.train.SessionRunArgs([five], feed_dict={a: 5.0})
        hook2.request = tf.train.SessionRunArgs(tf.constant([10]), feed_dict={b: 10.0})
        feed_dict = {c: 20.0}
        with tf.train.MonitoredSession(hooks=[hook, hook2]) as session:
            assert session.run(add, feed_dict=feed_dict) == 35.0
            assert len(feed_dict) == 1  # the caller's feed_dict is not changed
            np.testing.assert_array_equal(hook.last_run_values.results[0], [5])
            np.testing.assert_array_equal(hook2.last_run_values.results, [10])
            assert hook.last_run_context.original_args.fetches is add
            assert hook.last_run_context.session is session._sess
            with pytest.raises(RuntimeError, match="Same tensor is fed"):
                session.run(add, feed_dict={b: 10.0})


def test_hooks_should_stop_and_run_after_stop():
    with tf.Graph().as_default():
        hook, hook2 = FakeHook(), FakeHook()
        with tf.train.MonitoredSession(hooks=[hook, hook2]) as session:
            session.run(tf.constant([0]))
            assert not session.should_stop()
            hook.should_stop = True
            session.run(tf.constant([0]))
            assert session.should_stop()
            with pytest.raises(
                RuntimeError, match=r"Run called even after should_stop requested\."
            ):
                session.run(tf.constant([0]))
        for h in (hook, hook2):
            assert h.call_counter == Counter(
                begin=1, after_create_session=1, before_run=2, after_run=2, end=1
            )


# -- exit -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ex", [OutOfRangeError("EOI"), tf.errors.OutOfRangeError("EOI"), StopIteration]
)
def test_exit_cleanly_on_end_of_input(ex):
    with tf.Graph().as_default():
        gstep, do_step = _step_graph()
        hook, counter = RaiseOnceAtCountN(2, ex), FakeHook()
        session = tf.train.MonitoredSession(hooks=[hook, counter])
        reached = False
        with session:
            assert session.run(gstep) == 0
            assert not session.should_stop()
            session.run(do_step)  # raises in the hook: the with block ends cleanly
            reached = True
        assert not reached
        assert session.should_stop()
        assert counter.call_counter["end"] == 1


def test_regular_exception_pass_through_run():
    with tf.Graph().as_default():
        gstep, do_step = _step_graph()
        hook, counter = RaiseOnceAtCountN(4, RuntimeError("regular exception")), FakeHook()
        session = tf.train.MonitoredSession(hooks=[hook, counter])
        with pytest.raises(RuntimeError, match="regular exception"), session:
            assert session.run(gstep) == 0
            assert _step(session, do_step, gstep) == 1
            assert _step(session, do_step, gstep) == 2
            assert not session.should_stop()
            session.run(do_step)
        assert hook.raised
        assert session.should_stop()
        assert counter.call_counter["end"] == 0


def test_stop_cleanly_and_close_twice():
    with tf.Graph().as_default():
        gstep, do_step = _step_graph()
        counter = FakeHook()
        session = tf.train.MonitoredSession(hooks=[counter])
        with session:
            assert _step(session, do_step, gstep) == 1
            assert _step(session, do_step, gstep) == 2
            assert not session.should_stop()
        assert session.should_stop()
        session.close()
        assert session.should_stop()
        assert counter.call_counter["end"] == 1
        with pytest.raises(RuntimeError, match="Session is already closed"):
            session.run(gstep)


def test_raises_regular_exceptions_in_with_body():
    with tf.Graph().as_default():
        gstep, do_step = _step_graph()
        counter = FakeHook()
        session = tf.train.MonitoredSession(hooks=[counter])
        with pytest.raises(RuntimeError, match="regular exception"), session:
            assert _step(session, do_step, gstep) == 1
            raise RuntimeError("regular exception")
        assert session.should_stop()
        assert counter.call_counter["end"] == 0


def test_graph_finalized_during_run_unfinalized_after_exit():
    with tf.Graph().as_default() as g:
        a_var = tf.Variable(0)
        with tf.train.MonitoredSession() as session:
            assert session.graph is g
            assert session.run(a_var) == 0
            assert g.finalized
        assert not g.finalized
    with tf.Graph().as_default() as g:
        a_var = tf.Variable(0)
        tf.train.Scaffold().finalize()
        with tf.train.MonitoredSession() as session:
            assert session.run(a_var) == 0
        assert g.finalized


# -- recovery ---------------------------------------------------------------------------------


@pytest.mark.parametrize("ex", [AbortedError("Abort"), tf.errors.UnavailableError("Unavailable")])
def test_retry_on_error(ex):
    with tf.Graph().as_default():
        gstep, do_step = _step_graph()
        hook = RaiseOnceAtCountN(4, ex)
        with tf.train.MonitoredSession(hooks=[hook]) as session:
            assert session.run(gstep) == 0
            assert _step(session, do_step, gstep) == 1
            assert _step(session, do_step, gstep) == 2
            assert not session.should_stop()
            # The 4th run aborts: a freshly initialized session (step 0) runs it again.
            assert _step(session, do_step, gstep) == 1
            assert not session.should_stop()
            assert hook.raised
            assert hook.created == 2
            assert _step(session, do_step, gstep) == 2
            assert not session.should_stop()
        assert hook.ended == 1


def test_recover_and_retry_on_aborted_error(tmp_path):
    logdir = str(tmp_path / "test_recover_and_retry_on_aborted_error")
    with tf.Graph().as_default():
        gstep, do_step = _step_graph()
        scaffold = tf.train.Scaffold()
        abort_hook = RaiseOnceAtCountN(4, AbortedError("Abort"))
        ckpt_hook = tf.train.CheckpointSaverHook(logdir, save_steps=1, scaffold=scaffold)
        creator = tf.train.ChiefSessionCreator(scaffold, checkpoint_dir=logdir)
        with tf.train.MonitoredSession(creator, hooks=[abort_hook, ckpt_hook]) as session:
            assert session.run(gstep) == 0
            assert _step(session, do_step, gstep) == 1
            assert _step(session, do_step, gstep) == 2
            assert not session.should_stop()
            # The 4th run aborts: the session restores step 2 and runs it again.
            assert _step(session, do_step, gstep) == 3
            assert abort_hook.raised
            assert not session.should_stop()
            assert _step(session, do_step, gstep) == 4
            assert not session.should_stop()
        assert tf.train.latest_checkpoint(logdir).endswith("model.ckpt-4")


@pytest.mark.parametrize(("saved", "expected"), [(False, [0, 1, 2, 1, 2]), (True, [0, 1, 2, 3, 4])])
def test_abort_inside_a_fetched_function_retries_the_run(tmp_path, saved, expected):
    logdir = str(tmp_path) if saved else None
    with tf.Graph().as_default():
        gstep, do_step = _step_graph()
        calls = []

        def check():
            calls.append(len(calls) + 1)
            if len(calls) == 4:
                raise AbortedError("Abort")
            return len(calls)

        hooks = [FakeHook()]
        if saved:
            hooks.append(tf.train.CheckpointSaverHook(logdir, save_steps=1))
        creator = tf.train.ChiefSessionCreator(checkpoint_dir=logdir)
        with tf.train.MonitoredSession(creator, hooks=hooks) as session:
            seen = [int(session.run([gstep, check])[0])]
            # The 4th run increments the step, then aborts: without a checkpoint the step
            # starts again from its initial value 0; with one it is restored to 2.
            seen += [int(session.run([do_step, check])[0]) for _ in range(4)]
        assert seen == expected
        assert calls == [1, 2, 3, 4, 5, 6]
        assert hooks[0].call_counter["after_create_session"] == 2
        assert hooks[0].call_counter["after_run"] == 5


def test_retry_initialization_on_aborted_error():
    raised = []

    def init_fn(scaffold, session):
        if not raised:
            raised.append(True)
            raise AbortedError("Abort")

    with tf.Graph().as_default():
        gstep = tf.train.get_or_create_global_step()
        hook = FakeHook()
        creator = tf.train.ChiefSessionCreator(scaffold=tf.train.Scaffold(init_fn=init_fn))
        with tf.train.MonitoredSession(session_creator=creator, hooks=[hook]) as session:
            assert not session.should_stop()
            assert session.run(gstep) == 0
        assert raised == [True]
        assert hook.call_counter["begin"] == 1
        assert hook.call_counter["after_create_session"] == 1


# -- run_step_fn ------------------------------------------------------------------------------


def test_step_fn_example():
    with tf.Graph().as_default():
        c = tf.placeholder(tf.float32)
        hook = FakeHook()

        def step_fn(step_context):
            assert isinstance(step_context.session, Session)
            return step_context.run_with_hooks(fetches=c, feed_dict={c: 3.2})

        with tf.train.MonitoredSession(hooks=[hook]) as session:
            assert session.run_step_fn(step_fn) == pytest.approx(3.2)
            assert hook.call_counter["after_run"] == 1


def test_step_fn_raw_session_calls_no_hook():
    with tf.Graph().as_default():
        var = tf.Variable(np.float32(0.0))
        stage_0 = tf.assign_add(var, 0.3)
        stage_1 = tf.assign_add(var, 0.5)
        hook = FakeHook()

        def step_fn(step_context):
            step_context.session.run(stage_0)
            assert hook.call_counter["before_run"] == 0
            return step_context.run_with_hooks(fetches=[stage_1, var])[0]  # the new value

        with tf.train.SingularMonitoredSession(hooks=[hook]) as session:
            assert session.run_step_fn(step_fn) == pytest.approx(0.8)
            assert hook.call_counter["before_run"] == 1


def test_step_function_stops():
    with tf.Graph().as_default():
        hook = FakeHook()

        def step_fn(step_context):
            step_context.request_stop()

        reached = False
        with tf.train.MonitoredSession(hooks=[hook]) as session:
            while not session.should_stop():
                session.run_step_fn(step_fn)
                reached = True
        assert not reached
        assert session.should_stop()
        # request_stop interrupts the step before any hook runs.
        assert hook.call_counter["before_run"] == 0
        assert hook.call_counter["end"] == 1


def test_step_request_stop_without_a_with_block():
    with tf.Graph().as_default():

        def step_fn(step_context):
            step_context.request_stop()

        session = tf.train.MonitoredSession()
        with pytest.raises(StopIteration):
            session.run_step_fn(step_fn)
        assert not session.should_stop()
        session.close()


def test_step_fn_returns_a_value_and_checks_its_signature():
    with tf.Graph().as_default():

        def step_fn(step_context):
            del step_context
            return "a type"

        def extra(step_context, extra_foo):
            del step_context, extra_foo

        class Model:
            def step_fn(self, step_context):
                return step_context.run_with_hooks(fetches=tf.constant(3.2))

            def extra(self, step_context, extra_foo):
                del step_context, extra_foo

        with tf.train.MonitoredSession() as session:
            assert session.run_step_fn(step_fn) == "a type"
            assert session.run_step_fn(Model().step_fn) == pytest.approx(3.2)
            for bad in (extra, Model().extra):
                with pytest.raises(
                    ValueError, match="`step_fn` may either have one `step_context`"
                ):
                    session.run_step_fn(bad)


def test_recovers_from_an_exception_in_step_fn():
    with tf.Graph().as_default():
        state = tf.Variable(np.float32(0.0))
        side_effect = tf.assign_add(state, 0.31)
        c = tf.placeholder(tf.float32)
        runs = []

        def step_fn(step_context):
            runs.append(1)
            step_context.session.run(side_effect)
            value = step_context.run_with_hooks(fetches=c, feed_dict={c: 3.2})
            if len(runs) == 1:
                raise AbortedError("Abort")
            return value

        hook = FakeHook()
        with tf.train.MonitoredSession(hooks=[hook]) as session:
            assert session.run_step_fn(step_fn) == pytest.approx(3.2)
            # The whole step_fn ran again on a re-initialized session.
            assert len(runs) == 2
            assert session.run(state) == pytest.approx(0.31)
            assert hook.call_counter["after_create_session"] == 2


def test_step_fn_doesnt_recover_when_it_wasnt_asked_to():
    with tf.Graph().as_default():
        c = tf.placeholder(tf.float32)
        runs = []

        def step_fn(step_context):
            runs.append(1)
            if len(runs) == 1:
                raise AbortedError("Abort")
            return step_context.run_with_hooks(fetches=c, feed_dict={c: 3.2})

        session = tf.train.SingularMonitoredSession()
        with session, pytest.raises(AbortedError, match="Abort"):
            session.run_step_fn(step_fn)
        assert runs == [1]


# -- Scaffold -----------------------------------------------------------------------------------


def test_scaffold_nothing_created_before_finalize():
    with tf.Graph().as_default():
        scaffold = tf.train.Scaffold()
        assert (scaffold.init_op, scaffold.init_feed_dict, scaffold.init_fn) == (None, None, None)
        assert (scaffold.local_init_op, scaffold.saver) == (None, None)


def test_scaffold_finalize_makes_saver_and_finalizes_graph():
    with tf.Graph().as_default() as g:
        tf.Variable(1, name="my_var")
        scaffold = tf.train.Scaffold()
        assert scaffold.finalize() is scaffold
        assert isinstance(scaffold.saver, tf.train.Saver)
        assert list(scaffold.saver.variables) == ["my_var"]
        assert g.finalized
        with pytest.raises(RuntimeError, match=r"Graph is finalized and cannot be modified\."):
            tf.Variable([0])


def test_scaffold_uses_passed_values_and_copies():
    with tf.Graph().as_default():
        tf.Variable([1])
        saver = tf.train.Saver()
        scaffold = tf.train.Scaffold(
            init_op=2,
            init_feed_dict=3,
            init_fn=lambda scaffold, sess: 4,
            local_init_op=6,
            saver=saver,
        )
        scaffold.finalize()
        assert (scaffold.init_op, scaffold.init_feed_dict) == (2, 3)
        assert scaffold.init_fn("a session") == 4
        assert (scaffold.local_init_op, scaffold.saver) == (6, saver)
        copied = tf.train.Scaffold(copy_from_scaffold=scaffold, init_op=7)
        assert (copied.init_op, copied.init_feed_dict, copied.local_init_op) == (7, 3, 6)
        assert copied.saver is saver
        assert copied.init_fn("a session") == 4
        with pytest.raises(TypeError, match="copy_from_scaffold is not a Scaffold instance"):
            tf.train.Scaffold(copy_from_scaffold="scaffold")


def test_scaffold_init_op_and_init_fn_run_at_creation():
    with tf.Graph().as_default():
        v = tf.Variable(np.float32(1.0), name="v")
        p = tf.placeholder(tf.float32)
        seen = []

        def init_fn(scaffold, session):
            seen.append((scaffold, float(session.run(v))))
            session.run(tf.assign_add(v, 10.0))

        scaffold = tf.train.Scaffold(
            init_op=tf.assign(v, p), init_feed_dict={p: 5.0}, init_fn=init_fn
        )
        with tf.train.MonitoredSession(tf.train.ChiefSessionCreator(scaffold)) as session:
            assert session.run(v) == pytest.approx(15.0)
        assert seen == [(scaffold, 5.0)]


# -- session creators ---------------------------------------------------------------------------


def test_singular_monitored_session_raw_session():
    with tf.Graph().as_default():
        gstep, do_step = _step_graph()
        hook = FakeHook()
        with tf.train.SingularMonitoredSession(hooks=[hook]) as session:
            raw = session.raw_session()
            assert isinstance(raw, Session)
            raw.run(do_step)
            assert raw.run(gstep) == 1
            assert hook.call_counter["before_run"] == 0
            assert session.run(gstep) == 1
            assert hook.call_counter["before_run"] == 1


def test_worker_session_creator_initializes_local_variables():
    with tf.Graph().as_default():
        v = tf.Variable(np.float32(2.5), name="v")
        local = tf.Variable(
            np.float32(7.0), name="local", collections=[tf.GraphKeys.LOCAL_VARIABLES]
        )
        creator = tf.train.WorkerSessionCreator(max_wait_secs=0)
        with tf.train.MonitoredSession(session_creator=creator) as session:
            assert session.run([v, local]) == [pytest.approx(2.5), pytest.approx(7.0)]


def test_reading_a_variable_outside_a_session():
    with tf.Graph().as_default():
        w = tf.Variable(np.float32(1.0), name="w")
        with pytest.raises(FailedPreconditionError, match="uninitialized value w"):
            w.numpy()
