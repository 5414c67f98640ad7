"""How a trust report (``core.trust``, docs/trust.md) prints for people: its sentences, the
held-out accuracy, then every figure with its 95% interval and n, the reliability curve last."""

from __future__ import annotations

from typing import Any

from stash_pipeline.cli.output import print_table

COLUMNS = ["metric", "slice", "value", "interval", "n", "detail"]


def held_out_line(held: dict[str, Any]) -> str:
    """eval_accuracy as people should read it: with its pairs and interval, and the seed's
    sentence on a handful of pairs instead of a bare number."""
    low, high = held["interval"]
    line = (f"{held['accuracy']:.4g} on {held['pairs']} held-out pairs "
            f"(95% interval {low:.2f} to {high:.2f})")
    return f"{line}. {held['note']}" if held.get("note") else line


def print_report(report: dict[str, Any]) -> None:
    kind = "release" if report["kind"] == "shared" else "personal model"
    traces = report["traces"]
    print(f"How far to trust {kind} {report['evaluator']} on your traces it did not train on "
          f"({traces['considered']} traces; {traces['trained_on_left_out']} it trained on left "
          f"out; computed {report['computed_at']}):")
    for note in report["notes"]:
        print(f"- {note}")
    held = report["held_out"]
    if held["accuracy"] is not None:
        print(f"held-out accuracy: {held_out_line(held)} [{held['source']}]")
    rows = [_row(f) for f in report["figures"]
            if f["metric"] != "success_rate_by_calibrated_score"]
    if rows:
        print_table(rows, COLUMNS)
    bins = [_row(f) for f in report["figures"]
            if f["metric"] == "success_rate_by_calibrated_score"]
    if bins:
        print("verified success rate by calibrated score (the calibrated score is not a "
              "probability of correctness):")
        print_table([{**b, "bin": b["slice"].removeprefix("bin ")} for b in bins],
                    ["bin", "value", "interval", "n"])
    methods = report["methods"]
    print(f"95% intervals: {methods['proportion']} (proportions), {methods['auc']} (AUC), "
          f"{methods['spearman']} (Spearman). {methods['clustered']} {methods['verdict']}")
    grouping = report["grouping"]
    print(f"tasks: {grouping['rule']} ({grouping['groups']} tasks, {grouping['traces_alone']} "
          f"traces on their own; --group-by FIELD names another metadata field)")


def _row(figure: dict[str, Any]) -> dict[str, Any]:
    value, low, high = figure["value"], figure["low"], figure["high"]
    detail = ", ".join(f"{k} {_number(v)}" for k, v in figure["detail"].items()
                       if k not in ("source", "bin_low", "bin_high") and v is not None)
    return {"metric": figure["metric"],
            "slice": "all" if figure["slice_kind"] == "all"
            else f"{figure['slice_kind']} {figure['slice']}",
            "value": "n/a" if value is None else f"{value:.3f}",
            "interval": "" if low is None or high is None else f"{low:.2f} to {high:.2f}",
            "n": figure["n"], "detail": detail}


def _number(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


GROUP_BY_HELP = ("the metadata field whose value says which traces share a task (default: "
                 "task_id, else evaluation_context, else the first user message; docs/trust.md)")
