"""Soak: minutes of ``Model.fit`` under MultiWorkerMirroredStrategy with a checkpoint every epoch.

Run: ``mpiexec -n 2 python tests/soak/soak_fit.py [--minutes 3] [--dir DIR]`` (``make soak``).
A small MLP learns a fixed linear target from synthetic data. After every epoch the chief saves
through a `CheckpointManager` (keeping 3); at the end a fresh model restores the latest
checkpoint, which must hold exactly the trained weights. Prints JSON on rank 0: epochs, the
loss at the start and the end (it must fall and stay finite), checkpoints written, wrong
restores (must be 0) and resident memory after the first epoch and at the end, per rank.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time

import numpy as np
from memory import rss_mib

import hpcdist as hd


def build(strategy: hd.MultiWorkerMirroredStrategy) -> tuple[hd.nn.Model, hd.nn.optimizers.SGD]:
    """The model and its optimizer, built under ``strategy``."""
    with strategy.scope():
        model = hd.nn.Sequential(
            [
                hd.nn.layers.Dense(64, activation="relu", input_shape=(32,)),
                hd.nn.layers.Dense(1),
            ]
        )
        optimizer = hd.nn.optimizers.SGD(0.01, momentum=0.9)
        model.compile(optimizer=optimizer, loss="mse")
    return model, optimizer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--dir", help="checkpoint directory (default: a temporary one)")
    args = parser.parse_args()
    strategy = hd.MultiWorkerMirroredStrategy()
    comm = hd.comm.world()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 32)).astype(np.float32)
    y = (x @ rng.standard_normal((32, 1)) / 4).astype(np.float32)
    hd.nn.set_random_seed(1)
    model, optimizer = build(strategy)
    directory = args.dir or comm.broadcast_object(tempfile.mkdtemp(prefix="hpcdist-soak-"))
    checkpoint = hd.Checkpoint(model=model, optimizer=optimizer)
    manager = hd.CheckpointManager(checkpoint, directory, max_to_keep=3)
    losses: list[float] = []
    rss_first = None
    deadline = time.monotonic() + args.minutes * 60
    saved = 0
    while True:
        history = model.fit(x, y, batch_size=256, epochs=1, verbose=0)
        losses.append(float(history.history["loss"][-1]))
        manager.save()
        saved += 1
        if rss_first is None:
            rss_first = rss_mib()
        # every rank stops after the same epoch
        if comm.broadcast_object(time.monotonic() > deadline):
            break
    restored, restored_optimizer = build(strategy)
    status = hd.Checkpoint(model=restored, optimizer=restored_optimizer).restore(
        manager.latest_checkpoint
    )
    status.assert_consumed()
    wrong = sum(
        not np.array_equal(a, b)
        for a, b in zip(model.get_weights(), restored.get_weights(), strict=True)
    )
    finite = all(math.isfinite(v) for v in losses)
    stats = comm.allgather_object((rss_first, rss_mib(), wrong))
    if comm.rank == 0:
        report = {
            "soak": "fit",
            "ranks": comm.size,
            "epochs": len(losses),
            "loss_first": losses[0],
            "loss_last": losses[-1],
            "losses_finite": finite,
            "checkpoints_written": saved,
            "checkpoints_kept": len(manager.checkpoints),
            "wrong_restored_weights": sum(s[2] for s in stats),
            "rss_mib_after_first_epoch": [round(s[0], 1) for s in stats],
            "rss_mib_at_end": [round(s[1], 1) for s in stats],
            "rss_growth_mib": [round(s[1] - s[0], 1) for s in stats],
        }
        print(json.dumps(report, indent=1))
        if args.dir is None:
            shutil.rmtree(directory)
    bad = not finite or losses[-1] >= losses[0] or any(s[2] for s in stats)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
