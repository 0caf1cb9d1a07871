"""Sparse gradients without MPI: `IndexedSlices` and the dense fallback of `embedding_lookup`.

The sparse path (tables with ``sparse_read``) runs against real RMA windows in
tests/integration/scripts/ps_cases.py.
"""

import numpy as np

import hpcdist as hd


def test_indexed_slices_deduplicate_and_densify():
    rows = hd.nn.IndexedSlices(np.arange(8.0).reshape(4, 2), np.array([3, 0, 3, 1]), (5, 2))
    dense = np.zeros((5, 2))
    np.add.at(dense, [3, 0, 3, 1], np.arange(8.0).reshape(4, 2))
    assert np.array_equal(rows.numpy(), dense)
    unique = rows.deduplicate()
    assert unique.indices.tolist() == [0, 1, 3]
    assert np.array_equal(unique.numpy(), dense)


def test_embedding_lookup_dense_fallback_matches_gather():
    table = hd.strategies.Variable(np.arange(12.0).reshape(6, 2))
    with hd.nn.GradientTape() as tape:
        out = hd.nn.embedding_lookup(table, np.array([[5, 1], [1, 1]]))
        loss = hd.nn.ops.reduce_sum(out)
    assert np.array_equal(out.numpy(), np.arange(12.0).reshape(6, 2)[[[5, 1], [1, 1]]])
    grad = tape.gradient(loss, table)
    assert np.array_equal(grad[:, 0], [0, 3, 0, 0, 0, 1])
