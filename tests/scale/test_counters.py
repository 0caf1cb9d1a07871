"""`hpcdist.comm.counters` in one process: what is recorded, and the switch's setting."""

from __future__ import annotations

import pytest

from hpcdist.comm import counters
from hpcdist.settings import Settings


def test_counts_accumulate_and_differences_leave_out_untouched_kinds():
    before = counters.snapshot()
    counters.add("test.kind", 16)
    counters.add("test.kind", 4, calls=3)
    counters.add_pickled("test.pickled", None)  # pickle of None: 4 bytes at protocol 5
    spent = counters.total(before, counters.snapshot())
    assert spent == {"test.kind": (4, 20), "test.pickled": (1, 4)}
    assert counters.total(counters.snapshot(), counters.snapshot()) == {}


def test_counting_is_off_unless_the_setting_says_so():
    assert Settings().count_messages is False
    assert Settings.from_env({"HPCDIST_COUNT_MESSAGES": "1"}).count_messages is True
    with pytest.raises(ValueError, match="HPCDIST_COUNT_MESSAGES"):
        Settings.from_env({"HPCDIST_COUNT_MESSAGES": "sometimes"})
