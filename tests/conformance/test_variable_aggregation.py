"""The variable tables: ON_WRITE / ON_READ x NONE / SUM / MEAN / ONLY_FIRST_REPLICA, 2 replicas.

Each case creates a variable (initial value 1.0) under the session's MirroredStrategy, does one
thing to it in replica or cross-replica context, and records what that returned or raised, the
value read in cross-replica context afterwards, and each replica copy's value.
"""

import numpy as np
import pytest

from tests.conformance.helpers import (
    TF,
    Raised,
    assert_documented,
    assert_same,
    attempt,
    both,
    plain,
)

SYNCS = ["ON_WRITE", "ON_READ"]
AGGS = ["NONE", "SUM", "MEAN", "ONLY_FIRST_REPLICA"]
NONE_IN_REPLICA_CONTEXT = (
    "docs/differences-from-tensorflow.md: An ON_WRITE variable with aggregation NONE, assigned "
    "in replica context with more than one replica in sync, raises `ValueError`."
)


def rid_plus(lib, offset):
    """This replica's id plus ``offset``, as a float32 tensor made in the replica."""
    rid = lib.distribute.get_replica_context().replica_id_in_sync_group
    return lib.tf.cast(rid, lib.tf.float32) + offset


def in_scope(fn):
    """Run ``fn(lib, s, v)`` in cross-replica context (inside the strategy's scope)."""

    def action(lib, s, v):
        with s.scope():
            return fn(lib, s, v)

    return action


def merged(fn):
    """Run ``fn(v)`` inside ``merge_call`` from each replica (cross-replica context again)."""

    def action(lib, s, v):
        return s.run(lambda: lib.distribute.get_replica_context().merge_call(lambda _: fn(v)))

    return action


# name -> (action, whether it runs in replica context: its result is per replica)
ACTIONS = {
    "read": (None, False),
    "replica_read": (lambda lib, s, v: s.run(lambda: v.read_value()), True),
    "replica_assign": (lambda lib, s, v: s.run(lambda: v.assign(rid_plus(lib, 10.0))), True),
    "replica_assign_add": (lambda lib, s, v: s.run(lambda: v.assign_add(rid_plus(lib, 1.0))), True),
    "replica_assign_add_constant": (lambda lib, s, v: s.run(lambda: v.assign_add(1.0)), True),
    "replica_assign_constant": (lambda lib, s, v: s.run(lambda: v.assign(4.0)), True),
    "cross_assign": (in_scope(lambda lib, s, v: v.assign(6.0)), False),
    "cross_assign_add": (in_scope(lambda lib, s, v: v.assign_add(1.0)), False),
    "cross_assign_add_array": (in_scope(lambda lib, s, v: v.assign_add(np.float32(1.0))), False),
    "cross_assign_sub": (in_scope(lambda lib, s, v: v.assign_sub(1.0)), False),
    "outside_assign_add": (lambda lib, s, v: v.assign_add(1.0), False),
    "merge_assign": (merged(lambda v: v.assign(6.0)), True),
    "merge_assign_add": (merged(lambda v: v.assign_add(1.0)), True),
}


def table_case(lib, sync, agg, action):
    s = lib.mirrored()
    with s.scope():
        v = lib.tf.Variable(
            1.0,
            synchronization=getattr(lib.tf.VariableSynchronization, sync),
            aggregation=getattr(lib.tf.VariableAggregation, agg),
        )
    out = {"trainable": v.trainable}
    fn, per_replica = ACTIONS[action]
    if fn is not None:
        result = attempt(lambda: fn(lib, s, v))
        if per_replica and not isinstance(result, Raised):
            result = attempt(lambda: plain(list(s.experimental_local_results(result))))
        out["action"] = attempt(lambda: plain(result))
    out["read"] = attempt(lambda: v.read_value())
    out["copies"] = attempt(lambda: plain(list(s.experimental_local_results(v))))
    return out


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
