"""``tf.train.Saver`` and TF1's checkpoint queries, on real HDF5 files (TF's saver_test rules)."""

import os
import textwrap
import threading

import h5py
import numpy as np
import pytest

from hpcdist.checkpoint.collective import checkpoint_communicator, local_checkpoints
from hpcdist.checkpoint.format import CheckpointCorruptError, CheckpointMismatchError
from hpcdist.compat.v1.graph import Graph, GraphKeys
from hpcdist.compat.v1.optimizers import AdagradOptimizer
from hpcdist.compat.v1.saver import (
    Saver,
    checkpoint_exists,
    default_saver,
    get_checkpoint_state,
    latest_checkpoint,
)
from hpcdist.compat.v1.session import Session, global_variables_initializer
from hpcdist.compat.v1.variables import Variable, assign, get_or_create_global_step
from hpcdist.core import math_ops as ops
from hpcdist.errors import NotFoundError
from tests.helpers import clean_env, run_mpi


def _model():
    """The guide's variables: w, b, global_step and Adagrad's slots (w/Adagrad, b/Adagrad)."""
    w = Variable(np.array([[1.0], [2.0]], np.float32), name="w")
    b = Variable(np.float32(0.5), name="b")
    step = get_or_create_global_step()
    x = np.array([[1.0, 2.0]], np.float32)
    train = AdagradOptimizer(0.5).minimize(
        lambda: ops.reduce_sum(ops.square(ops.add(ops.matmul(x, w), b))), global_step=step
    )
    return w, b, step, train


def _values(sess, names_to_vars):
    return {name: np.array(sess.run(var)) for name, var in names_to_vars.items()}


def test_round_trip_by_tf_names(tmp_path):
    with Graph().as_default():
        _, _, step, train = _model()
        saver = Saver()
        assert list(saver.variables) == ["w", "b", "global_step", "w/Adagrad", "b/Adagrad"]
        with Session() as sess:
            sess.run(global_variables_initializer())
            for _ in range(3):
                sess.run(train)
            saved = _values(sess, saver.variables)
            prefix = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=step)
            assert prefix == str(tmp_path / "model.ckpt-3")
            assert checkpoint_exists(prefix) and checkpoint_exists(prefix + ".h5")
            with h5py.File(prefix + ".h5") as f:  # "w" and "w/Adagrad" do not clash
                stored = {
                    name: f[f"variables/{name}/.ATTRIBUTES/VARIABLE_VALUE"][()] for name in saved
                }
            for name, value in saved.items():
                np.testing.assert_array_equal(stored[name], value)
            assert int(stored["global_step"]) == 3 and stored["global_step"].dtype == np.int64
            assert stored["w/Adagrad"].dtype == np.float32 and stored["w/Adagrad"].shape == (2, 1)
            sess.run(global_variables_initializer())  # back to the initial values
            assert sess.run(step) == 0
            saver.restore(sess, prefix)
            for name, value in _values(sess, saver.variables).items():
                np.testing.assert_array_equal(value, saved[name])
                assert value.dtype == saver.variables[name].dtype
            saver.restore(sess, prefix + ".h5")  # the file name works too


def test_restore_into_a_new_graph_continues_training(tmp_path):
    with Graph().as_default():
        _, _, step, train = _model()
        saver = Saver()
        with Session() as sess:
            sess.run(global_variables_initializer())
            for _ in range(2):
                sess.run(train)
            prefix = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=step)
            sess.run(train)
            expected = _values(sess, saver.variables)
    with Graph().as_default():
        _, _, step, train = _model()
        saver = Saver()
        with Session() as sess:
            saver.restore(sess, latest_checkpoint(str(tmp_path)))
            assert prefix == latest_checkpoint(str(tmp_path))
            assert sess.run(step) == 2
            sess.run(train)
            for name, value in _values(sess, saver.variables).items():
                np.testing.assert_array_equal(value, expected[name])


