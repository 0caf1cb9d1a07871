"""Keras optimizers step by step on fixed gradients, with gradient clipping and schedules."""

import numpy as np
import pytest

from tests.conformance.helpers import conform

F32 = np.float32
W0 = np.array([[0.5, -1.0], [2.0, 0.25]], F32)
B0 = np.array([0.1, -0.2], F32)
GRADS = [
    (np.array([[1.0, -2.0], [0.5, 3.0]], F32), np.array([0.5, -0.5], F32)),
    (np.array([[-0.5, 1.0], [4.0, -1.0]], F32), np.array([2.0, 0.0], F32)),
    (np.array([[0.1, 0.0], [-3.0, 2.0]], F32), np.array([-1.0, 1.5], F32)),
]


def schedules(keras):
    """keras.optimizers.schedules; hpcdist keeps them in hpcdist.nn.optimizers (see below)."""
    return getattr(keras.optimizers, "schedules", keras.optimizers)


def test_schedules_namespace_ports():
    """`tf.keras.optimizers.schedules.ExponentialDecay` ports as `hd.nn.optimizers.schedules...`."""
    conform(lambda lib: hasattr(lib.keras.optimizers, "schedules"))


def trajectory(lib, make):
    """The variables after each of three apply_gradients steps, and the iteration count."""
    w, b = lib.tf.Variable(W0), lib.tf.Variable(B0)
    opt = make(lib.keras)
    out = []
    for gw, gb in GRADS:
        opt.apply_gradients([(lib.tf.constant(gw), w), (lib.tf.constant(gb), b)])
        out.append((w.numpy(), b.numpy()))
    return out, int(np.asarray(opt.iterations))


OPTIMIZERS = {
    "sgd": lambda k: k.optimizers.SGD(0.1),
    "sgd-momentum": lambda k: k.optimizers.SGD(0.1, momentum=0.9),
    "sgd-nesterov": lambda k: k.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
    "sgd-clipnorm": lambda k: k.optimizers.SGD(0.1, clipnorm=1.0),
    "sgd-clipvalue": lambda k: k.optimizers.SGD(0.1, clipvalue=0.75),
    "sgd-global-clipnorm": lambda k: k.optimizers.SGD(0.1, global_clipnorm=2.0),
    "adam": lambda k: k.optimizers.Adam(0.01),
    "adam-amsgrad": lambda k: k.optimizers.Adam(0.01, amsgrad=True),
    "adam-betas": lambda k: k.optimizers.Adam(0.05, beta_1=0.5, beta_2=0.9, epsilon=1e-3),
    "adam-clipnorm": lambda k: k.optimizers.Adam(0.01, clipnorm=0.5),
    "adam-global-clipnorm": lambda k: k.optimizers.Adam(0.01, global_clipnorm=1.0),
    "adam-clipvalue": lambda k: k.optimizers.Adam(0.01, clipvalue=0.5),
    "adamw": lambda k: k.optimizers.AdamW(0.01, weight_decay=0.1),
    "adamw-amsgrad": lambda k: k.optimizers.AdamW(0.01, weight_decay=0.1, amsgrad=True),
    "rmsprop": lambda k: k.optimizers.RMSprop(0.01),
    "rmsprop-momentum-centered": lambda k: k.optimizers.RMSprop(0.01, momentum=0.5, centered=True),
    "sgd-exponential-decay": lambda k: k.optimizers.SGD(
        schedules(k).ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    ),
    "sgd-exponential-decay-staircase": lambda k: k.optimizers.SGD(
        schedules(k).ExponentialDecay(0.1, decay_steps=2, decay_rate=0.5, staircase=True)
    ),
    "adam-piecewise": lambda k: k.optimizers.Adam(
        schedules(k).PiecewiseConstantDecay([1, 2], [0.1, 0.01, 0.001])
    ),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_steps(name):
    conform(lambda lib: trajectory(lib, OPTIMIZERS[name]))


def test_clipping_options_together_raise():
    def case(lib):
        return lib.keras.optimizers.SGD(0.1, clipnorm=1.0, global_clipnorm=1.0)

    assert conform(lambda lib: case(lib) and None).family == "ValueError"


def test_schedule_values():
    def case(lib):
        sched = schedules(lib.keras)
        exp = sched.ExponentialDecay(0.1, decay_steps=3, decay_rate=0.5)
        stair = sched.ExponentialDecay(0.1, decay_steps=3, decay_rate=0.5, staircase=True)
        piece = sched.PiecewiseConstantDecay([2, 5], [1.0, 0.5, 0.1])
        return [(exp(i), stair(i), piece(i)) for i in range(7)]

    conform(case)


def test_minimize_with_a_gradient_tape():
    def case(lib):
        w = lib.tf.Variable(np.array([1.0, -2.0], F32))
        opt = lib.keras.optimizers.Adam(0.1)
        for _ in range(3):
            with lib.tf.GradientTape() as tape:
                loss = lib.tf.reduce_sum(lib.tf.square(w - lib.tf.constant([0.5, 0.5])))
            opt.apply_gradients(zip(tape.gradient(loss, [w]), [w], strict=True))
        return w

    conform(case)


def test_optimizer_in_strategy_run_sums_replica_gradients():
    """Under MirroredStrategy, apply_gradients in replica context all-reduces (sums) gradients."""

    def case(lib):
        s = lib.mirrored()
        with s.scope():
            w = lib.tf.Variable(np.array([1.0, 2.0], F32))
            opt = lib.keras.optimizers.SGD(0.1)

        def step():
            rid = lib.tf.cast(
                lib.distribute.get_replica_context().replica_id_in_sync_group, "float32"
            )
            g = lib.tf.constant([1.0, -1.0]) * (rid + 1.0)
            opt.apply_gradients([(g, w)])

        s.run(step)
        return [np.asarray(c) for c in s.experimental_local_results(w)]

    conform(case)


# Keras' config keys that hpcdist's optimizers do not have (its optimizers have no weight
# averaging, loss scaling or gradient accumulation): listed so that a new key on either side
# shows up here.
KERAS_ONLY_CONFIG_KEYS = {
    "use_ema",
    "ema_momentum",
    "ema_overwrite_frequency",
    "loss_scale_factor",
    "gradient_accumulation_steps",
    "weight_decay",  # Keras has it on every optimizer; hpcdist on AdamW only
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_get_config(name):
    """``learning_rate`` is a plain float (a schedule's serialized form) as in Keras' config."""

    def case(lib):
        config = OPTIMIZERS[name](lib.keras).get_config()
        lr = config["learning_rate"]
        if isinstance(lr, dict):  # Keras adds module and registered_name
            lr = {"class_name": lr["class_name"], "config": lr["config"]}
        shared = {
            k: v
            for k, v in config.items()
            if k not in KERAS_ONLY_CONFIG_KEYS and k not in ("name", "learning_rate")
        }
        return {"learning_rate": lr, "type": type(lr).__name__, **shared}

    conform(case)


def test_optimizer_from_config_round_trip():
    def case(lib):
        opt = OPTIMIZERS["adam-piecewise"](lib.keras)
        again = type(opt).from_config(opt.get_config())
        return trajectory(lib, lambda k: again)

    conform(case)
