"""The variable tables: ON_WRITE / ON_READ x NONE / SUM / MEAN / ONLY_FIRST_REPLICA, 2 replicas.

Each case creates a variable (initial value 1.0) under the session's MirroredStrategy, does one
thing to it in replica or cross-replica context, and records what that returned or raised, the
value read in cross-replica context afterwards, and each replica copy's value.
"""

import numpy as np
import pytest

from tests.conformance import variable_table
from tests.conformance.helpers import (
    TF,
    Raised,
    assert_documented,
    assert_same,
    attempt,
    both,
    plain,
)
from tests.conformance.variable_table import ACTIONS, AGGS, SYNCS

NONE_IN_REPLICA_CONTEXT = (
    "docs/differences-from-tensorflow.md: An ON_WRITE variable with aggregation NONE, assigned "
    "in replica context with more than one replica in sync, raises `ValueError`."
)


def table_case(lib, sync, agg, action):
    """One case of the table under the session's two-replica MirroredStrategy."""
    return variable_table.table_case(lib, lib.mirrored(), sync, agg, action, attempt, plain, Raised)


@pytest.mark.parametrize("action", list(ACTIONS))
@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("sync", SYNCS)
def test_variable_table(sync, agg, action):
    expected, got = both(table_case, sync, agg, action)
    if (
        sync == "ON_WRITE"
        and agg == "NONE"
        and action
        in (
            "replica_assign",
            "replica_assign_add",
            "replica_assign_add_constant",
            "replica_assign_constant",
        )
    ):
        assert_documented(NONE_IN_REPLICA_CONTEXT)
        assert isinstance(got["action"], Raised) and got["action"].family == "ValueError"
        assert got["copies"] == [1.0, 1.0] or np.allclose(got["copies"], 1.0)  # nothing changed
        assert not isinstance(expected["action"], Raised)  # TF: each replica keeps its write
        return
    assert_same(expected, got)


def test_the_brief_cases_with_tf_values():
    """The cases named in the issue, with TF 2.21's own results."""
    # MirroredVariable SUM: a plain value added in cross-replica context is applied once.
    assert table_case(TF, "ON_WRITE", "SUM", "cross_assign_add")["copies"] == [2.0, 2.0]
    # ... while the same Python constant added by every replica raises ValueError
    assert table_case(TF, "ON_WRITE", "SUM", "replica_assign_add_constant")["action"].family == (
        "ValueError"
    )
    # SyncOnRead SUM: assign_add in cross-replica context raises ValueError
    assert table_case(TF, "ON_READ", "SUM", "cross_assign_add")["action"].family == "ValueError"
    # SyncOnRead SUM: cross-replica assign stores value / replicas in each copy
    assert table_case(TF, "ON_READ", "SUM", "cross_assign")["copies"] == [3.0, 3.0]
