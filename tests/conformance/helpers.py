"""Run one case under TensorFlow and under hpcdist, and compare what came out.

A case is a function of a `Side`: the namespaces a ported program binds (``tf``, ``distribute``,
``keras``, ``data``, ``train``, ``resolvers``, ``partitioners``, ``errors``) to TensorFlow's or
to hpcdist's, and the session's two-replica ``MirroredStrategy`` (`Side.mirrored`).
`both(case)` runs it on each side and returns the two outcomes as plain Python/numpy data, or
`Raised` when it raised. `assert_same` compares them: floats at float32 tolerance, shapes,
kinds (float, integer, bool) and everything else exactly, and exceptions by type family (both
must raise).

A deliberate difference is asserted as such: the test names the bold sentence of
docs/differences-from-tensorflow.md it relies on (`assert_documented`) and asserts each side's
own result.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip(
    "tensorflow",
    reason="tests/conformance needs TensorFlow 2.21 (tensorflow-cpu), which hpcdist does not "
    "depend on: run `make conformance` (it builds .venv-conformance with TensorFlow)",
)
import keras  # noqa: E402 - after TensorFlow, which the skip above needs first

import hpcdist as hd  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DIFFERENCES = ROOT / "docs" / "differences-from-tensorflow.md"
# float32 tolerance: relative 1e-5, absolute 5e-6 for the round-off of a few float32 operations
# on values near 1 (an optimizer step of 0.1 that cancels to ~1e-6 keeps that absolute error)
RTOL, ATOL = 1e-5, 5e-6

# Exception families, most specific first: TF's error classes by name (hpcdist's errors carry
# the same names), then Python's built-in families.
_NAMED = [n for n in dir(tf.errors) if n.endswith("Error") and n != "OpError"]
_BUILTIN = [
    KeyError,
    IndexError,
    StopIteration,
    NotImplementedError,
    ZeroDivisionError,
    TypeError,
    ValueError,
    AttributeError,
    FileNotFoundError,
    OSError,
    RuntimeError,
    AssertionError,
]


def family(error: BaseException) -> str:
    """The type family of an exception: TF's error name, or the built-in class it derives from."""
    return family_of([c.__name__ for c in type(error).__mro__])


def families(error: BaseException) -> frozenset[str]:
    """Every family ``error`` belongs to: what a ported ``except`` clause would catch it as."""
    return families_of([c.__name__ for c in type(error).__mro__])


def family_of(names: list[str]) -> str:
    """`family` of an exception known by the names of its class and bases (most derived first).

    For an exception recorded in another process (the multi-worker cases).
    """
    for name in _NAMED:
        if name in names:
            return name
    for base in _BUILTIN:
        if base.__name__ in names:
            return base.__name__
    return names[0]


def families_of(names: list[str]) -> frozenset[str]:
    """`families` of an exception known by the names of its class and bases."""
    return frozenset(n for n in (*_NAMED, *(b.__name__ for b in _BUILTIN)) if n in names)


@dataclass(frozen=True)
class Raised:
    """A case that raised: its family is compared, the message only shown.

    hpcdist's error matches TF's when TF's family is among ``catches`` (so the ``except`` of a
    ported program catches both).
    """

    family: str
    message: str = field(compare=False)
    catches: frozenset[str] = field(default=frozenset(), compare=False)

    def __repr__(self) -> str:
        return f"Raised({self.family}: {self.message[:200]})"


@dataclass
class Side:
    """One library's namespaces, as a ported program binds them."""

    name: str
    tf: Any
    distribute: Any
    keras: Any
    data: Any
    train: Any
    resolvers: Any
    partitioners: Any
    errors: Any
    devices: tuple[str, str]
    extra: dict[str, Any] = field(default_factory=dict)

    def mirrored(self) -> Any:
        """The session's MirroredStrategy over two local CPU replicas.

        One per side for the whole run: TF keys its collectives by a process-wide counter that
        restarts with each strategy, and a second strategy's all-gather of another shape then
        meets the first one's cached instance ("Shape mismatch in the collective").
        """
        if "mirrored" not in self.extra:
            self.extra["mirrored"] = self.distribute.MirroredStrategy(list(self.devices))
        return self.extra["mirrored"]

    def __repr__(self) -> str:
        return self.name


TF = Side(
    name="tf",
    tf=tf,
    distribute=tf.distribute,
    keras=keras,
    data=tf.data,
    train=tf.train,
    resolvers=tf.distribute.cluster_resolver,
    partitioners=tf.distribute.experimental.partitioners,
    errors=tf.errors,
    devices=("/cpu:0", "/cpu:1"),
)
HD = Side(
    name="hpcdist",
    tf=hd,
    distribute=hd,
    keras=hd.nn,
    data=hd.data,
    train=hd,
    resolvers=hd.cluster,
    partitioners=hd.partitioners,
    errors=hd.errors,
    devices=("cpu:0", "cpu:1"),
)
SIDES = (TF, HD)


