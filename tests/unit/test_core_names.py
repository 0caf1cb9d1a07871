"""Names where a reader looks: one `constant` (TF's dtype rule), `Tensor` in `core.tensors`,
the tape's public `watches`, and the timeline's cross-rank merge in `cluster.gather`."""

import numpy as np

import hpcdist as hd
import hpcdist.core
from hpcdist.cluster.gather import gather_with_clocks
from hpcdist.core import autodiff, tensors


def test_one_constant_with_tf_dtypes():
    assert hpcdist.core.constant is tensors.constant is hd.constant is hd.nn.constant
    for make in (hpcdist.core.constant, hd.nn.constant, hd.constant):
        assert make(1.0).dtype == np.float32
        assert make(1).dtype == np.int32
        assert make(np.float64(1.0)).dtype == np.float64
    assert not hasattr(autodiff, "constant")


def test_tensor_lives_in_core_tensors_and_keeps_its_old_paths():
    assert tensors.Tensor.__module__ == "hpcdist.core.tensors"
    assert autodiff.Tensor is tensors.Tensor is hpcdist.core.Tensor is hd.nn.Tensor
    assert autodiff.IndexedSlices is tensors.IndexedSlices is hd.nn.IndexedSlices


def test_tape_watches_trainable_and_watched_variables():
    trainable = hd.Variable(np.float32(1.0))
    frozen = hd.Variable(np.float32(1.0), trainable=False)
    with hd.nn.GradientTape() as tape:
        assert tape.watches(trainable) and not tape.watches(frozen)
        tape.watch(frozen)
        assert tape.watches(frozen)
    with hd.nn.GradientTape(watch_accessed_variables=False) as tape:
        assert not tape.watches(trainable)


def test_gather_with_clocks_on_one_process():
    ticks = iter([12.5])
    assert gather_with_clocks({"events": [1, 2]}, lambda: next(ticks)) == [
        (12.5, {"events": [1, 2]})
    ]
