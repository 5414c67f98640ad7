"""Materialisation metadata a person reads in the Dagster UI: tables, a loss curve, histograms."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

SPARK = "▁▂▃▄▅▆▇█"
CURVE_POINTS = 60
HISTOGRAM_BINS = 10
BAR_WIDTH = 30


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> dg.MetadataValue:
    """A Markdown table (the UI renders it)."""
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        return "" if value is None else str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return dg.MetadataValue.md("\n".join(lines))


def key_values(values: Mapping[str, Any]) -> dg.MetadataValue:
    return table([{"field": k, "value": v} for k, v in values.items()], ["field", "value"])


def loss_curve(losses: Sequence[float]) -> dg.MetadataValue:
    """The per-step loss as a sparkline (averaged down to at most 60 points), with its ends."""
    if not losses:
        return dg.MetadataValue.md("no training steps")
    size = math.ceil(len(losses) / CURVE_POINTS)
    points = [sum(losses[i:i + size]) / len(losses[i:i + size]) for i in range(0, len(losses), size)]
    low, high = min(points), max(points)
    spread = (high - low) or 1.0
    line = "".join(SPARK[min(len(SPARK) - 1, int((p - low) / spread * len(SPARK)))] for p in points)
    return dg.MetadataValue.md(
        f"`{line}`\n\n{len(losses)} steps, loss {losses[0]:.4f} at the first step, "
        f"{losses[-1]:.4f} at the last (min {min(losses):.4f}, max {max(losses):.4f}; "
        f"each mark averages {size} step{'s' if size > 1 else ''})")


def histogram(values: Sequence[float], bins: int = HISTOGRAM_BINS) -> dg.MetadataValue:
    """Counts of ``values`` in equal-width bins, drawn as bars."""
    if not values:
        return dg.MetadataValue.md("no values")
    low, high = min(values), max(values)
    width = (high - low) / bins or 1.0
    counts = [0] * bins
    for value in values:
        counts[min(bins - 1, int((value - low) / width))] += 1
    peak = max(counts)
    rows = [{"from": low + i * width, "to": low + (i + 1) * width, "count": n,
             "": "█" * round(n / peak * BAR_WIDTH)} for i, n in enumerate(counts)]
    return table(rows, ["from", "to", "count", ""])


def extraction(report: Mapping[str, Any]) -> dg.MetadataValue:
    """The extraction step of a pair report: requests, ambiguous skips, what was not extracted."""
    return key_values({
        "extraction": report["extraction"], "requests": report["extraction_requests"],
        "skipped as ambiguous": report["skipped_ambiguous"],
        **{f"not extracted: {k}": v for k, v in report["pending_extraction"].items()}})


def split(counts: Mapping[str, int]) -> dict[str, Any]:
    """A trace-level split's counts: the three a person looks for first, then the whole table."""
    return {"train_pairs": counts["train_pairs"], "eval_pairs": counts["eval_pairs"],
            "excluded_cross_trace_pairs": counts["excluded_cross_trace_pairs"],
            "split": key_values(counts)}


TRAINING_HEADLINES = ("final_loss", "eval_accuracy", "train_pairs", "eval_pairs", "seconds")


def training(uri: str, metrics: Mapping[str, Any], losses: Sequence[float]) -> dict[str, Any]:
    """A trained checkpoint: where it is, the metrics table, the loss curve, the headline numbers."""
    return {
        "checkpoint_uri": dg.MetadataValue.path(uri),
        "metrics": key_values({k: v for k, v in metrics.items() if k != "loss_curve"}),
        "loss_curve": loss_curve(losses),
        **{name: metrics[name] for name in TRAINING_HEADLINES
           if isinstance(metrics.get(name), (int, float))},
        "device": str(metrics.get("device")),
    }
