"""The ML stack the worker supports, checked before anything imports it.

A job on an unsupported stack must stop at once with one line that names what is installed and
what is supported, never deep inside a forward (transformers 5.17 broke the worker's reads with
``RuntimeError: ... did not store keys and values through its cache``). The versions are read from
the installed distributions' metadata, so the check costs milliseconds and imports neither torch
nor transformers; the runner calls it first, so a local venv and the Modal image are checked alike.

The ranges are wider than the installation pins (``pyproject.toml``, ``deploy/requirements-worker
.txt``): torch is pinned to one build for installing, and the worker is checked on each torch in
its range (2.11 is the stock CUDA image of the GPU hosts the benchmarks run on). A test holds the
pins inside the ranges.
"""

from __future__ import annotations

from importlib import metadata

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from stash_pipeline.core.errors import StashError

SUPPORTED = {"torch": ">=2.11,<2.14", "transformers": ">=5.23,<5.25"}


class UnsupportedStackError(StashError):
    """torch or transformers missing or outside ``SUPPORTED``; the message is one line."""


def installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def supported(version: str | None, specifier: str) -> bool:
    if version is None:
        return False
    try:
        # A local label (2.11.0+cu130) is the same release for the range.
        return Version(version).public in SpecifierSet(specifier)
    except InvalidVersion:
        return False


def check_stack() -> str:
    """The installed versions as one line ("torch 2.13.0, transformers 5.24.0"); raises
    ``UnsupportedStackError`` naming every package outside its range, and each range."""
    versions = {name: installed_version(name) for name in SUPPORTED}
    installed = ", ".join(f"{name} {version or 'missing'}" for name, version in versions.items())
    wrong = [name for name, version in versions.items()
             if not supported(version, SUPPORTED[name])]
    if wrong:
        ranges = ", ".join(f"{name} {SUPPORTED[name]}" for name in wrong)
        raise UnsupportedStackError(f"unsupported ML stack: {installed} installed; the worker "
                                    f"supports {ranges}")
    return installed
