"""Runs every ``case_*`` function of a coordinator script, printing ``CASE name PASS|FAIL``."""

import contextlib
import traceback


def run_cases(namespace, coordinator):
    """Call each ``case_*`` in ``namespace`` in name order; a failure is printed, then joined."""
    for name in sorted(n for n in namespace if n.startswith("case_")):
        try:
            namespace[name]()
            print(f"CASE {name[5:]} PASS", flush=True)
        except Exception:
            reason = traceback.format_exc().replace("\n", " | ")
            print(f"CASE {name[5:]} FAIL {reason}", flush=True)
            with contextlib.suppress(Exception):
                coordinator.join()
