"""ResNet-20 (the CIFAR-10 network of He et al. 2016) trained with ``fit`` on synthetic images.

Run: ``python examples/models/resnet20.py [--strategy default|mirrored|multiworker|ps]``
(``multiworker`` under ``mpiexec -n 2``, ``ps`` under ``HPCDIST_NUM_PS=1 mpiexec -n 3``).
``--width 4 --blocks 1 --image-size 16`` makes a small version for a quick run.

Three stages of ``--blocks`` basic residual blocks with BatchNormalization and Add, then
GlobalAveragePooling2D (see `architectures.build_resnet20`), on CIFAR-shaped synthetic images:
each class adds its own fixed pattern to Gaussian noise. Prints the loss and accuracy of each
epoch and its mean step time.
"""

from __future__ import annotations

from architectures import build_resnet20, synthetic_images
from gallery import make_parser, train

import hpcdist as hd


def main() -> None:
    parser = make_parser(__doc__, epochs=3, batch_size=32)
    parser.add_argument("--width", type=int, default=16, help="filters of the first stage")
    parser.add_argument("--blocks", type=int, default=3, help="residual blocks per stage")
    parser.add_argument("--image-size", type=int, default=32)
    args = parser.parse_args()
    data = synthetic_images(args.examples, args.image_size, seed=args.seed)
    train(
        "resnet20",
        args,
        lambda: build_resnet20(hd.nn, args.width, args.blocks, args.image_size),
        data,
    )


if __name__ == "__main__":
    main()
