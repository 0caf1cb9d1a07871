"""hd.nn on CuPy: variables on the GPU, training matching the numpy run, strategies on GPUs."""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.cluster.gpus import bind_gpu

cupy = pytest.importorskip("cupy", reason="CuPy is not installed (GPU tests need it)")


def _data(n=256, features=20, classes=4):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, features)).astype(np.float32)
    y = (x[:, :classes].argmax(1)).astype(np.int64)
    return x, y


def _model(strategy, optimizer="adam"):
    hd.nn.set_random_seed(3)
    with strategy.scope():
        model = hd.nn.Sequential(
            [
                hd.nn.layers.Dense(32, activation="relu", input_shape=(20,)),
                hd.nn.layers.Dropout(0.0),
                hd.nn.layers.Dense(4),
            ]
        )
        model.compile(
            optimizer=optimizer,
            loss=hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    return model


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "rmsprop"])
def test_fit_on_the_gpu_matches_numpy(optimizer):
    x, y = _data()
    gpu = _model(hd.OneDeviceStrategy("gpu:0"), optimizer)
    cpu = _model(hd.get_strategy(), optimizer)
    weights = gpu.trainable_variables
    assert all(isinstance(w._value(), cupy.ndarray) for w in weights)
    assert all(w.device == "gpu:0" for w in weights)
    assert all(isinstance(w.numpy(), np.ndarray) for w in weights)
    for a, b in zip(gpu.get_weights(), cpu.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    hg = gpu.fit(x, y, batch_size=64, epochs=3, verbose=0, shuffle=False)
    hc = cpu.fit(x, y, batch_size=64, epochs=3, verbose=0, shuffle=False)
    np.testing.assert_allclose(hg.history["loss"], hc.history["loss"], rtol=2e-3)
    assert hg.history["loss"][-1] < hg.history["loss"][0]
    for a, b in zip(gpu.get_weights(), cpu.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-2, atol=1e-4)
    assert isinstance(gpu.predict(x[:10]), np.ndarray)


def _conv_model(strategy):
    hd.nn.set_random_seed(5)
    layers = hd.nn.layers
    with strategy.scope():
        model = hd.nn.Sequential(
            [
                layers.Conv2D(6, 3, activation="relu", input_shape=(10, 9, 2)),
                layers.BatchNormalization(),
                layers.MaxPooling2D(),
                layers.Conv2D(4, 3, padding="same", use_bias=False),
                layers.MaxPooling2D(2, padding="same"),
                layers.Flatten(),
                layers.Dense(3),
            ]
        )
        model.compile(
            optimizer="adam",
            loss=hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    return model


def test_a_conv_model_with_batch_norm_and_pooling_trains_on_the_gpu_as_on_numpy():
    """Conv2D with its bias, BatchNormalization and max pooling (tiled and padded) on CuPy."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((48, 10, 9, 2)).astype(np.float32)
    y = rng.integers(0, 3, 48)
    gpu, cpu = _conv_model(hd.OneDeviceStrategy("gpu:0")), _conv_model(hd.get_strategy())
    assert all(isinstance(w._value(), cupy.ndarray) for w in gpu.variables)
    hg = gpu.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
    hc = cpu.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
    np.testing.assert_allclose(hg.history["loss"], hc.history["loss"], rtol=1e-4)
    for a, b in zip(gpu.get_weights(), cpu.get_weights(), strict=True):  # moving statistics too
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


def test_custom_loop_with_a_tape_on_cupy_inputs():
    strategy = hd.OneDeviceStrategy("gpu:0")
    x, y = _data()
    model = _model(strategy, "sgd")
    loss_fn = hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = hd.nn.optimizers.SGD(0.1, momentum=0.9)
    xs, ys = cupy.asarray(x), cupy.asarray(y)
    losses = []
    for _ in range(20):
        with hd.nn.GradientTape() as tape:
            loss = loss_fn(ys, model(xs, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        assert all(isinstance(g, cupy.ndarray) for g in grads)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        losses.append(float(loss))
    assert losses[-1] < 0.7 * losses[0]


def test_checkpoint_round_trip_of_a_gpu_model(tmp_path):
    model = _model(hd.OneDeviceStrategy("gpu:0"))
    x, y = _data()
    model.fit(x, y, batch_size=64, epochs=1, verbose=0)
    ckpt = hd.checkpoint.Checkpoint(model=model, optimizer=model.optimizer)
    path = ckpt.save(str(tmp_path / "ckpt"))
    before = model.get_weights()
    for w in model.trainable_variables:
        w.assign(cupy.zeros(w.shape, w.dtype))
    ckpt.restore(path)
    for a, b in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert all(isinstance(w._value(), cupy.ndarray) for w in model.trainable_variables)


def test_multi_worker_strategy_binds_the_gpu():
    assert bind_gpu(0) == 0 and cupy.cuda.Device().id == 0
    strategy = hd.MultiWorkerMirroredStrategy(
        communication_options=hd.CommunicationOptions(implementation="nccl")
    )
    assert strategy.extended.worker_devices == ("gpu:0",)
    model = _model(strategy)
    x, y = _data()
    history = model.fit(x, y, batch_size=64, epochs=2, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert isinstance(model.trainable_variables[0]._value(), cupy.ndarray)


def test_cross_device_ops_on_gpu_values():
    values = hd.PerReplica([cupy.arange(5.0) * (i + 1) for i in range(3)])
    for ops in (hd.ReductionToOneDevice(), hd.HierarchicalCopyAllReduce()):
        out = ops.reduce("sum", values)
        assert all(isinstance(v, cupy.ndarray) for v in out.values)
        cupy.testing.assert_allclose(out.values[0], cupy.arange(5.0) * 6)
    nccl = hd.NcclAllReduce()
    single = hd.PerReplica([cupy.arange(4.0)])
    cupy.testing.assert_allclose(nccl.reduce("mean", single).values[0], cupy.arange(4.0))
    with pytest.raises(TypeError, match="one replica per GPU"):
        nccl.reduce("sum", values)  # three replicas on one GPU
    host = nccl.reduce("sum", hd.PerReplica([np.ones(2), np.ones(2)]))  # reduced on the host
    np.testing.assert_array_equal(host.values[1], [2.0, 2.0])
    with pytest.raises(TypeError, match="a mix of"):
        nccl.reduce("sum", hd.PerReplica([np.ones(2), cupy.ones(2)]))


def test_mirrored_strategy_on_every_local_gpu():
    gpus = cupy.cuda.runtime.getDeviceCount()
    devices = [f"gpu:{i}" for i in range(gpus)]
    strategy = hd.MirroredStrategy(devices, cross_device_ops=hd.NcclAllReduce())
    model = _model(strategy)
    x, y = _data()
    history = model.fit(x, y, batch_size=64, epochs=2, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    copies = model.trainable_variables[0].values
    assert [c.device.id for c in copies] == list(range(gpus))
