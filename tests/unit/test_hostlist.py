import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcdist.cluster import compress_hostlist, expand_hostlist, expand_tasks_per_node
from hpcdist.errors import ClusterConfigError


def test_tf_examples():
    # Ported from TF's slurm_cluster_resolver_test.
    assert expand_hostlist("n1") == ["n1"]
    assert expand_hostlist("n[1,3]") == ["n1", "n3"]
    assert expand_hostlist("n[1-3]") == ["n1", "n2", "n3"]
    assert expand_hostlist("n[1-2],m5,o[3-4,6,7-9]") == [
        "n1",
        "n2",
        "m5",
        "o3",
        "o4",
        "o6",
        "o7",
        "o8",
        "o9",
    ]


def test_zero_padding_and_order_kept():
    assert expand_hostlist("nid[008-011]") == ["nid008", "nid009", "nid010", "nid011"]
    # Slurm's order, never sorted.
    assert expand_hostlist("z9,a1,m[3,1]") == ["z9", "a1", "m3", "m1"]


def test_several_bracket_groups_expand_as_product():
    assert expand_hostlist("r[1-2]-n[01-02]") == ["r1-n01", "r1-n02", "r2-n01", "r2-n02"]
    assert expand_hostlist("a[1-2]b[3,5]c") == ["a1b3c", "a1b5c", "a2b3c", "a2b5c"]


def test_tasks_per_node():
    assert expand_tasks_per_node("2") == [2]
    assert expand_tasks_per_node("2,1,3") == [2, 1, 3]
    assert expand_tasks_per_node("3(x2),2,1") == [3, 3, 2, 1]
    assert expand_tasks_per_node("3(x2),2,11(x4)") == [3, 3, 2, 11, 11, 11, 11]
    assert expand_tasks_per_node("13(x10)") == [13] * 10


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("n[1-", "unclosed"),
        ("n1]", "unmatched"),
        ("n[3-1]", "backwards"),
        ("n[a-b]", "digits"),
        ("n[1,,2]", "empty range"),
        ("n1,,n2", "empty host"),
        ("n[[1]]", "nested"),
        ("bad host", "characters"),
        ("n[0-99999999]", "more than"),
    ],
)
def test_bad_hostlists_are_quoted(text, why):
    with pytest.raises(ClusterConfigError) as info:
        expand_hostlist(text)
    assert repr(text) in str(info.value)
    assert why in str(info.value)


@pytest.mark.parametrize("text", ["", "x", "2(x)", "2(x0)", "-1", "2,,3", "3(y2)"])
def test_bad_tasks_per_node(text):
    with pytest.raises(ClusterConfigError, match="tasks-per-node"):
        expand_tasks_per_node(text)


host = st.builds(
    lambda p, n, w: f"{p}{str(n).zfill(w)}" if n is not None else p,
    st.from_regex(r"[a-z][a-z\-]{0,4}[a-z]", fullmatch=True),
    st.one_of(st.none(), st.integers(0, 2000)),
    st.integers(1, 4),
)


@given(st.lists(host, min_size=1, max_size=40))
def test_compress_then_expand_round_trips(hosts):
    assert expand_hostlist(compress_hostlist(hosts)) == hosts


@given(st.text(alphabet="ab01-9[],x() ", max_size=30))
def test_junk_never_crashes_with_anything_but_a_clear_error(text):
    try:
        hosts = expand_hostlist(text)
    except ClusterConfigError as exc:
        assert "hostlist" in str(exc)
    else:
        assert hosts and all(hosts)
    try:
        counts = expand_tasks_per_node(text)
    except ClusterConfigError as exc:
        assert "tasks-per-node" in str(exc)
    else:
        assert all(c >= 0 for c in counts)
