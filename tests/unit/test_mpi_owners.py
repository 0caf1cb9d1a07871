"""mpi4py is imported only where MPI is owned: comm, cluster, ``info`` and ``abort``.

Raw point-to-point and one-sided traffic goes through `hpcdist.comm.p2p` and
`hpcdist.comm.rma` (docs/architecture.md, "Raw MPI traffic and waiting"); every other module
uses them, so that tags, deadlines and windows' lifetimes have one owner. Imports are read
with `ast`, wherever they run (module level or inside a function; ``TYPE_CHECKING`` blocks
count too: a name from mpi4py in an annotation is MPI leaking into the signature).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "hpcdist"

#: The modules (and packages) that may import mpi4py.
ALLOWED = (
    "hpcdist.comm",
    "hpcdist.cluster",
    "hpcdist.cli.info",
    "hpcdist.abort",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def mpi4py_imports(path: Path) -> list[int]:
    """Lines of ``path`` that import mpi4py (or a submodule of it)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(n == "mpi4py" or n.startswith("mpi4py.") for n in names):
            lines.append(node.lineno)
    return lines


def allowed(module: str) -> bool:
    return any(module == a or module.startswith(a + ".") for a in ALLOWED)


def test_mpi4py_is_imported_only_by_its_owners():
    bad = [
        f"{path.relative_to(ROOT.parent)}:{line} imports mpi4py"
        for path in sorted(ROOT.rglob("*.py"))
        if not allowed(module_name(path))
        for line in mpi4py_imports(path)
    ]
    assert not bad, (
        "mpi4py imported outside " + ", ".join(ALLOWED) + " (use hpcdist.comm.p2p for "
        "messages, hpcdist.comm.rma for windows):\n" + "\n".join(bad)
    )


def test_the_owners_exist():
    for name in ("hpcdist.comm.p2p", "hpcdist.comm.rma", "hpcdist.abort"):
        assert (ROOT.parent / Path(*name.split("."))).with_suffix(".py").exists(), name
    assert any(mpi4py_imports(p) for p in (ROOT / "comm").glob("*.py"))
