"""Slurm's compressed host lists and task counts.

Slurm writes node lists such as ``n[01-03,7],gpu[1-2]-ib[0-1]`` and task counts such as
``3(x2),1``. These functions expand them exactly as ``scontrol show hostnames`` does: the order
is Slurm's (never sorted), several bracket groups in one name expand as a product with the left
group outermost, and zero padding follows the width of the range's first bound.
"""

from __future__ import annotations

import re

from hpcdist.errors import ClusterConfigError

__all__ = ["compress_hostlist", "expand_hostlist", "expand_tasks_per_node"]

_MAX_HOSTS = 1 << 20
_HOST_CHARS = re.compile(r"^[A-Za-z0-9._\-]*$")
_TASKS_ITEM = re.compile(r"^\s*(\d+)\s*(?:\(\s*x\s*(\d+)\s*\))?\s*$")


def _bad(text: str, why: str) -> ClusterConfigError:
    return ClusterConfigError(f"invalid Slurm hostlist {text!r}: {why}")


def _split_top_level(text: str) -> list[str]:
    """Split at commas that are not inside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            if depth:
                raise _bad(text, f"nested '[' at position {i}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise _bad(text, f"unmatched ']' at position {i}")
            depth = 0
        elif ch == "," and not depth:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise _bad(text, "unclosed '['")
    items.append(text[start:])
    return items


def _expand_range(spec: str, text: str) -> list[str]:
    """Expand the inside of one bracket group: ``01-03,7``."""
    out: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            raise _bad(text, f"empty range in '[{spec}]'")
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise _bad(text, f"range {part!r} in '[{spec}]' is not N or N-M with digits")
        if not sep:
            out.append(lo)
            continue
        first, last = int(lo), int(hi)
        if last < first:
            raise _bad(text, f"range {part!r} runs backwards")
        if last - first >= _MAX_HOSTS:
            raise _bad(text, f"range {part!r} has more than {_MAX_HOSTS} hosts")
        width = len(lo)
        out.extend(str(n).zfill(width) for n in range(first, last + 1))
    return out


def _expand_item(item: str, text: str) -> list[str]:
    names = [""]
    pos = 0
    for match in re.finditer(r"\[([^\]]*)\]", item):
        prefix = item[pos : match.start()]
        if not _HOST_CHARS.match(prefix):
            raise _bad(text, f"host name part {prefix!r} has characters outside [A-Za-z0-9._-]")
        values = _expand_range(match.group(1), text)
        if len(names) * len(values) > _MAX_HOSTS:
            raise _bad(text, f"expands to more than {_MAX_HOSTS} hosts")
        names = [n + prefix + v for n in names for v in values]
        pos = match.end()
    suffix = item[pos:]
    if not _HOST_CHARS.match(suffix):
        raise _bad(text, f"host name part {suffix!r} has characters outside [A-Za-z0-9._-]")
    return [n + suffix for n in names]


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a Slurm host list into host names, in Slurm's order.

    Args:
        hostlist: For example ``"n[1-2],m5,o[3-4,6]"`` or ``"rack[1-2]-n[01-02]"``.

    Returns:
        The host names, e.g. ``["n1", "n2", "m5", "o3", "o4", "o6"]``.

    Raises:
        ClusterConfigError: The list is malformed; the message quotes it and says why.
    """
    if not isinstance(hostlist, str):
        raise ClusterConfigError(f"Slurm hostlist must be a string, got {type(hostlist).__name__}")
    text = hostlist.strip()
    if not text:
        raise _bad(hostlist, "it is empty")
    hosts: list[str] = []
    for item in _split_top_level(text):
        item = item.strip()
        if not item:
            raise _bad(hostlist, "empty host name between commas")
        expanded = _expand_item(item, hostlist)
        if any(not h for h in expanded):
            raise _bad(hostlist, f"item {item!r} gives an empty host name")
        hosts.extend(expanded)
        if len(hosts) > _MAX_HOSTS:
            raise _bad(hostlist, f"expands to more than {_MAX_HOSTS} hosts")
    return hosts


def expand_tasks_per_node(tasks_per_node: str) -> list[int]:
    """Expand Slurm's task counts per node.

    Args:
        tasks_per_node: For example ``"3(x2),2,1"`` (``SLURM_STEP_TASKS_PER_NODE``).

    Returns:
        One count per node, e.g. ``[3, 3, 2, 1]``.

    Raises:
        ClusterConfigError: The text is malformed; the message quotes it and says why.
    """
    if not isinstance(tasks_per_node, str) or not tasks_per_node.strip():
        raise ClusterConfigError(f"invalid Slurm tasks-per-node {tasks_per_node!r}: it is empty")
    counts: list[int] = []
    for item in tasks_per_node.split(","):
        match = _TASKS_ITEM.match(item)
        if match is None:
            raise ClusterConfigError(
                f"invalid Slurm tasks-per-node {tasks_per_node!r}: item {item!r} is not N or N(xM)"
            )
        count, repeat = int(match.group(1)), int(match.group(2) or 1)
        if repeat == 0 or repeat > _MAX_HOSTS or len(counts) + repeat > _MAX_HOSTS:
            raise ClusterConfigError(
                f"invalid Slurm tasks-per-node {tasks_per_node!r}: repeat count in {item!r} "
                f"must be between 1 and {_MAX_HOSTS}"
            )
        counts.extend([count] * repeat)
    return counts


def _split_number(host: str) -> tuple[str, str]:
    match = re.match(r"^(.*?)(\d*)$", host)
    assert match is not None
    return match.group(1), match.group(2)


def compress_hostlist(hosts: list[str]) -> str:
    """Compress host names into Slurm's bracket syntax, keeping their order.

    Consecutive hosts that share a prefix and whose trailing numbers have the same width are
    merged into one bracket group. ``expand_hostlist(compress_hostlist(h)) == h`` for any
    list of valid host names.

    Args:
        hosts: Host names.

    Returns:
        The compressed list, e.g. ``"n[01-03],m5"``.
    """
    groups: list[tuple[str, list[str]]] = []
    for host in hosts:
        if not host or not _HOST_CHARS.match(host):
            raise ClusterConfigError(f"cannot compress host name {host!r}")
        prefix, number = _split_number(host)
        if groups and number and groups[-1][0] == prefix and groups[-1][1]:
            last = groups[-1][1][-1]
            if len(last) == len(number):
                groups[-1][1].append(number)
                continue
        groups.append((prefix, [number] if number else []))
    parts = []
    for prefix, numbers in groups:
        if not numbers:
            parts.append(prefix)
            continue
        if len(numbers) == 1:
            parts.append(prefix + numbers[0])
            continue
        ranges, start, prev = [], numbers[0], numbers[0]
        for number in [*numbers[1:], None]:
            if number is not None and int(number) == int(prev) + 1 and len(number) == len(prev):
                prev = number
                continue
            ranges.append(start if start == prev else f"{start}-{prev}")
            if number is not None:
                start = prev = number
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)
