"""The state file of a checkpoint directory (TF's ``checkpoint`` file) and `latest_checkpoint`.

``<directory>/checkpoint`` is JSON: ``latest`` (the newest checkpoint's file name),
``checkpoints`` (``[{"file", "time"}]``: the files a `CheckpointManager` manages, oldest first)
and ``last_preserved`` (the manager's ``keep_checkpoint_every_n_hours`` clock). The manager
writes it after each save; `Checkpoint.save` writes it too, naming its file as ``latest`` and
managing none (as TF's ``Checkpoint.save`` records its path without timestamps, so a manager
opened later keeps that file forever). It is replaced atomically, after the checkpoint is
complete, so it never names a file that is not there yet.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from typing import Any

from hpcdist.checkpoint.format import atomic_write_text

__all__ = ["STATE_FILE", "latest_checkpoint", "read_state", "write_state"]

STATE_FILE = "checkpoint"


class _DamagedState(ValueError):
    """The state file exists but does not parse."""


def read_state(directory: str, state_file: str = STATE_FILE) -> dict[str, Any] | None:
    """The state of ``directory``: None when there is no state file.

    Returns:
        ``{"latest": str | None, "checkpoints": [(path, time)], "last_preserved": float}``
        with the paths joined to ``directory``.

    Raises:
        ValueError: The file exists but is not a state file (the message names it).
    """
    path = os.path.join(directory, state_file)
    try:
        with open(path) as f:
            raw = json.load(f)
        entries = [
            (os.path.join(directory, e["file"]), float(e["time"]))
            for e in raw.get("checkpoints", [])
        ]
        latest = raw.get("latest")
        last_preserved = float(raw.get("last_preserved", time.time()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise _DamagedState(
            f"checkpoint state file {path!r} is unreadable ({type(exc).__name__}: {exc})"
        ) from exc
    return {
        "latest": None if latest is None else os.path.join(directory, str(latest)),
        "checkpoints": entries,
        "last_preserved": last_preserved,
    }


def write_state(
    directory: str,
    latest: str | None,
    entries: list[tuple[str, float]],
    last_preserved: float,
    state_file: str = STATE_FILE,
) -> None:
    """Replace the state file of ``directory`` (atomic).

    Args:
        directory: Where the checkpoints are.
        latest: Path of the newest checkpoint (None: none).
        entries: ``(path, time)`` of the managed checkpoints, oldest first.
        last_preserved: The manager's last preserved time.
        state_file: The state file's name.
    """
    state = {
        "latest": None if latest is None else os.path.basename(latest),
        "checkpoints": [{"file": os.path.basename(p), "time": t} for p, t in entries],
        "last_preserved": last_preserved,
    }
    atomic_write_text(os.path.join(directory, state_file), json.dumps(state, indent=1) + "\n")


def latest_checkpoint(checkpoint_dir: str, latest_filename: str | None = None) -> str | None:
    """The newest checkpoint of ``checkpoint_dir`` (``tf.train.latest_checkpoint``).

    Reads the state file that `Checkpoint.save` and `CheckpointManager.save` keep. Not
    collective: every rank may call it alone.

    Args:
        checkpoint_dir: The directory.
        latest_filename: The state file's name (default ``checkpoint``).

    Returns:
        The path of the newest checkpoint file (what `Checkpoint.restore` takes), or None when
        the directory has no state file, the state names no checkpoint, or its file is gone
        (as TF). A damaged state file gives None with a `RuntimeWarning` naming it.
    """
    try:
        state = read_state(checkpoint_dir, latest_filename or STATE_FILE)
    except _DamagedState as exc:
        warnings.warn(str(exc), RuntimeWarning, stacklevel=2)
        return None
    if state is None:
        return None
    latest = state["latest"] or (state["checkpoints"][-1][0] if state["checkpoints"] else None)
    if latest is None or not os.path.exists(latest):
        return None
    return latest
