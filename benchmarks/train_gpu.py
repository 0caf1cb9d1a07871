"""Training on one GPU: hd.nn on CuPy against hd.nn on numpy, and both against hand-written code.

Run: ``python benchmarks/train_gpu.py [--out results.json]`` on a machine with a CUDA GPU and
CuPy. The model is train_scaling's MLP (512-1024-1024-10, float32, SGD). Measured in
interleaved rounds, medians, samples/s of:

- ``hpcdist_cupy``: ``Model.fit`` under ``OneDeviceStrategy("gpu:0")`` (batches arrive as numpy
  and move to the GPU at the first layer, as in ordinary use);
- ``hpcdist_numpy``: the same model under the default strategy (host, numpy);
- ``raw_cupy`` / ``raw_numpy``: train_scaling's hand-written MLP in CuPy (batches copied to
  the GPU each step) and in numpy: the baselines.

Ratios: ``cupy_speedup`` = hpcdist_cupy / hpcdist_numpy; ``cupy_vs_raw`` = hpcdist_cupy /
raw_cupy (1.0 = no overhead over hand-written CuPy).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import emit, median_time
from train_scaling import SIZES, build, numpy_mlp

import hpcdist as hd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=16, help="steps per timing")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out")
    args = parser.parse_args()
    import cupy

    b, steps = args.batch, args.steps
    rng = np.random.default_rng(0)
    x = rng.standard_normal((b * steps, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[3], len(x))
    gpu_model = build(hd.OneDeviceStrategy("gpu:0"))
    cpu_model = build(hd.get_strategy())
    raw_gpu = numpy_mlp(gpu_model.get_weights(), xp=cupy)
    raw_cpu = numpy_mlp(cpu_model.get_weights())
    sync = cupy.cuda.get_current_stream().synchronize

    def fit(model):
        return lambda: model.fit(x, y, batch_size=b, epochs=1, verbose=0, shuffle=False)

    def raw_epoch(step, to_device):
        def run():
            for i in range(steps):
                xb, yb = x[i * b : (i + 1) * b], y[i * b : (i + 1) * b]
                step(to_device(xb), to_device(yb))
            sync()

        return run

    calls = {
        "hpcdist_cupy": fit(gpu_model),
        "hpcdist_numpy": fit(cpu_model),
        "raw_cupy": raw_epoch(raw_gpu, cupy.asarray),
        "raw_numpy": raw_epoch(raw_cpu, np.asarray),
    }
    for fn in calls.values():  # warm-up: kernels compiled, memory pools filled
        fn()
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(args.rounds):
        for key, fn in calls.items():
            times[key].append(median_time(fn, 1) / steps)
    rate = {k: b / float(np.median(v)) for k, v in times.items()}
    result = {
        "benchmark": "train_gpu",
        "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "batch": b,
        "layers": SIZES,
        **{f"{k}_samples_per_s": v for k, v in rate.items()},
        "cupy_speedup": rate["hpcdist_cupy"] / rate["hpcdist_numpy"],
        "cupy_vs_raw": rate["hpcdist_cupy"] / rate["raw_cupy"],
        "numpy_vs_raw": rate["hpcdist_numpy"] / rate["raw_numpy"],
    }
    print(
        f"samples/s: hpcdist cupy {rate['hpcdist_cupy']:.0f}, numpy {rate['hpcdist_numpy']:.0f} "
        f"({result['cupy_speedup']:.1f}x); raw cupy {rate['raw_cupy']:.0f}, raw numpy "
        f"{rate['raw_numpy']:.0f}",
        file=sys.stderr,
    )
    emit(result, args.out)


if __name__ == "__main__":
    main()
