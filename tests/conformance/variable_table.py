"""The variable table's cases, free of TensorFlow: importable by the multi-worker case script.

Each case creates a variable (initial value 1.0) under a strategy, does one thing to it in
replica or cross-replica context, and records what that returned or raised, the value read in
cross-replica context afterwards, and each local replica copy's value. ``lib`` is a side of the
comparison: its ``tf`` and ``distribute`` namespaces, and ``strategy()`` (the strategy to use).
``attempt`` and ``plain`` (tests/conformance/helpers.py) turn each step into plain data, or into
an instance of ``raised`` for a step that raised.
"""

import numpy as np

SYNCS = ["ON_WRITE", "ON_READ"]
AGGS = ["NONE", "SUM", "MEAN", "ONLY_FIRST_REPLICA"]


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


def table_case(lib, strategy, sync, agg, action, attempt, plain, raised):
    s = strategy
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
        if per_replica and not isinstance(result, raised):
            result = attempt(lambda: plain(list(s.experimental_local_results(result))))
        out["action"] = attempt(lambda: plain(result))
    out["read"] = attempt(lambda: v.read_value())
    out["copies"] = attempt(lambda: plain(list(s.experimental_local_results(v))))
    return out
