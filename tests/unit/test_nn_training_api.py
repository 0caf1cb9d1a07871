"""The public training hooks of `Model`: resume epoch, strategy scope, loss tracker, saving options.

Also the epoch walk of `fit` (`hpcdist.nn.epoch_iterator`): one pass per epoch reshuffled with
``seed + epoch``, or a continuous read across epochs with ``steps_per_epoch``.
"""

import errno
import os

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.checkpoint import CheckpointWriteError
from hpcdist.nn.epoch_iterator import EpochIterator, steps_per_epoch_of
from tests import training_cases as cases


class _ResumeAt(hd.nn.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch
        self.begun = []

    def on_train_begin(self, logs=None):
        if self.epoch is not None:
            self.model.resume_at_epoch(self.epoch)

    def on_epoch_begin(self, epoch, logs=None):
        self.begun.append(epoch)


def test_a_callback_resumes_fit_through_resume_at_epoch():
    x, y = cases.data(n=40)
    model = cases.build()
    resume = _ResumeAt(3)
    history = model.fit(x, y, batch_size=20, epochs=5, verbose=0, callbacks=[resume])
    assert resume.begun == [3, 4]
    assert len(history.history["loss"]) == 2
    # the larger of initial_epoch and the request wins
    resume = _ResumeAt(1)
    model.fit(x, y, batch_size=20, epochs=5, initial_epoch=2, verbose=0, callbacks=[resume])
    assert resume.begun == [2, 3, 4]
    # the next fit forgets the request
    resume = _ResumeAt(None)
    model.fit(x, y, batch_size=20, epochs=2, verbose=0, callbacks=[resume])
    assert resume.begun == [0, 1]


@pytest.mark.parametrize("epoch", [-1, 1.5, True, "2"])
def test_resume_at_epoch_rejects_what_is_not_an_epoch(epoch):
    model = cases.build()
    with pytest.raises(ValueError, match="non-negative integer"):
        model.resume_at_epoch(epoch)


def test_backup_and_restore_resumes_after_the_backed_up_epoch(tmp_path):
    x, y = cases.data(n=40)
    model = cases.build()
    backup = hd.nn.callbacks.BackupAndRestore(str(tmp_path / "backup"), delete_checkpoint=False)
    model.fit(x, y, batch_size=20, epochs=2, verbose=0, callbacks=[backup])
    seen = _ResumeAt(None)
    again = cases.build()
    backup = hd.nn.callbacks.BackupAndRestore(str(tmp_path / "backup"), delete_checkpoint=False)
    again.fit(x, y, batch_size=20, epochs=4, verbose=0, callbacks=[backup, seen])
    assert seen.begun == [2, 3]


def test_strategy_scope_enters_the_model_strategy_only_when_one_was_chosen():
    model = cases.build()
    with model.strategy_scope():
        assert not hd.has_strategy()  # default strategy: nothing entered
    strategy = hd.MirroredStrategy(["cpu:0", "cpu:1"])
    mirrored = cases.build(strategy)
    with mirrored.strategy_scope():
        assert hd.get_strategy() is strategy


def test_loss_tracker_counts_the_examples_of_the_epoch():
    model = cases.build()
    x, y = cases.data(n=50)
    assert hd.nn.Sequential([hd.nn.layers.Dense(2)]).loss_tracker is None  # not compiled
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert model.loss_tracker is model.metrics[0]
    assert float(model.loss_tracker.count.numpy()) == 50


def test_save_honours_overwrite(tmp_path):
    model = cases.build()
    path = str(tmp_path / "model.h5")
    model.save(path)
    model.save(path, overwrite=True)  # Keras' default: replaced without a question
    with pytest.raises(CheckpointWriteError, match="overwrite=False") as raised:
        model.save(path, overwrite=False)
    assert raised.value.errno == errno.EEXIST
    assert os.path.exists(path)
    assert hd.nn.models.load_model(path).count_params() == model.count_params()
    weights = str(tmp_path / "weights.h5")
    model.save_weights(weights, overwrite=False)  # a new file is fine
    with pytest.raises(CheckpointWriteError, match="exists"):
        model.save_weights(weights, overwrite=False)


def test_save_rejects_unknown_arguments_and_other_formats(tmp_path):
    model = cases.build()
    path = str(tmp_path / "model.h5")
    with pytest.raises(TypeError, match="include_optimiser"):
        model.save(path, include_optimiser=False)
    with pytest.raises(ValueError, match="save_format must be 'h5'"):
        model.save(path, save_format="tf")
    assert not os.path.exists(path)
    model.save(path, save_format="h5")
    with pytest.raises(TypeError, match="options"):
        model.save_weights(path, options=None)


def test_steps_per_epoch_of_arrays_datasets_and_given_steps():
    x = np.zeros((10, 2), np.float32)
    assert steps_per_epoch_of(x, 4, None) == 3
    assert steps_per_epoch_of(x, None, None) == 1
    assert steps_per_epoch_of(x, 4, 7) == 7
    ds = hd.data.Dataset.from_tensor_slices(x).batch(3)
    assert steps_per_epoch_of(ds, None, None) == 4


def _firsts(iterator, epoch):
    return [float(batch[0][0, 0]) for _, batch in iterator.enumerate_epoch(epoch)]


def test_epoch_iterator_reshuffles_each_epoch_or_reads_on():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    strategy = hd.get_strategy()
    per_epoch = EpochIterator(strategy, x, None, 2, True, 5, None)
    a, b = _firsts(per_epoch, 0), _firsts(per_epoch, 1)
    assert len(a) == len(b) == 5 and a != b  # a new permutation (seed + epoch)
    assert _firsts(EpochIterator(strategy, x, None, 2, True, 5, None), 1) == b  # reproducible
    steps = [s for s, _ in per_epoch.enumerate_epoch(0)]
    assert steps == [0, 1, 2, 3, 4]
    continuous = EpochIterator(strategy, x, None, 2, False, 0, 3)
    assert _firsts(continuous, 0) == [0.0, 2.0, 4.0]
    assert _firsts(continuous, 1) == [6.0, 8.0, 0.0]  # on where the last epoch stopped
