"""A child process that does not outlive the process that started it (Linux)."""

from __future__ import annotations

import ctypes
import sys

# prctl(PR_SET_PDEATHSIG): Linux signals the child when the process that started it dies.
PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def signal_when_parent_dies(number: int) -> None:
    """In a child, before it starts (``preexec_fn``): Linux sends it ``number`` when the process
    that started it dies (elsewhere nothing)."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, number)