def test_max_to_keep_retention_and_checkpoint_state(tmp_path):
    with Graph().as_default():
        v = Variable(np.float32(0.0), name="v")
        saver = Saver(max_to_keep=2)
        d = str(tmp_path)
        assert latest_checkpoint(d) is None and get_checkpoint_state(d) is None
        with Session() as sess:
            sess.run(global_variables_initializer())
            for n in range(1, 5):
                sess.run(assign(v, np.float32(n)))
                saver.save(sess, os.path.join(d, "model.ckpt"), global_step=n)
            files = sorted(f for f in os.listdir(d) if f.endswith(".h5"))
            assert files == ["model.ckpt-3.h5", "model.ckpt-4.h5"]
            state = get_checkpoint_state(d)
            assert state.model_checkpoint_path == os.path.join(d, "model.ckpt-4")
            assert state.all_model_checkpoint_paths == [
                os.path.join(d, "model.ckpt-3"),
                os.path.join(d, "model.ckpt-4"),
            ]
            assert saver.last_checkpoints == state.all_model_checkpoint_paths
            assert not checkpoint_exists(os.path.join(d, "model.ckpt-2"))
            saver.restore(sess, os.path.join(d, "model.ckpt-3"))
            assert sess.run(v) == np.float32(3.0)
        # A new saver on the same directory continues its list (TF's recovered state).
        with Session() as sess:  # a new local session: its variables are initialized anew
            sess.run(global_variables_initializer())
            Saver(max_to_keep=2).save(sess, os.path.join(d, "model.ckpt"), global_step=5)
        assert sorted(f for f in os.listdir(d) if f.endswith(".h5")) == [
            "model.ckpt-4.h5",
            "model.ckpt-5.h5",
        ]


def test_max_to_keep_zero_keeps_everything(tmp_path):
    with Graph().as_default():
        Variable(np.float32(1.0), name="v")
        saver = Saver(max_to_keep=0)
        with Session() as sess:
            sess.run(global_variables_initializer())
            for n in range(7):
                saver.save(sess, str(tmp_path / "model.ckpt"), global_step=n)
        assert len(get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths) == 7


def test_queries_do_not_create_directories(tmp_path):
    missing = str(tmp_path / "nowhere")
    assert latest_checkpoint(missing) is None
    assert get_checkpoint_state(missing) is None
    assert not os.path.exists(missing)
    assert not checkpoint_exists(os.path.join(missing, "model.ckpt-1"))


def test_save_without_global_step_and_dict_var_list(tmp_path):
    with Graph().as_default():
        v = Variable(np.arange(3, dtype=np.float32), name="v")
        saver = Saver({"renamed": v})
        with Session() as sess:
            sess.run(global_variables_initializer())
            prefix = saver.save(sess, str(tmp_path / "plain"))
            assert prefix == str(tmp_path / "plain")
            assert latest_checkpoint(str(tmp_path)) == prefix  # the latest, as in TF
            sess.run(assign(v, np.zeros(3, np.float32)))
            saver.restore(sess, prefix)
            np.testing.assert_array_equal(sess.run(v), [0.0, 1.0, 2.0])
            with h5py.File(prefix + ".h5") as f:
                assert "variables/renamed/.ATTRIBUTES/VARIABLE_VALUE" in f


def test_argument_errors(tmp_path):
    with Graph().as_default():
        with pytest.raises(ValueError, match="No variables to save"):
            Saver()
        Saver(allow_empty=True)
        a = Variable(np.float32(1.0), name="a")
        with pytest.raises(ValueError, match="At least two variables have the same name: a"):
            Saver({"a": a, "a:0": Variable(np.float32(2.0), name="b")})
        with pytest.raises(TypeError, match="dict or a list"):
            Saver(var_list=a)
        saver = Saver([a])
        with Session() as sess:
            with pytest.raises(TypeError, match="'sess' must be a Session"):
                saver.save(None, str(tmp_path / "m"))
            with pytest.raises(ValueError, match="Can't load save_path when it is None"):
                saver.restore(sess, None)
            missing = str(tmp_path / "model.ckpt-9")
            with pytest.raises(ValueError, match=r"not a valid checkpoint: .*model\.ckpt-9"):
                saver.restore(sess, missing)


def _saved_and_fresh(tmp_path):
    """A checkpoint of v=[1, 2] and w=3 at step 1, then the variables set to 7 in a session."""
    v = Variable(np.array([1.0, 2.0], np.float32), name="v")
    w = Variable(np.float32(3.0), name="w")
    saver = Saver([v, w])
    sess = Session()
    sess.run(global_variables_initializer())
    prefix = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)
    sess.run([assign(v, np.full(2, 7.0, np.float32)), assign(w, np.float32(7.0))])
    return v, w, saver, sess, prefix


def _unchanged(sess, v, w):
    np.testing.assert_array_equal(sess.run(v), [7.0, 7.0])
    assert sess.run(w) == np.float32(7.0)


