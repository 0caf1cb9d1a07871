"""hpcdist's layers form a stack: no upward import, no cycle, no import inside a function.

The rules (docs/architecture.md): foundation -> comm | core -> strategies -> checkpoint -> nn ->
command line and root package. The layer table of docs/architecture.md is checked against
`LAYERS` here. Each module's imports are read from its source with `ast`; an
import counts where Python executes it (module level, or inside a function body), and a
``TYPE_CHECKING`` block does not count.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "hpcdist"

# Layer of each top-level part of the package; a module may import its own layer and below.
# comm and core share a rank but may not import each other (checked separately).
LAYERS = {
    "hpcdist._version": 0,
    "hpcdist.errors": 0,
    "hpcdist.settings": 0,
    "hpcdist.logger": 0,
    "hpcdist.abort": 0,
    "hpcdist.exit_codes": 0,
    "hpcdist.timeline": 0,
    "hpcdist.utils": 0,
    "hpcdist.cluster": 0,
    "hpcdist.data": 0,
    "hpcdist.io": 0,
    "hpcdist.comm": 1,
    "hpcdist.core": 1,
    "hpcdist.strategies": 2,
    "hpcdist.partitioners": 2,
    "hpcdist.checkpoint": 3,
    "hpcdist.nn": 4,
    "hpcdist.cli": 5,
    "hpcdist.tf_toplevel": 5,
    "hpcdist.compat": 5,
    "hpcdist.__main__": 5,
    "hpcdist": 5,
}
SIBLINGS_APART = [("hpcdist.comm", "hpcdist.core")]

# Imports allowed inside a function body: optional GPU modules anywhere, and modules that
# start MPI where a process must not start it before it is needed (each with its reason).
OPTIONAL_ANYWHERE = ("cupy", "cupyx")
LAZY_ALLOWED = {
    # `hpcdist run` and `bench` only start mpiexec/srun; `info` starts MPI when it runs.
    ("hpcdist.cli.commands", "hpcdist.cli.info"),
    # Installed by `python -m hpcdist script.py` before the script, which may set mpi4py.rc.
    ("hpcdist.abort", "mpi4py"),
    # `Dataset.cache(filename)` writes HDF5; `import hpcdist.data` (and the strategies) must
    # not load h5py, so the file cache loads it on first use.
    ("hpcdist.data.cache", "h5py"),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def resolve(module: str, node: ast.ImportFrom) -> list[str]:
    """Modules an ``import`` or ``from ... import`` statement loads (the deepest known ones)."""
    if node.level:
        base = module.split(".")
        package = base if (ROOT.parent / Path(*base) / "__init__.py").exists() else base[:-1]
        prefix = ".".join(package[: len(package) - node.level + 1])
        source = f"{prefix}.{node.module}" if node.module else prefix
    else:
        source = node.module or ""
    out = []
    for alias in node.names:
        candidate = f"{source}.{alias.name}"
        out.append(candidate if candidate in MODULES else source)
    return out


def imports(path: Path) -> tuple[set[str], list[tuple[int, str]]]:
    """(modules imported when the module runs, [(line, module) imported inside functions])."""
    module = module_name(path)
    top: set[str] = set()
    inner: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, True)
                continue
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                names = resolve(module, child)
            else:
                visit(child, in_function)
                continue
            for name in names:
                if in_function:
                    inner.append((child.lineno, name))
                elif name.startswith("hpcdist"):
                    top.add(name)

    visit(ast.parse(path.read_text(), str(path)), False)
    return top, inner


FILES = sorted(ROOT.rglob("*.py"))
MODULES = {module_name(p) for p in FILES}
GRAPH = {module_name(p): imports(p) for p in FILES}


def layer_of(module: str) -> tuple[str, int]:
    best = max((k for k in LAYERS if module == k or module.startswith(k + ".")), key=len)
    return best, LAYERS[best]


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_upward_import():
    bad = []
    for module, (top, _) in GRAPH.items():
        part, rank = layer_of(module)
        for target in top:
            if target not in MODULES:
                continue
            target_part, target_rank = layer_of(target)
            if target_rank > rank:
                bad.append(f"{module} ({part}) imports {target} ({target_part}, a higher layer)")
            for a, b in SIBLINGS_APART:
                if {part, target_part} == {a, b}:
                    bad.append(f"{module} imports {target}: {a} and {b} are independent")
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycle():
    # A submodule import also runs its packages' __init__ (hpcdist.a.b runs hpcdist.a).
    edges: dict[str, set[str]] = {}
    for module, (top, _) in GRAPH.items():
        targets = set()
        for target in top:
            if target not in MODULES or target == module:
                continue
            targets.add(target)
            parts = target.split(".")
            for i in range(2, len(parts)):
                parent = ".".join(parts[:i])
                if parent != module and not module.startswith(parent + "."):
                    targets.add(parent)
        edges[module] = targets
    # the root package is lazy (PEP 562): it imports only _version at run time
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                dfs(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            dfs(node)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_import_inside_functions():
    bad = []
    for module, (_, inner) in GRAPH.items():
        for line, target in inner:
            if target.split(".")[0] in OPTIONAL_ANYWHERE:
                continue
            if any(module == m and target.startswith(t) for m, t in LAZY_ALLOWED):
                continue
            bad.append(f"{module}:{line} imports {target} inside a function")
    assert not bad, "\n".join(sorted(bad))


def test_no_module_over_500_lines():
    long = [
        f"{p.relative_to(ROOT.parent)}: {n} lines"
        for p in FILES
        if (n := len(p.read_text().splitlines())) > 500
    ]
    assert not long, "\n".join(long)


@pytest.mark.parametrize(
    ("statement", "absent"),
    [
        ("import hpcdist", ["mpi4py", "numpy", "h5py", "hpcdist.comm", "hpcdist.nn"]),
        ("import hpcdist.comm", ["h5py", "hpcdist.nn", "hpcdist.strategies", "hpcdist.core"]),
        ("import hpcdist.core", ["mpi4py", "h5py", "hpcdist.comm", "hpcdist.strategies"]),
        ("import hpcdist.strategies", ["h5py", "hpcdist.nn", "hpcdist.checkpoint"]),
        ("import hpcdist.checkpoint", ["hpcdist.nn"]),
    ],
)
def test_importing_a_layer_loads_nothing_above_it(statement, absent):
    code = f"{statement}; import sys; print(' '.join(sorted(sys.modules)))"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_"))}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    loaded = set(out.stdout.split())
    assert not loaded & set(absent), f"{statement} loaded {sorted(loaded & set(absent))}"


ARCHITECTURE = ROOT.parent / "docs" / "architecture.md"


def documented_layers() -> dict[str, int]:
    """{package or module: layer} as the layer table of docs/architecture.md states it."""
    out: dict[str, int] = {}
    rows = [line for line in ARCHITECTURE.read_text().splitlines() if line.startswith("| ")]
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        if not cells[0][:1].isdigit():
            continue  # the header row
        layer = int(cells[0].split()[0])
        for name in re.findall(r"`([^`]+)`", cells[1]):
            module = "hpcdist" if name == "hpcdist" else f"hpcdist.{name}"
            assert module not in out or out[module] == layer, f"{module} in two layers"
            out[module] = layer
    assert out, f"no layer table found in {ARCHITECTURE}"
    return out


def test_architecture_table_matches_layers():
    documented = documented_layers()
    bad = [f"{m}: not a module of hpcdist" for m in documented if m not in MODULES]
    bad += [
        f"{m}: layer {layer} in the doc, {layer_of(m)[1]} in LAYERS"
        for m, layer in documented.items()
        if m in MODULES and layer_of(m)[1] != layer
    ]
    bad += [
        f"{m} (layer {layer}) is missing from the doc's table"
        for m, layer in LAYERS.items()
        if documented.get(m) != layer
    ]
    assert not bad, "\n".join(bad)


def test_architecture_doc_names_existing_modules():
    text = ARCHITECTURE.read_text()
    for topic in ("timeline", "restarts", "exit_codes", "seeds", "cli", "tf_toplevel"):
        assert f"`{topic}`" in text or f".{topic}`" in text, f"the doc never names {topic}"
    assert "## Raw MPI traffic and waiting" in text
    bad = []
    for path in set(re.findall(r"`(hpcdist(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`", text)):
        parts = path.split(".")
        known = max(i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in MODULES)
        if len(parts) - known > 1:  # a module, or one of its attributes
            bad.append(path)
    assert not bad, f"docs/architecture.md names modules that do not exist: {sorted(bad)}"
