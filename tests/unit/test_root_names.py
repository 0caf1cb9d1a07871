"""The root package's public names: one list, and every name is what its module defines.

`hpcdist/__init__.py` lists its names once (`_SUBPACKAGES`, `_MODULES`, `_NAMES`) and derives
``__all__``, the lazy lookup and ``dir()`` from them; its ``TYPE_CHECKING`` imports repeat them
for static type checkers. These tests check that the two agree, that ``__all__`` is exactly the
tables, and that each name, loaded lazily, is the object its module defines.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import hpcdist

INIT = Path(hpcdist.__file__)


def root_table(name: str) -> object:
    """A literal table of hpcdist/__init__.py (read from the source, as the module states it)."""
    for node in ast.parse(INIT.read_text()).body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [name]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"hpcdist/__init__.py has no literal {name}")


SUBPACKAGES: tuple[str, ...] = root_table("_SUBPACKAGES")
MODULES: dict[str, str] = root_table("_MODULES")
NAMES: dict[str, tuple[str, ...]] = root_table("_NAMES")
DEFINED_IN = {name: module for module, names in NAMES.items() for name in names}

# Root modules whose name is also a public name of the root: importing such a module would
# replace the name (Python sets the package attribute to the submodule). None may exist; the
# logging module is ``hpcdist.logger`` so that ``hd.log`` stays ``tf.math.log``.
SHADOWED_BY_A_MODULE: set[str] = set()


def type_checking_imports() -> dict[str, str]:
    """{name bound in the root's TYPE_CHECKING block: the module it is imported from}."""
    tree = ast.parse(INIT.read_text())
    blocks = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1, "expected one `if TYPE_CHECKING:` block in hpcdist/__init__.py"
    out: dict[str, str] = {}
    for node in blocks[0].body:
        assert isinstance(node, ast.ImportFrom), ast.unparse(node)
        for alias in node.names:
            bound = alias.asname or alias.name
            assert bound not in out, f"{bound} imported twice under TYPE_CHECKING"
            out[bound] = f"{node.module}.{alias.name}" if node.module == "hpcdist" else node.module
            if f"{node.module}.{alias.name}" in MODULES.values():
                out[bound] = f"{node.module}.{alias.name}"
    return out


def expected_sources() -> dict[str, str]:
    """{public name: the module it is, or the module that defines it}, from the tables."""
    tables = [
        {name: f"hpcdist.{name}" for name in SUBPACKAGES},
        dict(MODULES),
        dict(DEFINED_IN),
    ]
    out: dict[str, str] = {}
    for table in tables:
        overlap = out.keys() & table.keys()
        assert not overlap, f"names in two tables of hpcdist/__init__.py: {sorted(overlap)}"
        out.update(table)
    return out


def test_all_is_exactly_the_tables():
    assert len(hpcdist.__all__) == len(set(hpcdist.__all__))
    assert set(hpcdist.__all__) == {"__version__", *expected_sources()}
    defined = [name for names in NAMES.values() for name in names]
    assert len(defined) == len(set(defined)), "a name listed under two modules"
    assert set(dir(hpcdist)) >= set(hpcdist.__all__)


def test_type_checking_imports_agree_with_the_tables():
    imported = type_checking_imports()
    expected = expected_sources()
    missing = sorted(set(expected) - set(imported))
    extra = sorted(set(imported) - set(expected))
    assert not missing, f"names missing from the TYPE_CHECKING block: {missing}"
    assert not extra, f"TYPE_CHECKING imports names the tables do not list: {extra}"
    differ = {n: (imported[n], expected[n]) for n in expected if imported[n] != expected[n]}
    assert not differ, f"TYPE_CHECKING imports from another module than the tables: {differ}"


RESOLVE_ALL = """
import importlib, json, sys
import hpcdist as hd
subpackages, modules, defined_in = json.loads(sys.argv[1])
loaded_by_import = sorted(m for m in sys.modules if m.startswith(("hpcdist", "mpi4py", "numpy")))
values = {name: getattr(hd, name) for name in hd.__all__}
values["compat.v1"] = hd.compat.v1
wrong = []
for name, value in values.items():
    if name == "compat.v1":
        want = importlib.import_module("hpcdist.compat.v1")
    elif name == "__version__":
        want = importlib.import_module("hpcdist._version").__version__
    elif name in subpackages:
        want = importlib.import_module("hpcdist." + name)
    elif name in modules:
        want = importlib.import_module(modules[name])
    else:
        want = getattr(importlib.import_module(defined_in[name]), name)
    if value is not want or getattr(hd, name.split(".")[0]) is not values[name.split(".")[0]]:
        wrong.append(name)
print(json.dumps({"loaded_by_import": loaded_by_import, "wrong": sorted(wrong)}))
"""


def test_every_public_name_resolves_lazily_to_its_definition():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_"))}
    tables = json.dumps([SUBPACKAGES, MODULES, DEFINED_IN])
    out = subprocess.run(
        [sys.executable, "-c", RESOLVE_ALL, tables],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["loaded_by_import"] == ["hpcdist", "hpcdist._version"]
    assert set(result["wrong"]) == SHADOWED_BY_A_MODULE, (
        f"names that are not what their module defines: {result['wrong']}"
    )


def test_compat_v1_is_reachable_from_the_root():
    code = "import hpcdist as hd; print(hd.compat.v1.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["hpcdist.compat.v1"]