def test_restore_of_a_mismatching_checkpoint_changes_nothing(tmp_path):
    with Graph().as_default():
        v, w, _, sess, prefix = _saved_and_fresh(tmp_path)
        with Graph().as_default():  # same names, v of another shape
            bigger = Saver(
                [Variable(np.zeros(3, np.float32), name="v"), Variable(np.float32(0), name="w")]
            )
        with pytest.raises(CheckpointMismatchError, match=r"v.*\(2,\).*\(3,\)"):
            bigger.restore(sess, prefix)
        _unchanged(sess, v, w)
        extra = Saver([v, w, Variable(np.float32(0.0), name="u")])
        with pytest.raises(CheckpointMismatchError, match="Key u not found in checkpoint"):
            extra.restore(sess, prefix)
        with pytest.raises(NotFoundError, match="Key u not found in checkpoint"):  # TF's family
            extra.restore(sess, prefix)
        _unchanged(sess, v, w)


def test_restore_of_a_corrupt_checkpoint_changes_nothing(tmp_path):
    with Graph().as_default():
        v, w, saver, sess, prefix = _saved_and_fresh(tmp_path)
        with h5py.File(prefix + ".h5", "r+") as f:  # flip a value, keep the old checksum
            f["variables/w/.ATTRIBUTES/VARIABLE_VALUE"][()] = np.float32(99.0)
        with pytest.raises(CheckpointCorruptError, match="checksum"):
            saver.restore(sess, prefix)
        _unchanged(sess, v, w)
        truncated = str(tmp_path / "model.ckpt-2.h5")
        with open(prefix + ".h5", "rb") as src, open(truncated, "wb") as dst:
            dst.write(src.read()[:200])
        with pytest.raises(CheckpointCorruptError, match=r"model\.ckpt-2\.h5"):
            saver.restore(sess, truncated)
        _unchanged(sess, v, w)


def test_default_saver_uses_the_savers_collection():
    with Graph().as_default() as graph:
        Variable(np.float32(1.0), name="v")
        made = default_saver(graph)
        assert list(made.variables) == ["v"]
        mine = Saver()
        graph.add_to_collection(GraphKeys.SAVERS, mine)
        assert default_saver(graph) is mine
        graph.add_to_collection(GraphKeys.SAVERS, Saver())
        with pytest.raises(RuntimeError, match="More than one item in collection savers"):
            default_saver(graph)


def test_local_checkpoints_is_per_thread_and_nests():
    seen = []
    with local_checkpoints():
        with local_checkpoints():
            assert checkpoint_communicator() is None
        assert checkpoint_communicator() is None
        thread = threading.Thread(target=lambda: seen.append(checkpoint_communicator()))
        thread.start()
        thread.join()
    assert seen == [None]  # one rank: None anyway; the two-rank job below checks the rest


_TWO_RANKS = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from mpi4py import MPI
    from hpcdist.checkpoint.collective import checkpoint_communicator, local_checkpoints
    from hpcdist.compat.v1.graph import Graph
    from hpcdist.compat.v1.saver import Saver, latest_checkpoint
    from hpcdist.compat.v1.session import Session, global_variables_initializer
    from hpcdist.compat.v1.variables import Variable
    rank = MPI.COMM_WORLD.Get_rank()
    assert checkpoint_communicator() is not None  # two ranks: collective outside the block
    with local_checkpoints():
        assert checkpoint_communicator() is None
    if rank == 0:  # the chief saves alone while rank 1 waits at the barrier
        with Graph().as_default():
            Variable(np.float32(4.0), name="w")
            saver = Saver()
            with Session() as sess:
                sess.run(global_variables_initializer())
                saver.save(sess, os.path.join(sys.argv[1], "model.ckpt"), global_step=7)
    MPI.COMM_WORLD.Barrier()
    with open(os.path.join(sys.argv[2], f"rank{rank}"), "w") as f:
        f.write(os.path.basename(latest_checkpoint(sys.argv[1])))
    """
)


def test_the_chief_saves_alone_among_two_ranks(tmp_path):
    script = tmp_path / "two_ranks.py"
    script.write_text(_TWO_RANKS)
    out, seen = tmp_path / "ckpt", tmp_path / "seen"
    out.mkdir()
    seen.mkdir()
    env = clean_env(HPCDIST_TIMEOUT_SECONDS="30")  # a collective save would fail in 30 s
    done = run_mpi(2, [str(script), str(out), str(seen)], timeout=120, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [(seen / f"rank{r}").read_text() for r in (0, 1)] == ["model.ckpt-7"] * 2
