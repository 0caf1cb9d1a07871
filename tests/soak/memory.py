"""Resident memory of this process, for the soak runs."""


def rss_mib() -> float:
    """Resident memory of this process in MiB (``VmRSS``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")
