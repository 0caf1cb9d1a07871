"""``tf.app.run``: call ``main(argv)`` and exit with its return value."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["run"]


def run(main: Callable[[list[str]], Any] | None = None, argv: list[str] | None = None) -> None:
    """Call ``main(argv)`` (``argv`` defaults to ``sys.argv``), then ``sys.exit`` its result.

    Raises:
        ValueError: No ``main`` given and ``__main__`` has none.
    """
    if main is None:
        main = getattr(sys.modules["__main__"], "main", None)
        if main is None:
            raise ValueError("tf.app.run: no main function given and __main__ defines none")
    sys.exit(main(list(sys.argv if argv is None else argv)))
