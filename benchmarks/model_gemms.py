"""How much of a gallery model's training step is matrix products, and at what rate.

Run: ``python benchmarks/model_gemms.py [--models cnn,resnet20,transformer] [--batches 32,128]
[--steps 8] [--out r.json]``, one thread (OMP/MKL/OpenBLAS threads 1 unless set).

The step is `benchmarks/peers/models.py`'s (GradientTape, sparse cross-entropy from logits,
Adam, the same batch every step). For the timed steps ``numpy.matmul`` is wrapped: every
matrix-matrix product of hpcdist's convolutions, Dense, EinsumDense and attention goes through
it, so the wrapper adds up their seconds and floating-point operations (``2 * M * N * K``). Not
counted: the per-channel and per-row sums, matrix-vector products with a vector of ones
(``@`` in `hpcdist.core.reductions`), and ``einsum`` (the depthwise convolution's). Per model
and batch: the median step, and in that step the products' milliseconds, GFLOP, GFLOP/s and
share of the step (the wrapper's own cost, under 1 us a call, is in the step), and the
products grouped by shape (``rows x k x n``, the rows of every matrix of a batched product
together), slowest first, each with its rate: OpenBLAS's own speed on these shapes. The rest
of the step is hpcdist's.
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
        self.shapes: dict[tuple[int, int, int], list[float]] = {}  # -> [seconds, flops, calls]

    def __call__(self, a: Any, b: Any, *args: Any, **kwargs: Any) -> Any:
        """``numpy.matmul(a, b, ...)``, timed and counted."""
        t0 = time.perf_counter()
        out = self.real(a, b, *args, **kwargs)
        seconds = time.perf_counter() - t0
        k, n = np.shape(a)[-1], out.shape[-1]
        flops = 2.0 * out.size * k
        self.seconds += seconds
        self.flops += flops
        self.calls += 1
        shape = self.shapes.setdefault((out.size // max(n, 1), k, n), [0.0, 0.0, 0])
        shape[0] += seconds
        shape[1] += flops
        shape[2] += 1
        return out

    def __enter__(self) -> ProductClock:
        self.seconds = self.flops = 0.0
        self.calls = 0
        self.shapes = {}
        np.matmul = self
        return self

    def by_shape(self, top: int = 8) -> list[dict[str, Any]]:
        """The ``top`` shapes that took longest, with their calls, milliseconds and rate."""
        ranked = sorted(self.shapes.items(), key=lambda item: -item[1][0])[:top]
        return [
            {
                "rows_k_n": list(shape),
                "calls": int(calls),
                "ms": seconds * 1e3,
                "gflops": flops / seconds / 1e9 if seconds else None,
            }
            for shape, (seconds, flops, calls) in ranked
        ]

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
        rows.append((wall, clock.seconds, clock.flops, clock.calls, clock.by_shape()))
    wall, seconds, flops, calls, shapes = sorted(rows, key=lambda row: row[0])[len(rows) // 2]
    return {
        "model": name,
        "batch": size,
        "step_ms": wall * 1e3,
        "products_ms": seconds * 1e3,
        "products_gflop": flops / 1e9,
        "products_gflops": flops / seconds / 1e9 if seconds else None,
        "products_share": seconds / wall,
        "products": calls,
        "slowest_shapes": shapes,
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
