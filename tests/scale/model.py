"""The alpha-beta model of docs/scaling.md: fit it to a link, predict a gradient all-reduce.

    python tests/scale/model.py LINK.json [--plot docs/scaling.png]

LINK.json is the ``SCALE`` record of `scripts/link.py` run across the two namespace nodes. The
model: a message of m bytes costs ``alpha + m * beta`` (alpha: latency, beta: seconds per byte),
fitted by least squares to the one-way ping-pong times. hpcdist's checked all-reduce over P
nodes (one rank per node, or the node leaders of the hierarchical backend) is a 16-byte header
all-reduce followed by the payload all-reduce, each as MPICH runs it: recursive doubling below
2 KiB (``ceil(log2 P)`` rounds of the whole message), reduce-scatter + all-gather above
(``2 ceil(log2 P)`` rounds moving ``2 (P - 1) / P * m`` bytes). A gradient of G bytes goes in
packs of ``bytes_per_pack`` (4 MiB), each pack one checked all-reduce. Local reduction and
shared-memory time inside a node are left out (see docs/scaling.md).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

PACK = 4 << 20
SHORT = 2048
HEADER = 16
#: Gradient sizes (float32 bytes) of the models docs/scaling.md predicts for.
MODELS = {
    "MLP (digits, 64-128-10: 9,610 parameters)": 9_610 * 4,
    "ResNet-20 (0.27 M parameters)": 270_000 * 4,
    "small transformer (4 M parameters)": 4_000_000 * 4,
}


def fit(one_way: dict[int, float]) -> tuple[float, float]:
    """Least-squares ``(alpha, beta)`` of ``t = alpha + m * beta`` over the measured sizes."""
    sizes = sorted(one_way)
    n = len(sizes)
    mean_m = sum(sizes) / n
    mean_t = sum(one_way[m] for m in sizes) / n
    cov = sum((m - mean_m) * (one_way[m] - mean_t) for m in sizes)
    var = sum((m - mean_m) ** 2 for m in sizes)
    beta = cov / var
    # the latency from the small messages alone (the large ones would swamp it)
    small = [m for m in sizes if m <= 4096]
    alpha = sum(one_way[m] - m * beta for m in small) / len(small)
    return alpha, beta


def exchange_beta(raw: dict[int, float], alpha: float) -> float:
    """Seconds per byte of a simultaneous exchange, from raw all-reduces on 2 nodes (>= 1 MiB).

    At P = 2 the model's payload is ``2 alpha + m beta``; both directions then move at once
    (and the reduction runs), which ping-pong does not see.
    """
    large = [m for m in raw if m >= 1 << 20]
    return sum((raw[m] - 2 * alpha) / m for m in large) / len(large)


def allreduce(m: int, nodes: int, alpha: float, beta: float) -> float:
    """Seconds of MPICH's all-reduce of ``m`` bytes over ``nodes`` nodes."""
    rounds = math.ceil(math.log2(nodes)) if nodes > 1 else 0
    if m < SHORT:
        return rounds * (alpha + m * beta)
    return 2 * rounds * alpha + 2 * (nodes - 1) / nodes * m * beta


def checked(m: int, nodes: int, alpha: float, beta: float) -> float:
    """Seconds of one checked all-reduce: header check, then the payload."""
    return allreduce(HEADER, nodes, alpha, beta) + allreduce(m, nodes, alpha, beta)


def gradient(total: int, nodes: int, alpha: float, beta: float) -> float:
    """Seconds per step to all-reduce ``total`` bytes of gradients in packs of `PACK`."""
    full, rest = divmod(total, PACK)
    seconds = full * checked(PACK, nodes, alpha, beta)
    return seconds + (checked(rest, nodes, alpha, beta) if rest else 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("link")
    parser.add_argument("--plot")
    args = parser.parse_args()
    record = json.loads(Path(args.link).read_text())
    one_way = {int(k): v for k, v in record["one_way_s"].items()}
    alpha, beta = fit(one_way)
    raw = {int(k): v for k, v in record["raw_allreduce_s"].items()}
    beta_x = exchange_beta(raw, alpha)
    print(f"alpha = {alpha * 1e6:.1f} us, beta = {beta * 1e9:.3f} ns/B ({1 / beta / 1e9:.2f} GB/s)")
    print(f"exchange beta = {beta_x * 1e9:.3f} ns/B ({1 / beta_x / 1e9:.2f} GB/s)")
    print("| message | one way measured (us) | alpha + m beta (us) |")
    print("|---|---|---|")
    for m in sorted(one_way):
        print(f"| {m} B | {one_way[m] * 1e6:.1f} | {(alpha + m * beta) * 1e6:.1f} |")
    print(
        "| all-reduce (2 nodes) | hpcdist checked (us) | raw MPI (us) | model, ping-pong beta "
        "(us) | model, exchange beta (us) |"
    )
    print("|---|---|---|---|---|")
    for key, seconds in record["checked_allreduce_s"].items():
        m = int(key)
        print(
            f"| {m} B | {seconds * 1e6:.0f} | {raw[m] * 1e6:.0f} | "
            f"{checked(m, 2, alpha, beta) * 1e6:.0f} | {checked(m, 2, alpha, beta_x) * 1e6:.0f} |"
        )
    print("| model (gradient bytes) | beta | 2 nodes (ms) | 64 nodes (ms) | 512 nodes (ms) |")
    print("|---|---|---|---|---|")
    for name, total in MODELS.items():
        for label, b in (("ping-pong", beta), ("exchange", beta_x)):
            times = [gradient(total, p, alpha, b) * 1e3 for p in (2, 64, 512)]
            print(
                f"| {name} ({total:,} B) | {label} | "
                + " | ".join(f"{t:.2f}" for t in times)
                + " |"
            )
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        nodes = [2**k for k in range(1, 10)]
        fig, ax = plt.subplots(figsize=(6.4, 4))
        for name, total in MODELS.items():
            line = ax.plot(
                nodes, [gradient(total, p, alpha, beta_x) * 1e3 for p in nodes], "o-", label=name
            )
            ax.plot(
                nodes,
                [gradient(total, p, alpha, beta) * 1e3 for p in nodes],
                ":",
                color=line[0].get_color(),
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("nodes (one rank per node)")
        ax.set_ylabel("gradient all-reduce per step (ms)")
        link = f"alpha={alpha * 1e6:.0f} us, exchange 1/beta={1 / beta_x / 1e9:.2f} GB/s"
        ax.set_title(f"{link} (dotted: ping-pong 1/beta={1 / beta / 1e9:.2f} GB/s)", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
