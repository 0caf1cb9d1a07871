"""A 2-layer transformer encoder classifier trained with ``fit`` on synthetic token sequences.

Run: ``python examples/models/transformer_encoder.py [--strategy default|mirrored|multiworker|ps]``
(``multiworker`` under ``mpiexec -n 2``, ``ps`` under ``HPCDIST_NUM_PS=1 mpiexec -n 3``).

Embedding + a learned position embedding, ``--layers`` encoder blocks (MultiHeadAttention, Add,
LayerNormalization, Dense/GELU; see `architectures.build_transformer_encoder`),
GlobalAveragePooling1D and a Dense classifier. The task: does a sequence hold more tokens from
the lower half of the vocabulary than from the upper half. Prints the loss and accuracy of each
epoch and its mean step time.
"""

from __future__ import annotations

from architectures import build_transformer_encoder, synthetic_tokens
from gallery import make_parser, train

import hpcdist as hd


def main() -> None:
    parser = make_parser(__doc__, epochs=4, batch_size=32)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=16)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2, help="encoder blocks")
    args = parser.parse_args()
    data = synthetic_tokens(args.examples, args.vocab, args.seq_len, seed=args.seed)
    train(
        "transformer_encoder",
        args,
        lambda: build_transformer_encoder(
            hd.nn, args.vocab, args.seq_len, args.dim, blocks=args.layers
        ),
        data,
    )


if __name__ == "__main__":
    main()
