"""``python -m stash_pipeline.run_spare``: a run's process, started before its run.

A run's process (``python -m dagster api execute_run``, run_launcher.py) spends its first seconds
importing Dagster and the code location, opening the instance's storage and loading the
definitions (about 3 CPU-s here) before the run starts: seconds a person waits on every Score
again. The launcher keeps one spare started ahead. Its stdin brings two lines: first the
instance's serialized ref, with which it does that work once (the instance opened and its
storages read, then closed; the definitions loaded), then the ``execute_run`` arguments of its
run, with which it runs exactly what ``dagster api execute_run`` runs. A spare whose stdin closes
first (the launcher let it go, or its process ended) exits.
"""

from __future__ import annotations

import json
import sys


def warm(instance_ref: str) -> None:
    """What every run's process does before its run, done before the run is known: a new
    instance from the same ref then reuses the imported storage modules and migration scripts."""
    import dagster as dg
    from dagster._serdes import deserialize_value

    from stash_pipeline import definitions

    with dg.DagsterInstance.from_ref(deserialize_value(instance_ref)) as instance:
        instance.get_run_by_id("0" * 36)  # the run and event storages opened and checked
        instance.event_log_storage.get_concurrency_keys()
    definitions.defs()


def main() -> int:
    from dagster._cli import main as dagster_cli

    reference = sys.stdin.readline()
    if not reference.strip():
        return 0
    warm(reference)
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    sys.argv = ["dagster", *json.loads(line)]
    dagster_cli()  # exits with the run's status
    return 0


if __name__ == "__main__":
    sys.exit(main())
