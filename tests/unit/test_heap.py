"""Freed arrays' memory is kept for reuse (`hpcdist.utils.heap`), measured in page faults.

Each case runs a fresh interpreter (glibc's thresholds are per process and set once): it imports
`hpcdist.core`, then makes and drops 8 MiB of temporaries 20 times, as a training step does, and
counts the minor page faults of those 20 rounds after a first one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROGRAM = """
import json, resource
import numpy as np
import hpcdist.core
from hpcdist.utils import heap

def step():
    a = np.ones(1 << 20)  # 8 MiB
    b = a * 2.0
    return float(b[-1])

step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"faults": faults, "status": heap.status()}))
"""


def run(**env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    environ.pop("GLIBC_TUNABLES", None)
    environ.pop("HPCDIST_KEEP_FREED_MEMORY", None)
    environ.update(env)
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=environ, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def glibc() -> bool:
    return sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION") is not None


@pytest.mark.skipif(not glibc(), reason="the thresholds are glibc's")
def test_a_steps_temporaries_are_not_faulted_in_again():
    kept = run()
    off = run(HPCDIST_KEEP_FREED_MEMORY="0")
    assert kept["status"].startswith("kept (glibc"), kept
    assert off["status"] == "left to glibc (HPCDIST_KEEP_FREED_MEMORY=0)", off
    # 20 rounds of two 8 MiB arrays: 81,920 pages of 4 KiB if every array is faulted in anew
    # (fewer where the kernel backs them with huge pages), none once the memory is kept
    assert off["faults"] > 1000, f"glibc kept the memory by itself here: {off}"
    assert kept["faults"] < off["faults"] / 50, (kept, off)


@pytest.mark.skipif(not glibc(), reason="the thresholds are glibc's")
@pytest.mark.parametrize("variable", ["MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"])
def test_glibcs_own_variables_win(variable):
    value = "131072" if variable.startswith("MALLOC") else "glibc.malloc.mmap_threshold=131072"
    result = run(**{variable: value})
    assert result["status"] == f"left to glibc ({variable} set)", result
    assert result["faults"] > 1000, result  # 128 KiB threshold: every 8 MiB array is mmap'd


def test_a_bad_value_names_the_variable():
    environ = dict(os.environ, HPCDIST_KEEP_FREED_MEMORY="maybe")
    result = subprocess.run(
        [sys.executable, "-c", "import hpcdist.core"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "HPCDIST_KEEP_FREED_MEMORY='maybe'" in result.stderr
