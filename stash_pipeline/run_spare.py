"""``python -m stash_pipeline.run_spare``: a run's process, started before its run.

A run's process (``python -m dagster api execute_run``, run_launcher.py) spends its first seconds
importing Dagster and the code location (about 3 CPU-s here) before the run starts: seconds a
person waits on every Score again. The launcher keeps one spare started ahead: it has done those
imports and waits for the ``execute_run`` arguments of the next run on its stdin, then runs
exactly what ``dagster api execute_run`` runs. A spare whose stdin closes without arguments (the
launcher let it go, or its process ended) exits.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    from dagster._cli import main as dagster_cli

    import stash_pipeline.definitions  # noqa: F401  (the code location the run loads)

    line = sys.stdin.readline()
    if not line.strip():
        return 0
    arguments = json.loads(line)
    sys.argv = ["dagster", *arguments]
    dagster_cli()  # exits with the run's status
    return 0


if __name__ == "__main__":
    sys.exit(main())
