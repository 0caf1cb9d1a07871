"""The functional API, model files and batch backups on 2 MPI ranks (real mpiexec)."""

import textwrap

from tests.helpers import clean_env, run_mpi

_SCRIPT = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import hpcdist as hd
    from hpcdist.nn import callbacks, layers, models

    out = sys.argv[1]
    strategy = hd.MultiWorkerMirroredStrategy()
    rank = strategy.cluster_resolver.task_id
    hd.nn.set_random_seed(rank)  # different draws: the chief's initial values must win
    with strategy.scope():
        inputs = hd.nn.Input((6, 6, 1))
        x = layers.Conv2D(3, 3, padding="same", activation="relu")(inputs)
        x = layers.Flatten()(layers.MaxPooling2D()(x))
        model = hd.nn.Model(inputs, layers.Dense(2)(x))
        model.compile(hd.nn.optimizers.SGD(0.05), "mse")
    rng = np.random.default_rng(0)
    x_data, y_data = rng.random((32, 6, 6, 1)), rng.random((32, 2))
    backup = callbacks.BackupAndRestore(os.path.join(out, "backup"), save_freq=3)
    history = model.fit(x_data, y_data, batch_size=8, epochs=2, verbose=0, callbacks=[backup])
    path = os.path.join(out, "model.h5")
    model.save(path)
    loaded = models.load_model(path)
    same = np.array_equal(loaded.predict(x_data), model.predict(x_data))
    with open(os.path.join(out, f"rank{rank}"), "w") as f:
        f.write(f"{same} {history.history['loss'][-1]:.8f} {model.get_weights()[0].sum():.8f}")
    """
)


def test_functional_fit_save_load_on_two_ranks(tmp_path):
    script = tmp_path / "two_ranks.py"
    script.write_text(_SCRIPT)
    done = run_mpi(2, [str(script), str(tmp_path)], timeout=180, env=clean_env())
    assert done.returncode == 0, done.stdout + done.stderr
    seen = [(tmp_path / f"rank{r}").read_text().split() for r in (0, 1)]
    assert seen[0] == seen[1]  # the same loss and weights on both ranks
    assert seen[0][0] == "True"  # the loaded model predicts exactly as the trained one
    assert (tmp_path / "model.h5").exists() and not (tmp_path / "backup").exists()
