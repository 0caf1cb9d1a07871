"""The MPI operations each rank starts, pinned at two sizes: an O(N) step added later fails.

`scripts/counts.py` and `scripts/ps.py` run with ``HPCDIST_COUNT_MESSAGES=1``
(`hpcdist.comm.counters`); every rank is a node of its own (``HPCDIST_RANKS_PER_NODE=1``),
so collectives take the across-nodes path. Each rank starts the same operations at 2 and at
4 ranks (the MPI library turns each collective into about log2 N messages, docs/scaling.md);
a loop over the other ranks would show here as counts that change with N.
"""

from __future__ import annotations

import pytest

from tests.scale.measure import ps_totals
from tests.scale.test_scale import launch, scale_line

HEADER = {"collective.header": [1, 16]}
#: Per case: what each rank starts, ``{kind: [calls, bytes]}``.
EXPECTED = {
    # the header check (one 16-byte all-reduce over every rank), then the node leaders' payload
    "allreduce_4KiB": {**HEADER, "collective.leader_allreduce": [1, 4096]},
    "allreduce_1MiB": {**HEADER, "collective.leader_allreduce": [1, 1 << 20]},
    "allreduce_4KiB_mpi_impl": {**HEADER, "collective.allreduce": [1, 4096]},
    # a mismatch and a poisoned header cost one more exchange: the full headers, for the message
    "mismatch": {**HEADER, "collective.header_table": [1, 96]},
    "poisoned": {**HEADER, "collective.header_table": [1, 96]},
    "barrier": HEADER,
}
#: A checkpoint save: the path broadcast (a checked object collective: a broadcast of sizes and
#: one of the pickle) and the outcome (a checked all-reduce of one flag; the outcomes themselves
#: are gathered only after a failure).
CHECKPOINT_CALLS = {"collective.bcast": 2, "collective.header": 2, "collective.leader_allreduce": 1}


@pytest.mark.parametrize("ranks", [2, 4])
def test_collectives_start_the_same_operations_at_every_size(ranks, tmp_path):
    job, _ = launch(
        ranks,
        ["tests/scale/scripts/counts.py", str(tmp_path)],
        HPCDIST_COUNT_MESSAGES="1",
        HPCDIST_RANKS_PER_NODE="1",
    )
    counts = scale_line(job.stdout)["counts"]
    for case, expected in EXPECTED.items():
        assert counts[case] == expected, (ranks, case, counts[case])
    save = counts["checkpoint_save"]
    assert {k: calls for k, (calls, _) in save.items()} == CHECKPOINT_CALLS, (ranks, save)


@pytest.mark.parametrize("ranks", [4, 6])
def test_parameter_server_function_costs_the_same_at_every_size(ranks):
    functions = 60
    coordinator, servers = ps_totals(ranks, functions)
    # one read and one update of each of the two variables per function (the warm one too)
    assert servers["rma.get"][0] == servers["rma.accumulate"][0] == 2 * (functions + 1), servers
    assert set(servers) == {"p2p.send", "rma.get", "rma.accumulate"}, servers
    # at most one command per function from the coordinator (batches send fewer), one result
    # message per command from the workers, and nothing else
    assert set(coordinator) == {"p2p.send"}, coordinator
    assert 1 <= coordinator["p2p.send"][0] <= functions, coordinator
    assert servers["p2p.send"][0] <= coordinator["p2p.send"][0] + 1, (coordinator, servers)
