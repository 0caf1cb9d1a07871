"""The checkpoint protocol (`hpcdist.core.trackable`) is the only way into a checkpoint."""

import h5py
import numpy as np
import pytest

import hpcdist as hd
from hpcdist.checkpoint import Checkpoint, CheckpointManager, CheckpointOptions
from hpcdist.core.trackable import (
    CheckpointVariable,
    SlotTrackable,
    StateTrackable,
    Trackable,
)
from tests import training_cases as cases


def _variable(value):
    return hd.get_strategy().Variable(np.asarray(value))


class Counter:
    """A user object (no hpcdist base class) saving one variable and a nested object."""

    def __init__(self, start=0.0, inner=None):
        self.value = _variable(np.full(3, start))
        self.inner = inner

    def checkpoint_children(self):
        children = {"value": self.value}
        if self.inner is not None:
            children["parts/inner"] = self.inner
        return children


class Position:
    """A user object whose state is arrays, not variables."""

    def __init__(self, step=0):
        self.step = step

    def checkpoint_state(self):
        return {"step": np.int64(self.step), "history": np.arange(self.step, dtype=np.float64)}

    def restore_state(self, state):
        self.step = int(state["step"])
        assert np.array_equal(state["history"], np.arange(self.step, dtype=np.float64))


class HostValue:
    """A variable-like object that is not an hpcdist variable."""

    def __init__(self, array):
        self.array = np.array(array, dtype=np.float32)

    @property
    def shape(self):
        return self.array.shape

    def checkpoint_value(self):
        return self.array

    def assign(self, value, read_value=True):
        self.array[...] = value


class Pieces:
    """A `SlicedValue`: the value in consecutive first-axis pieces."""

    def __init__(self, array, cut):
        self.array, self.cut = array, cut
        self.shape, self.dtype = array.shape, array.dtype

    def slices(self):
        yield self.array[: self.cut]
        yield self.array[self.cut :]


class ShardedHostValue(HostValue):
    def checkpoint_value(self):
        return Pieces(self.array, 2)


class Averager:
    """A user slot holder: one running-mean slot per primary variable, built lazily."""

    def __init__(self):
        self.slots = {}
        self.built = []

    def _ensure(self, var):
        if id(var) not in self.slots:
            self.slots[id(var)] = (var, _variable(np.zeros(var.shape)))

    def update(self, var):
        self._ensure(var)
        self.slots[id(var)][1].assign_add(var.numpy())

    def checkpoint_children(self):
        return {}

    def checkpoint_slots(self):
        return [("mean", primary, slot) for primary, slot in self.slots.values()]

    def build_checkpoint_slots(self, primaries):
        self.built.append(len(primaries))
        for var in primaries:
            self._ensure(var)


def test_nn_objects_and_variables_implement_the_protocol():
    model = cases.build()
    assert isinstance(model, Trackable) and isinstance(model.layers[0], Trackable)
    assert isinstance(model.optimizer, SlotTrackable)
    assert isinstance(model.metrics[0], Trackable)
    assert isinstance(model.weights[0], CheckpointVariable)
    assert not isinstance(model, CheckpointVariable) and not isinstance(model, StateTrackable)
    it = iter(hd.get_strategy().experimental_distribute_dataset(_batches()))
    assert isinstance(it, StateTrackable)
    v = _variable(np.arange(4.0))
    assert np.shares_memory(v.checkpoint_value(), v._value())  # no copy on the host


def test_user_objects_round_trip_through_the_protocol(tmp_path):
    saved = Counter(1.0, inner=Counter(2.0))
    position, host = Position(5), HostValue([1.0, 2.0])
    path = Checkpoint(counter=saved, position=position, host=host).write(str(tmp_path / "u"))
    with h5py.File(path) as f:
        names = set()
        f.visititems(lambda name, obj: names.add(name) if isinstance(obj, h5py.Dataset) else None)
    assert names == {
        "save_counter",
        "counter/value",
        "counter/parts/inner/value",
        "position/state/step",
        "position/state/history",
        "host",
    }
    fresh, fresh_position, fresh_host = (
        Counter(0.0, inner=Counter(0.0)),
        Position(),
        HostValue([0, 0]),
    )
    status = Checkpoint(counter=fresh, position=fresh_position, host=fresh_host).read(path)
    status.assert_consumed()
    assert (fresh.value.numpy() == 1).all() and (fresh.inner.value.numpy() == 2).all()
    assert fresh_position.step == 5 and list(fresh_host.array) == [1.0, 2.0]


