"""Materialisation metadata a person reads in the Dagster UI: tables, and plots (a loss curve,
histograms) as SVG images in Markdown (``core.plots``, the same the trace viewer draws)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg

from stash_pipeline.core import plots
from stash_pipeline.core.curves import downsample
from stash_pipeline.core.trust import charts
from stash_pipeline.services import trust as trust_service


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


def image(svg: str | None, caption: str) -> dg.MetadataValue:
    """An SVG plot as a Markdown image (the UI renders ``data:`` images), with its caption."""
    if svg is None:
        return dg.MetadataValue.md(caption)
    return dg.MetadataValue.md(f"![plot]({plots.data_uri(svg)})\n\n{caption}")


def loss_curve(losses: Sequence[float]) -> dg.MetadataValue:
    """The per-step loss as a plotted curve (averaged down to at most 200 points), with its ends."""
    if not losses:
        return dg.MetadataValue.md("no training steps")
    points = len(downsample(losses))
    caption = (f"{len(losses)} steps, loss {losses[0]:.4f} at the first step, {losses[-1]:.4f} at "
               f"the last (min {min(losses):.4f}, max {max(losses):.4f}"
               + (f"; {points} points, each a mean of consecutive steps)" if points < len(losses)
                  else ")"))
    return image(plots.line_plot(losses, title="Bradley-Terry loss per step",
                                 x_label="training step"), caption)


def histogram(values: Sequence[float], *, title: str = "Scores",
              x_label: str = "value") -> dg.MetadataValue:
    """The distribution of ``values`` as a plotted histogram, with its range."""
    if not values:
        return dg.MetadataValue.md("no values")
    caption = f"{len(values)} values from {min(values):.4g} to {max(values):.4g}"
    return image(plots.histogram(values, title=title, x_label=x_label), caption)


def phases(seconds: Mapping[str, float]) -> dg.MetadataValue:
    """The worker's phases and their seconds, as a table in the order they ran."""
    return table([{"phase": name, "seconds": value} for name, value in seconds.items()],
                 ["phase", "seconds"])


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
    """A trained checkpoint: where it is, the metrics table, the loss curve, the headline
    numbers."""
    return {
        "checkpoint_uri": dg.MetadataValue.path(uri),
        "metrics": key_values({k: v for k, v in metrics.items()
                               if k not in ("loss_curve", "phases", "eval_slices")}),
        "phases": phases(metrics.get("phases") or {}),
        "loss_curve": loss_curve(losses),
        **{name: metrics[name] for name in TRAINING_HEADLINES
           if isinstance(metrics.get(name), (int, float))},
        "device": str(metrics.get("device")),
    }


TRUST_COLUMNS = ["metric", "slice", "value", "low", "high", "n"]
TRUST_HEADLINES = ("heldout_accuracy", "outcome_auc_trace_score",
                   "outcome_auc_mean_action_credit", "within_task_accuracy_trace_score",
                   "baseline_length_auc", "baseline_untrained_auc")


def trust(report: Mapping[str, Any]) -> dict[str, Any]:
    """A trust report (``core.trust``) in the UI: its sentences, every figure with its 95%
    interval and n, its charts, and the overall figures as numbers to plot across runs."""
    notes = "\n".join(f"- {note}" for note in report["notes"]) or "- none"
    held = report["held_out"]
    rows = [{"metric": f["metric"], "n": f["n"], "value": f["value"], "low": f["low"],
             "high": f["high"],
             "slice": "all" if f["slice_kind"] == "all" else f"{f['slice_kind']} {f['slice']}"}
            for f in report["figures"]]
    shown: dict[str, Any] = {
        "trust": dg.MetadataValue.md(
            f"**How far to trust {report['evaluator']}**: held-out pairs from "
            f"{held['source']}; 95% intervals ({report['methods']['proportion']} for "
            f"proportions, {report['methods']['auc']} for AUC, {report['methods']['spearman']} "
            f"for Spearman), task-clustered where it says so: {report['methods']['clustered']} "
            f"See docs/trust.md.\n\n{notes}"),
        "trust_figures": table(rows, TRUST_COLUMNS),
    }
    for metric, title, svg in charts(dict(report)):
        shown[f"trust_chart_{metric}"] = image(svg, title)
    if report.get("verdict"):
        shown["trust_verdict"] = dg.MetadataValue.text(report["verdict"]["label"])
    for figure in report["figures"]:
        if (figure["metric"] in TRUST_HEADLINES and figure["slice_kind"] == "all"
                and figure["value"] is not None):
            shown[figure["metric"]] = float(figure["value"])
            shown[f"{figure['metric']}_n"] = int(figure["n"])
    return shown


def saved_trust(store: Any, owner: str, evaluator: str,
                warn: Callable[[str], None]) -> dict[str, Any]:
    """``trust`` of the evaluator's report on the owner's traces, computed and saved now (what
    the API, the viewer and the SQL endpoint show). Scores are stored by then: a report that
    cannot be made is a warning (the next look at it makes it), never a failed step."""
    try:
        return trust(trust_service.report(store, owner, evaluator))
    except Exception as error:  # noqa: BLE001 - metadata must not fail stored results
        warn(f"no trust report for {evaluator}: {error}")
        return {}
