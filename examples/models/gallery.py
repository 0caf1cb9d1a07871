"""What the gallery's models share: the strategy flag, training with ``fit``, the figures.

``--strategy`` picks where the model trains:

- ``default``: no strategy (one replica, one process);
- ``mirrored``: `MirroredStrategy` on two local replicas (``cpu:0``, ``cpu:1``) in one process;
- ``multiworker``: `MultiWorkerMirroredStrategy`, one replica per rank (``mpiexec -n N``);
- ``ps``: `ParameterServerStrategy` (``HPCDIST_NUM_PS=1 mpiexec -n 3``: a coordinator, the ps
  ranks, the rest workers); only the coordinator returns from building the strategy.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import hpcdist as hd

__all__ = ["STRATEGIES", "EpochTimer", "make_parser", "make_strategy", "train"]

STRATEGIES = ("default", "mirrored", "multiworker", "ps")


def make_parser(description: str | None, epochs: int, batch_size: int) -> argparse.ArgumentParser:
    """The flags every gallery model takes (each script adds its size flags)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--strategy", choices=STRATEGIES, default="default")
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--batch-size", type=int, default=batch_size, help="global batch size")
    parser.add_argument("--examples", type=int, default=512, help="synthetic training examples")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    return parser


def _ps_strategy() -> Any:
    """``HPCDIST_NUM_PS`` ps ranks (default 1), the coordinator, the rest workers."""
    from mpi4py import MPI

    size = MPI.COMM_WORLD.Get_size()
    num_ps = hd.settings.get_settings().num_ps or 1
    if size < num_ps + 2:
        raise SystemExit(
            f"--strategy ps needs a coordinator, {num_ps} ps rank(s) and at least one worker: "
            f"at least {num_ps + 2} ranks, got {size}"
        )
    jobs = {"chief": 1, "ps": num_ps, "worker": size - 1 - num_ps}
    return hd.ParameterServerStrategy(hd.cluster.resolve(jobs=jobs))


def make_strategy(name: str) -> Any:
    """The strategy of ``--strategy name`` (see the module docstring).

    Raises:
        ValueError: ``name`` is not one of `STRATEGIES`.
    """
    if name == "default":
        return hd.get_strategy()
    if name == "mirrored":
        return hd.MirroredStrategy(["cpu:0", "cpu:1"])
    if name == "multiworker":
        return hd.MultiWorkerMirroredStrategy()
    if name == "ps":
        return _ps_strategy()
    raise ValueError(f"strategy must be one of {STRATEGIES}, got {name!r}")


def reports(strategy: Any) -> bool:
    """Whether this process prints the figures (rank 0 of a multi-worker job; else always)."""
    return bool(getattr(strategy.extended, "should_checkpoint", True))


class EpochTimer(hd.nn.callbacks.Callback):
    """Wall time of each epoch, in seconds."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: list[float] = []
        self._start = 0.0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """Start the clock."""
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Stop it."""
        self.seconds.append(time.perf_counter() - self._start)


def train(
    name: str,
    args: argparse.Namespace,
    build: Callable[[], Any],
    data: tuple[np.ndarray, np.ndarray],
) -> dict[str, Any]:
    """Build under ``--strategy``, train with ``fit`` on ``data``, print loss, accuracy, step time.

    Args:
        name: The model's name in the printed lines.
        args: The parsed flags of `make_parser`.
        build: Builds the (uncompiled) model; called under the strategy's scope.
        data: ``(inputs, integer labels)``.

    Returns:
        ``{"loss": [...], "accuracy": [...], "step_ms": [...]}``, one entry per epoch.
    """
    strategy = make_strategy(args.strategy)
    hd.nn.set_random_seed(args.seed)
    x, y = data
    steps = len(x) // args.batch_size
    with strategy.scope():
        model = build()
        model.compile(
            optimizer=hd.nn.optimizers.Adam(args.learning_rate),
            loss=hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[hd.nn.metrics.SparseCategoricalAccuracy(name="accuracy")],
        )
    timer = EpochTimer()
    history = model.fit(
        x,
        y,
        batch_size=args.batch_size,
        epochs=args.epochs,
        steps_per_epoch=steps,
        callbacks=[timer],
        verbose=0,
    )
    figures = {
        "loss": [float(v) for v in history.history["loss"]],
        "accuracy": [float(v) for v in history.history["accuracy"]],
        "step_ms": [1e3 * s / steps for s in timer.seconds],
    }
    if reports(strategy):
        print(
            f"{name}: {model.count_params()} parameters, strategy {args.strategy} "
            f"({strategy.num_replicas_in_sync} replica(s)), global batch {args.batch_size}, "
            f"{steps} steps per epoch"
        )
        for epoch, (loss, acc, ms) in enumerate(
            zip(figures["loss"], figures["accuracy"], figures["step_ms"], strict=True), 1
        ):
            print(f"epoch {epoch}: loss {loss:.4f}, accuracy {acc:.4f}, step {ms:.1f} ms")
        first, last = figures["loss"][0], figures["loss"][-1]
        print(f"loss {first:.4f} -> {last:.4f} ({'falls' if last < first else 'does not fall'})")
    return figures
