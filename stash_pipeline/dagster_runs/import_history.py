"""An import of traces in the instance's asset history: a materialisation of the ``traces``
asset (``defs/traces/assets.py``) with the import's counts."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg

from stash_pipeline.dagster_runs.instance import get_instance


def record_traces_import(instance: dg.DagsterInstance, summary: Mapping[str, int],
                         breakdown: Mapping[str, Mapping[str, int]]) -> None:
    """A materialisation of the ``traces`` asset for one import, with its counts."""
    from stash_pipeline.defs.metadata import key_values

    metadata: dict[str, Any] = {k: v for k, v in summary.items() if isinstance(v, int)}
    metadata.update({f"by_{name}": key_values(dict(counts)) for name, counts in breakdown.items()})
    instance.report_runless_asset_event(dg.AssetMaterialization("traces", metadata=metadata))


def record_import(report: Any, warn: Callable[[str], None]) -> None:
    """Record an import (``services.imports.ImportReport``) as a ``traces`` materialisation.

    The import is already committed: a failure here is only warned about, never raised.
    """
    try:
        record_traces_import(get_instance(), report.summary, report.breakdown)
    except Exception as error:  # noqa: BLE001 - the UI's record never undoes a stored import
        warn(f"the import is stored, but recording it in Dagster failed: {error}")