def test_sliced_values_save_whole_and_async(tmp_path):
    table = ShardedHostValue(np.arange(12.0).reshape(6, 2))
    ckpt = Checkpoint(table=table)
    path = ckpt.write(str(tmp_path / "s"))
    options = CheckpointOptions(experimental_enable_async_checkpoint=True)
    later = ckpt.write(str(tmp_path / "a"), options)
    table.array += 100  # the async snapshot was taken before
    ckpt.sync()
    for p in (path, later):
        target = HostValue(np.zeros((6, 2)))
        Checkpoint(table=target).read(p).assert_consumed()
        assert np.array_equal(target.array, np.arange(12.0).reshape(6, 2))


def test_a_user_slot_holder_builds_its_slots_before_a_restore(tmp_path):
    weight = _variable(np.ones(2))
    averager = Averager()
    averager.update(weight)
    averager.update(weight)
    path = Checkpoint(w=weight, avg=averager).write(str(tmp_path / "slots"))
    with h5py.File(path) as f:
        assert np.array_equal(f["avg/slots/mean/w"][()], [2.0, 2.0])
    fresh_weight, fresh = _variable(np.zeros(2)), Averager()
    Checkpoint(w=fresh_weight, avg=fresh).read(path).assert_consumed()
    assert fresh.built == [1]
    assert np.array_equal(fresh.slots[id(fresh_weight)][1].numpy(), [2.0, 2.0])


def test_optimizer_slots_restore_into_an_unbuilt_optimizer(tmp_path):
    x, y = cases.data()
    model = cases.build()
    model.compile(
        optimizer=hd.nn.optimizers.Adam(0.01),
        loss=hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(x, y, epochs=1, verbose=0)
    metric = hd.nn.metrics.Mean()
    metric.update_state(np.array([1.0, 3.0]))
    path = Checkpoint(model=model, optimizer=model.optimizer, metric=metric).write(
        str(tmp_path / "adam")
    )
    with h5py.File(path) as f:  # the paths of existing checkpoints
        for name in (
            "model/weights/3",
            "optimizer/iterations",
            "optimizer/slots/m/model/weights/3",
            "optimizer/slots/v/model/weights/0",
            "metric/state/0",
            "metric/state/1",
            "save_counter",
        ):
            assert name in f, name

    fresh = cases.build()
    optimizer = hd.nn.optimizers.Adam(0.01)
    assert optimizer.iterations is None and optimizer.checkpoint_slots() == []
    fresh_metric = hd.nn.metrics.Mean()
    status = Checkpoint(model=fresh, optimizer=optimizer, metric=fresh_metric).read(path)
    status.assert_consumed()
    assert int(optimizer.iterations.numpy()) == int(model.optimizer.iterations.numpy())
    for var, old in zip(fresh.trainable_variables, model.trainable_variables, strict=True):
        for slot in ("m", "v"):
            assert np.array_equal(
                optimizer.slot(var, slot).numpy(), model.optimizer.slot(old, slot).numpy()
            )
    assert fresh_metric.result() == 2.0


def test_iterator_position_is_saved_as_state(tmp_path):
    strategy = hd.get_strategy()
    it = iter(strategy.experimental_distribute_dataset(_batches()))
    next(it), next(it)
    manager = CheckpointManager(Checkpoint(iterator=it), str(tmp_path), max_to_keep=1)
    path = manager.save()
    with h5py.File(path) as f:
        assert int(f["iterator/state/steps"][()]) == 2
    again = iter(strategy.experimental_distribute_dataset(_batches()))
    Checkpoint(iterator=again).read(path).assert_consumed()
    assert np.array_equal(next(again), next(it))


def test_objects_outside_the_protocol_are_refused(tmp_path):
    class HasWeights:  # a `weights` attribute is not the protocol
        weights = [_variable(np.zeros(1))]

    with pytest.raises(ValueError, match=r"cannot checkpoint thing=HasWeights: expected"):
        Checkpoint(thing=HasWeights())
    with pytest.raises(ValueError, match="'save_counter' is reserved"):
        Checkpoint(save_counter=_variable(0))
    bad = Counter(inner=object())
    ckpt = Checkpoint(counter=bad)
    with pytest.raises(ValueError, match=r"cannot checkpoint counter/parts/inner=object"):
        ckpt.write(str(tmp_path / "bad"))
    loop = Counter()
    loop.inner = loop
    with pytest.raises(ValueError, match="contains itself"):
        Checkpoint(loop=loop).write(str(tmp_path / "loop"))
    assert not list(tmp_path.iterdir())  # refused before any file is written


def _batches():
    return hd.data.Dataset.from_tensor_slices(np.arange(12.0).reshape(6, 2)).batch(2)
