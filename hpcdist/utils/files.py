"""Small private files that launchers and ranks hand each other (addresses, pids, notes)."""

from __future__ import annotations

import os


def write_private_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` readable by this user only (0600), atomically.

    The text goes to a temporary file next to ``path`` that is renamed over it, so a reader
    sees the whole text or no file, even when this process is killed while writing.
    """
    path = os.fspath(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)