def plain(x: Any) -> Any:
    """Tensors, variables and arrays as numpy; containers recursively; other values as they are."""
    if isinstance(x, Raised | str | bytes | type(None) | bool):
        return x
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return type(x)(plain(v) for v in x) if type(x) in (list, tuple) else [plain(v) for v in x]
    if isinstance(x, int | float | np.generic | np.ndarray):
        return np.asarray(x)
    if callable(getattr(x, "numpy", None)):
        return np.asarray(x.numpy())
    if hasattr(x, "__array__"):
        return np.asarray(x)
    return x


def attempt(fn: Callable[[], Any]) -> Any:
    """``fn()`` as plain data, or `Raised`: one step of a case that goes on after a failure."""
    try:
        return plain(fn())
    except Exception as error:  # recorded, compared by family
        return Raised(family(error), f"{type(error).__name__}: {error}", families(error))


def outcome(case: Callable[..., Any], side: Side, *args: Any) -> Any:
    """``case(side, *args)`` as plain data, or `Raised` with the exception's family."""
    try:
        return plain(case(side, *args))
    except Exception as error:  # every failure is an outcome to compare
        return Raised(family(error), f"{type(error).__name__}: {error}", families(error))


def both(case: Callable[..., Any], *args: Any) -> tuple[Any, Any]:
    """The outcomes of ``case`` under TensorFlow and under hpcdist."""
    return outcome(case, TF, *args), outcome(case, HD, *args)


def _kind(a: np.ndarray) -> str:
    return {"f": "float", "i": "int", "u": "int", "b": "bool", "c": "complex"}.get(a.dtype.kind, "")


def assert_same(expected: Any, got: Any, where: str = "result") -> None:
    """Assert hpcdist's outcome ``got`` matches TensorFlow's ``expected`` (see the module doc)."""
    if isinstance(expected, Raised) or isinstance(got, Raised):
        assert isinstance(expected, Raised) and isinstance(got, Raised), (
            f"{where}: TensorFlow gave {expected!r}, hpcdist gave {got!r}"
        )
        assert expected.family == got.family or expected.family in got.catches, (
            f"{where}: TensorFlow raised {expected!r}, hpcdist raised {got!r}"
        )
        return
    if isinstance(expected, dict):
        assert isinstance(got, dict) and sorted(map(str, expected)) == sorted(map(str, got)), (
            f"{where}: TensorFlow gave {expected!r}, hpcdist gave {got!r}"
        )
        for key in expected:
            assert_same(expected[key], got[key], f"{where}[{key!r}]")
        return
    if isinstance(expected, list | tuple):
        assert isinstance(got, list | tuple) and len(expected) == len(got), (
            f"{where}: TensorFlow gave {expected!r}, hpcdist gave {got!r}"
        )
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            assert_same(e, g, f"{where}[{i}]")
        return
    if isinstance(expected, np.ndarray) and expected.dtype.kind in "fiub":
        g = np.asarray(got)
        message = f"{where}: TensorFlow gave {expected!r}, hpcdist gave {g!r}"
        assert g.shape == expected.shape, message
        assert _kind(g) == _kind(expected), message
        if expected.dtype.kind == "f":
            np.testing.assert_allclose(g, expected, rtol=RTOL, atol=ATOL, err_msg=message)
        else:
            assert np.array_equal(g, expected), message
        return
    if isinstance(expected, np.ndarray):  # strings, bytes, objects
        assert np.asarray(got).tolist() == expected.tolist(), (
            f"{where}: TensorFlow gave {expected!r}, hpcdist gave {got!r}"
        )
        return
    assert expected == got, f"{where}: TensorFlow gave {expected!r}, hpcdist gave {got!r}"


def conform(case: Callable[..., Any], *args: Any) -> Any:
    """Run ``case`` on both sides, assert the outcomes match, and return TensorFlow's."""
    expected, got = both(case, *args)
    assert_same(expected, got)
    return expected


def _normalized(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def assert_documented(difference: str) -> None:
    """Assert ``difference`` ("docs/differences-from-tensorflow.md: <bold sentence>") is listed.

    The sentence must open a bold passage of that file (``**<sentence>``).
    """
    path, _, sentence = difference.partition(": ")
    assert (ROOT / path) == DIFFERENCES, f"expected a pointer into {DIFFERENCES}, got {path!r}"
    text = _normalized(DIFFERENCES.read_text())
    assert "**" + _normalized(sentence) in text, (
        f"{DIFFERENCES.name} does not list {sentence!r} (as a bold sentence)"
    )
