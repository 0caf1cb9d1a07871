"""Write the TensorFlow version of a ported tutorial: the conformance copy.

Usage: ``python to_tensorflow.py TUTORIAL.py OUTDIR`` writes ``OUTDIR/TUTORIAL.py`` (and copies
``synthetic_mnist.py`` beside it). The rules undo exactly the marked edits, so what remains is
the proof that nothing else changed:

- a line ending in ``# hpcdist`` (the hpcdist import block, hpcdist-only lines) is dropped;
- a line ``# TensorFlow: CODE`` becomes ``CODE`` (TensorFlow's import block);
- a line ``CODE  # TF: ORIGINAL`` becomes ``ORIGINAL`` at the same indentation;
- lines between ``# TF-only begin`` and ``# TF-only end`` are uncommented (code hpcdist
  cannot run, such as in-process gRPC servers).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def convert(source: str) -> str:
    """The TensorFlow text of a tutorial's hpcdist text.

    Args:
        source: The tutorial as written for hpcdist.

    Returns:
        The same program with TensorFlow's imports and the marked lines restored.
    """
    out: list[str] = []
    tf_only = False
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == "# TF-only begin":
            tf_only = True
        elif stripped == "# TF-only end":
            tf_only = False
        elif tf_only:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + stripped[2:] if stripped.startswith("# ") else indent)
        elif line.endswith("# hpcdist"):
            continue
        elif stripped.startswith("# TensorFlow: "):
            out.append(line.split("# TensorFlow: ", 1)[1])
        elif "  # TF: " in line:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + line.split("  # TF: ", 1)[1])
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> None:
    """Convert ``argv[1]`` into the directory ``argv[2]``."""
    source, outdir = Path(argv[1]), Path(argv[2])
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / source.name).write_text(convert(source.read_text()))
    shutil.copy(Path(__file__).with_name("synthetic_mnist.py"), outdir / "synthetic_mnist.py")


if __name__ == "__main__":
    main(sys.argv)
