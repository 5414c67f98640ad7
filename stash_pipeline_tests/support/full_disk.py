"""A disk that is really full, for the tests of what a full disk does: a small tmpfs mounted for
the test, filled to the last few KiB, so writes fail with the kernel's own ENOSPC (SQLite's,
PostgreSQL's and Python's own code paths, not a patched write).

Mounting needs root (or CAP_SYS_ADMIN), as `.ci/run` and the project's test machine have; elsewhere
the test is skipped with a reason that names what is missing (pytest's ``-ra`` shows it).
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

FILLER = ".filler"


@contextlib.contextmanager
def small_disk(folder: Path, size_kib: int, *, owner: str | None = None) -> Iterator[Path]:
    """``folder`` as a tmpfs of ``size_kib`` KiB (owned by ``owner`` if given), unmounted after."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0700", "tmpfs", str(folder)],
        capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"a full disk needs a small tmpfs, and mount refused "
                    f"({mounted.stderr.strip() or mounted.returncode}): run as root")
    try:
        if owner is not None:
            subprocess.run(["chown", f"{owner}:{owner}", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(folder: Path, leave_kib: int = 0) -> None:
    """Fill the disk under ``folder`` with one file, then free ``leave_kib`` KiB of it."""
    filler = folder / FILLER
    with open(filler, "ab") as out:
        chunk = b"\0" * 65536
        try:
            while True:
                out.write(chunk)
                out.flush()
        except OSError as error:
            assert error.errno == errno.ENOSPC, error
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - leave_kib * 1024))


def free_kib(folder: Path) -> int:
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize // 1024


def contents(folder: Path) -> list[str]:
    """What is on the disk besides the filler."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name != FILLER)
