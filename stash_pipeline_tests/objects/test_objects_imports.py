"""The Modal GPU function imports this package to upload checkpoints: no Dagster, torch or SQL."""

from __future__ import annotations

import subprocess
import sys


def test_objects_import_no_dagster_torch_or_database_code() -> None:
    code = (
        "import sys\n"
        "import stash_pipeline.objects\n"
        "heavy = [m for m in ('dagster', 'torch', 'transformers', 'sqlalchemy', 'alembic',\n"
        "                     'stash_pipeline.store') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
