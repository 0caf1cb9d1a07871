"""Training under MultiWorkerMirroredStrategy equals one process on the same global batches."""

import errno

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.checkpoint import CheckpointWriteError
from tests import training_cases as cases

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture(scope="module")
def strategy():
    return hd.MultiWorkerMirroredStrategy()


def test_fit_matches_one_process(strategy):
    cases.check_fit_matches_one_process(strategy, epochs=3)


def test_custom_loop_matches_one_process(strategy):
    cases.check_custom_loop_matches_one_process(strategy)


def test_terminate_on_nan_stops_every_rank_on_the_same_step(strategy, capsys):
    x, y = cases.data(n=40)
    x[10, 0] = np.nan  # first row of batch 1: one rank's replica sees it, every rank stops
    model = cases.build(strategy)
    callback = hd.nn.callbacks.TerminateOnNaN()
    h = model.fit(x, y, batch_size=10, epochs=2, verbose=0, shuffle=False, callbacks=[callback])
    assert model.optimizer.iterations.numpy() == 2
    assert len(h.history["loss"]) == 1 and np.isnan(h.history["loss"][0])
    printed = "Batch 1: Invalid loss, terminating training" in capsys.readouterr().out
    assert printed == strategy.extended.should_checkpoint  # the chief prints


def test_invalid_batch_size_raises_on_every_rank(strategy):
    x, y = cases.data(n=20)
    model = cases.build(strategy)
    with pytest.raises(ValueError, match="batch_size must be a positive integer or None, got -3"):
        model.fit(x, y, batch_size=-3, verbose=0)
    with pytest.raises(ValueError, match=r"fit: x has no examples"):
        model.fit(x[:0], y[:0], verbose=0)
    model.fit(x, y, batch_size=10, verbose=0)  # the ranks are still in step
    assert model.optimizer.iterations.numpy() == 2


def test_save_without_overwrite_raises_on_every_rank(strategy, comm, tmp_path):
    path = comm.broadcast_object(str(tmp_path / "model.h5"), root=0)  # the chief's file
    model = cases.build(strategy)
    model.save(path)
    with pytest.raises(CheckpointWriteError, match="overwrite=False") as raised:
        model.save(path, overwrite=False)
    assert raised.value.errno == errno.EEXIST  # the chief's errno reaches every rank
    model.save(path, overwrite=True)
