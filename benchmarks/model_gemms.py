"""How much of a gallery model's training step is matrix products, and at what rate.

Run: ``python benchmarks/model_gemms.py [--models cnn,resnet20,transformer] [--batches 32,128]
[--steps 8] [--out r.json]``, one thread (OMP/MKL/OpenBLAS threads 1 unless set).

The step is `benchmarks/peers/models.py`'s (GradientTape, sparse cross-entropy from logits,
Adam, the same batch every step). For the timed steps ``numpy.matmul`` is wrapped: every matrix
product hpcdist's ops make goes through it (convolutions, Dense, EinsumDense and attention),
so the wrapper adds up their seconds and floating-point operations (``2 * M * N * K``). Per
model and batch: the median step, and in that step the products' milliseconds, GFLOP, GFLOP/s
and share of the step (the wrapper's own cost, under 1 us a call, is in the step). The products
are OpenBLAS's own speed on these shapes: the rest of the step is hpcdist's.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(ROOT, "benchmarks", "peers"))

from _util import emit  # noqa: E402
from models import batch, hpcdist_step  # noqa: E402  (benchmarks/peers/models.py)


class ProductClock:
    """Wraps ``numpy.matmul`` while active: seconds, FLOPs and calls of every product."""

    def __init__(self) -> None:
        self.real = np.matmul
        self.seconds = self.flops = 0.0
        self.calls = 0

    def __call__(self, a: Any, b: Any, *args: Any, **kwargs: Any) -> Any:
        """``numpy.matmul(a, b, ...)``, timed and counted."""
        t0 = time.perf_counter()
        out = self.real(a, b, *args, **kwargs)
        self.seconds += time.perf_counter() - t0
        self.flops += 2.0 * out.size * np.shape(a)[-1]
        self.calls += 1
        return out

    def __enter__(self) -> ProductClock:
        self.seconds = self.flops = 0.0
        self.calls = 0
        np.matmul = self
        return self

    def __exit__(self, *exc: Any) -> None:
        np.matmul = self.real


def measure(name: str, size: int, steps: int) -> dict[str, Any]:
    """The median step of ``steps`` (after 3 warm-up steps) and its products."""
    step = hpcdist_step(name, *batch(name, size))
    for _ in range(3):
        step()
    clock, rows = ProductClock(), []
    for _ in range(steps):
        with clock:
            t0 = time.perf_counter()
            step()
            wall = time.perf_counter() - t0
        rows.append((wall, clock.seconds, clock.flops, clock.calls))
    wall, seconds, flops, calls = sorted(rows)[len(rows) // 2]
    return {
        "model": name,
        "batch": size,
        "step_ms": wall * 1e3,
        "products_ms": seconds * 1e3,
        "products_gflop": flops / 1e9,
        "products_gflops": flops / seconds / 1e9 if seconds else None,
        "products_share": seconds / wall,
        "products": calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="cnn,resnet20,transformer")
    parser.add_argument("--batches", default="32,128")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    cases = [
        measure(m, int(b), args.steps)
        for m in args.models.split(",")
        for b in args.batches.split(",")
    ]
    emit({"benchmark": "model_gemms", "cases": cases}, args.out)


if __name__ == "__main__":
    main()
