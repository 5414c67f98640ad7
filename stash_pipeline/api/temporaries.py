"""The import route's temporary folders: named by the process that made them, and those of dead
processes removed when the API starts.

A request body is written to a folder of its own in the system's temporary directory and removed
with it when the request ends, whatever its outcome. A process killed meanwhile (SIGKILL, a crash,
the machine's OOM killer) cannot remove it: its folder would stay forever (2 to 100 MiB each). The
folder's name holds the process id, so the next API start removes the folders of processes that
no longer exist, never those of another live API process sharing the directory.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time
from pathlib import Path

PREFIX = "stash-api-import-"
_OWNED = re.compile(rf"{re.escape(PREFIX)}(\d+)-")
# A folder from before names held the process id is abandoned once older than any request can
# run (the body timeout and the longest import are minutes).
UNNAMED_AFTER_S = 3600

log = logging.getLogger(__name__)


def import_folder() -> tempfile.TemporaryDirectory:
    """A folder for one request's body, removed when the request ends."""
    return tempfile.TemporaryDirectory(prefix=f"{PREFIX}{os.getpid()}-")


def remove_abandoned(folder: Path | None = None, now: float | None = None) -> list[str]:
    """Remove the import folders of processes that no longer exist; their names."""
    folder = Path(folder or tempfile.gettempdir())
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(PREFIX) or not entry.is_dir() or entry.is_symlink():
            continue
        owner = _OWNED.match(entry.name)
        if owner is not None:
            abandoned = not _alive(int(owner.group(1)))
        else:
            try:
                abandoned = now - entry.stat().st_mtime > UNNAMED_AFTER_S
            except OSError:
                continue
        if abandoned and _remove_folder(entry):
            removed.append(entry.name)
    if removed:
        log.info("removed %d temporary import folder(s) of stopped API processes", len(removed))
    return removed


def _remove_folder(folder: Path) -> bool:
    """Remove an import folder: it holds files only (the body), never folders of its own."""
    try:
        for child in folder.iterdir():
            child.unlink()
        folder.rmdir()
    except OSError as error:
        log.warning("could not remove the abandoned import folder %s: %s", folder, error)
        return False
    return True


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process: not ours to judge
    return True
