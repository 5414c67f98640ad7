"""How far to trust an evaluator (docs/trust.md): its agreement with what people and checks said,
on traces it did not train on, each figure with its 95% interval and n, overall and per tool,
domain and agent slice. Pure: facts in, the report out; ``store.trust`` gathers the facts.

Figures (``Figure.metric``):

- ``heldout_accuracy``: pairwise accuracy on held-out pairs (a personal model's held-out split,
  a release's separate benchmark); Wilson interval.
- ``outcome_auc_trace_score`` / ``outcome_auc_mean_action_credit``: the AUC of the whole-trace
  score and of the trace's mean action credit against verified outcomes (1: every check
  succeeded); score-type Hanley-McNeil interval.
- ``spearman_trace_rating`` / ``spearman_trace_rating_mean_credit`` / ``spearman_step_rating``:
  Spearman correlation of trace ratings with the whole-trace score and with mean action credit,
  and of step ratings with action credit; Fisher z interval.
- ``success_rate_by_calibrated_score``: the reliability curve, verified success rate per bin of
  the calibrated score (slice kind ``bin``); Wilson interval.
- ``truncated_traces`` / ``truncated_actions``: the share of scored traces (actions) whose
  rendering was longer than the window and lost its beginning; no interval (a count).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import asdict
from typing import Any

from stash_pipeline.core.clustered import clustering, correlation_influences, proportion_influences
from stash_pipeline.core.estimates import (
    average_ranks,
    reliability_bins,
    spearman,
    spearman_interval,
    wilson_interval,
)
from stash_pipeline.core.plots import interval_plot, reliability_plot
from stash_pipeline.core.release_gate import min_slice_pairs, slice_keys
from stash_pipeline.core.trust_facts import Figure, HeldOutCount, StepFacts, TraceFacts, TrustFacts
from stash_pipeline.core.trust_outcomes import (
    beats_baselines,
    group_of,
    length_rule,
    outcome_figures,
)

__all__ = ["Figure", "HeldOutCount", "StepFacts", "TraceFacts", "TrustFacts", "trust_report"]

# The seed's sentence, word for word, shown instead of a bare accuracy on a handful of pairs.
HANDFUL_NOTE = ("With a handful of pairs, the held-out split is one or two pairs and eval_accuracy "
                "is too noisy to establish quality. Check behavior on separate traces before "
                "relying on scores.")
# The seed: the calibrated score "falls between 0 and 1, with 0.5 at that calibration mean, not a
# probability of correctness".
NOT_A_PROBABILITY = ("The calibrated score is not a probability of correctness: it places a trace "
                     "against the model's own training rewards, 0.5 at their mean. The curve shows "
                     "how often the traces in each score bin actually succeeded.")
# A model barely separates anything when, by its own Bradley-Terry reading, even its highest-
# scored trace is preferred to its lowest with a probability under this: sigma(max - min) < 0.6,
# a raw spread under ln(1.5) = 0.405.
MIN_PREFERENCE_AT_EXTREMES = 0.6
RELIABILITY_BINS = 10
OVERALL = ("all", "")
SPLIT_SOURCE = "its held-out split (10% of its source traces)"
BENCHMARK_SOURCE = "the release's separate benchmark (every account's contributions)"

METRICS = ("heldout_accuracy", "outcome_auc_trace_score", "outcome_auc_mean_action_credit",
           "spearman_trace_rating", "spearman_trace_rating_mean_credit", "spearman_step_rating",
           "success_rate_by_calibrated_score",
           "truncated_traces", "truncated_actions")
METHODS = {
    "confidence": 0.95,
    "proportion": "Wilson score interval",
    "auc": "Hanley-McNeil variance (group sizes at their mean, Newcombe 2006) inverted as a "
           "score interval",
    "spearman": "Fisher z with the Bonett-Wright variance (1 + r^2/2)/(n - 3)",
    "clustered": "Task-clustered: the intervals of every AUC, within-task accuracy, Spearman "
                 "correlation and reliability bin, and of each difference to a baseline. Each "
                 "keeps its shape with its critical value t(G - 1) times the square root of its "
                 "design effect (the clustered variance of its influences over G tasks, "
                 "Obuchowski 1997 for an AUC, against the same with every trace alone; never "
                 "below 1); a difference gets a paired clustered Wald interval. Held-out "
                 "accuracy is not clustered: the worker counts its pairs, not their tasks.",
    "verdict": "A figure from fewer than 10 tasks draws no verdict. A model figure is above "
               "chance when its clustered interval is, and better than its baselines when the "
               "paired interval of its difference to each of them is above 0.",
}
HEADLINES = ("outcome_auc_trace_score", "outcome_auc_mean_action_credit")


def handful(pairs: int) -> bool:
    """Whether held-out pairs are a handful: fewer than the release gate's smallest judged slice
    (``min_slice_pairs``: where a 95% interval around 50% is +/-0.25 wide)."""
    return pairs < min_slice_pairs()


def heldout_note(pairs: int) -> str | None:
    """The seed's sentence for held-out accuracy on a handful of pairs (none: no sentence)."""
    return HANDFUL_NOTE if 0 < pairs and handful(pairs) else None


# The report's shape: a report saved under another format is computed again rather than served in
# a shape the API's typed answer no longer describes. Raise it with any change to the keys.
REPORT_FORMAT = 3


def facts_digest(facts: TrustFacts) -> str:
    """A digest of everything the report reads, and of its format: an unchanged digest means an
    unchanged report. Frozen dataclasses of plain values: their repr is exact (floats round-trip)
    and, unlike ``asdict``, copies nothing."""
    return hashlib.sha256(f"format {REPORT_FORMAT}: {facts!r}".encode(
        "utf-8", "backslashreplace")).hexdigest()


def held_out_summary(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """eval_accuracy as people should read it: with its pairs, its 95% interval and, on a
    handful of pairs, the seed's sentence instead of a bare number; None without one."""
    pairs, accuracy = int(metrics.get("eval_pairs") or 0), metrics.get("eval_accuracy")
    if accuracy is None or not pairs:
        return None
    return {"pairs": pairs, "accuracy": accuracy,
            "interval": list(wilson_interval(round(accuracy * pairs), pairs)),
            "note": heldout_note(pairs)}


def held_out_report(evaluator: str, kind: str, metrics: dict[str, Any],
                    benchmark: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a checkpoint's report says before it scored anyone's traces: held-out accuracy (on
    its held-out split, or a release's ``benchmark`` report) and its training inputs cut to the
    window."""
    held = (held_out_from_benchmark(benchmark) if benchmark is not None
            else held_out_from_metrics(metrics))
    return trust_report(TrustFacts(
        evaluator=evaluator, kind=kind, traces=(), held_out=held,
        held_out_source=BENCHMARK_SOURCE if benchmark is not None else SPLIT_SOURCE,
        held_out_unavailable=metrics.get("eval_unavailable_reason"),
        window=metrics.get("max_length"), training_pairs=metrics.get("num_pairs"),
        truncated_training_pairs=metrics.get("truncated_pairs"), held_out_only=True))


def held_out_from_metrics(metrics: dict[str, Any]) -> list[HeldOutCount]:
    """A personal model's held-out split from its metrics: overall (eval_pairs, eval_accuracy)
    and per slice (eval_slices, which models trained before it existed lack)."""
    pairs = int(metrics.get("eval_pairs") or 0)
    accuracy = metrics.get("eval_accuracy")
    if not pairs or accuracy is None:
        return []
    counts = [HeldOutCount(*OVERALL, pairs, round(accuracy * pairs))]
    counts.extend(HeldOutCount(s["slice"], str(s["value"]), int(s["pairs"]), int(s["correct"]))
                  for s in metrics.get("eval_slices") or [])
    return counts


def held_out_from_benchmark(report: dict[str, Any]) -> list[HeldOutCount]:
    """A release's separate benchmark from its gate report (overall and per slice)."""
    overall = report.get("overall") or {}
    if not overall.get("pairs") or overall.get("candidate") is None:
        return []
    counts = [HeldOutCount(*OVERALL, overall["pairs"],
                           round(overall["candidate"] * overall["pairs"]))]
    counts.extend(HeldOutCount(s["slice"], str(s["value"]), s["pairs"],
                               round(s["candidate"] * s["pairs"]))
                  for s in report.get("slices") or [] if s.get("pairs"))
    return counts


def trust_report(facts: TrustFacts) -> dict[str, Any]:
    """The report: ``figures`` (flat, each with its interval and n), the held-out summary and
    its note, separation, truncation and the sentences a page shows."""
    figures = [*_held_out(facts),
               *outcome_figures(facts.traces, length_rule(facts.trained_lengths),
                                _trace_slices, _grouped),
               *_spearmans(facts), *_reliability(facts.traces), *_truncation(facts)]
    overall = next((c for c in facts.held_out if (c.slice_kind, c.slice) == OVERALL), None)
    pairs = overall.pairs if overall else 0
    spread = separation(facts.raw_scores)
    action_spread = (spread_of(*facts.action_raw_range) if facts.action_raw_range is not None
                     else None)
    report = {
        "evaluator": facts.evaluator, "kind": facts.kind,
        "traces": {
            "considered": len(facts.traces), "trained_on_left_out": facts.trained_traces,
            "with_outcome": sum(t.succeeded is not None for t in facts.traces),
            "with_rating": sum(t.rating is not None for t in facts.traces),
            "with_score": sum(t.score is not None for t in facts.traces),
            "with_action_credit": sum(t.mean_credit is not None for t in facts.traces),
            "rated_actions": len(facts.steps),
        },
        "held_out": {
            "source": facts.held_out_source, "pairs": pairs,
            "accuracy": overall.correct / pairs if pairs else None,
            "interval": list(wilson_interval(overall.correct, pairs)) if pairs else None,
            "handful": handful(pairs), "note": heldout_note(pairs),
            "unavailable": None if pairs else (facts.held_out_unavailable
                                               or "no held-out pairs"),
        },
        "separation": spread, "action_separation": action_spread,
        "window": facts.window,
        "training_pairs": {"pairs": facts.training_pairs,
                           "truncated": facts.truncated_training_pairs},
        "figures": [asdict(f) for f in figures],
        "methods": METHODS,
        "grouping": {"rule": facts.grouping,
                     "groups": len({t.group for t in facts.traces if t.group is not None}),
                     "traces_alone": sum(t.group is None for t in facts.traces)},
    }
    report["verdict"] = headline_verdict(report)
    report["notes"] = _notes(facts, report)
    return report


def figures_of(report: dict[str, Any], metric: str) -> list[dict[str, Any]]:
    return [f for f in report["figures"] if f["metric"] == metric]


def headline_verdict(report: dict[str, Any]) -> dict[str, Any] | None:
    """What the report may claim, in one line: the verdict of its overall outcome AUC (of the
    whole-trace score, else of mean action credit); None without verified outcomes to judge."""
    for metric in HEADLINES:
        found = [f for f in figures_of(report, metric)
                 if f["slice_kind"] == "all" and f["value"] is not None]
        if found:
            figure = found[0]
            suffix = metric.removeprefix("outcome_auc_trace_score").removeprefix(
                "outcome_auc")  # "" or "_mean_action_credit"
            baselines = [{"metric": f["metric"], "baseline": f["detail"]["baseline"],
                          "value": f["value"], "low": f["low"], "high": f["high"],
                          "difference": f["detail"]["difference"],
                          "difference_low": f["detail"]["difference_low"],
                          "difference_high": f["detail"]["difference_high"]}
                         for f in report["figures"]
                         if f["slice_kind"] == "all" and f["metric"] in (
                             f"baseline_length_auc{suffix}", f"baseline_untrained_auc{suffix}")]
            return {"metric": metric, "value": figure["value"], "low": figure["low"],
                    "high": figure["high"], "label": figure["detail"]["verdict"],
                    "judged": figure["detail"]["judged"],
                    "beats_baselines": beats_baselines(figure), "baselines": baselines}
    return None


def verdict_line(verdict: dict[str, Any]) -> str:
    """The verdict as one sentence, with the baselines' figures and differences."""
    what = ("whole-trace score" if verdict["metric"] == "outcome_auc_trace_score"
            else "mean action credit")
    line = (f"Verdict: the AUC of its {what} against verified outcomes is "
            f"{verdict['value']:.3f} (95% {verdict['low']:.2f} to {verdict['high']:.2f}): "
            f"{verdict['label']}.")
    for b in verdict["baselines"]:
        paired = ("" if b["difference_low"] is None else
                  f", 95% {b['difference_low']:+.2f} to {b['difference_high']:+.2f}")
        line += (f" {b['baseline'][0].upper()}{b['baseline'][1:]} gets {b['value']:.3f} on the "
                 f"same traces (difference {b['difference']:+.3f}{paired}).")
    return line


# Figures ---------------------------------------------------------------------------------------

def _held_out(facts: TrustFacts) -> list[Figure]:
    return [Figure("heldout_accuracy", c.slice_kind, c.slice, c.correct / c.pairs,
                   *wilson_interval(c.correct, c.pairs), c.pairs,
                   {"correct": c.correct, "source": facts.held_out_source})
            for c in _ordered(facts.held_out, lambda c: (c.slice_kind, c.slice)) if c.pairs]


def _trace_slices(trace: TraceFacts) -> list[tuple[str, str]]:
    keys = slice_keys({"domain": trace.domain, "agent": trace.agent}, trace.tools)
    return [OVERALL, *keys]


def _grouped(items: Iterable[Any], keys: Callable[[Any], list[tuple[str, str]]]
             ) -> dict[tuple[str, str], list[Any]]:
    groups: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for item in items:
        for key in keys(item):
            groups[key].append(item)
    return dict(_ordered(groups.items(), lambda kv: kv[0]))


def _ordered(items: Iterable[Any], key: Callable[[Any], tuple[str, str]]) -> list[Any]:
    """Overall first, then tool, domain and agent slices, each by value."""
    rank = {"all": 0, "tool": 1, "domain": 2, "agent": 3}
    return sorted(items, key=lambda item: (rank.get(key(item)[0], 9), key(item)[1]))


def _spearmans(facts: TrustFacts) -> list[Figure]:
    figures = []
    for metric, value in (("spearman_trace_rating", lambda t: t.score),
                          ("spearman_trace_rating_mean_credit", lambda t: t.mean_credit)):
        rated = [t for t in facts.traces if t.rating is not None and value(t) is not None]
        for (kind, name), group in _grouped(rated, _trace_slices).items():
            figures.append(_spearman_figure(metric, kind, name, [value(t) for t in group],
                                            [t.rating for t in group],
                                            [group_of(t) for t in group]))
    task_of = {t.id: group_of(t) for t in facts.traces}

    def step_slices(step: StepFacts) -> list[tuple[str, str]]:
        tools = (step.tool,) if step.tool else ()
        return [OVERALL, *slice_keys({"domain": step.domain, "agent": step.agent}, tools)]

    for (kind, name), group in _grouped(facts.steps, step_slices).items():
        trace_ids = [s.action_id.split("/", 1)[0] for s in group]
        figures.append(_spearman_figure(
            "spearman_step_rating", kind, name, [s.credit for s in group],
            [s.rating for s in group],
            [task_of.get(trace_id, ("trace", trace_id)) for trace_id in trace_ids]))
    return figures


def _spearman_figure(metric: str, kind: str, name: str, scores: list[float],
                     ratings: list[float], groups: list[Hashable]) -> Figure:
    """Spearman's correlation with Fisher's z interval, its critical value widened by the
    design effect of the rank correlation's influences on these groups."""
    rho = spearman(scores, ratings)
    if rho is None:
        return Figure(metric, kind, name, None, None, None, len(scores))
    spread = clustering(correlation_influences(average_ranks(scores), average_ranks(ratings)),
                        groups)
    low, high = ((-1.0, 1.0) if spread.critical is None
                 else spearman_interval(rho, len(scores), spread.critical))
    return Figure(metric, kind, name, rho, low, high, len(scores),
                  {**spread.detail(), "judged": not spread.too_few_groups})


def _reliability(traces: Sequence[TraceFacts]) -> list[Figure]:
    """The verified success rate per bin of the calibrated score, each bin's Wilson interval
    widened by the design effect of its traces' tasks."""
    known = [t for t in traces if t.succeeded is not None and t.calibrated is not None]
    bins = reliability_bins([t.calibrated for t in known], [bool(t.succeeded) for t in known],
                            RELIABILITY_BINS)
    figures = []
    for b in bins:
        index = round(b.low * RELIABILITY_BINS)  # reliability_bins' own bin of each score
        members = [t for t in known if min(int(t.calibrated * RELIABILITY_BINS),  # type: ignore
                                           RELIABILITY_BINS - 1) == index]
        _, influences = proportion_influences([float(bool(t.succeeded)) for t in members]) \
            or (0.0, [])
        spread = clustering(influences, [group_of(t) for t in members])
        low, high = ((0.0, 1.0) if spread.critical is None
                     else wilson_interval(b.successes, b.n, spread.critical))
        figures.append(Figure("success_rate_by_calibrated_score", "bin",
                              f"{b.low:.1f}-{b.high:.1f}", b.rate, low, high, b.n,
                              {"successes": b.successes, "mean_score": b.mean_score,
                               "bin_low": b.low, "bin_high": b.high, **spread.detail()}))
    return figures


def _truncation(facts: TrustFacts) -> list[Figure]:
    if facts.window is None:
        return []
    figures = []
    traces = [t.input_tokens for t in facts.traces
              if t.input_tokens is not None and t.score is not None]
    for metric, counted, cut in (
            ("truncated_traces", len(traces), [n for n in traces if n > facts.window]),
            ("truncated_actions", facts.scored_actions, facts.cut_action_tokens)):
        if not counted:
            continue
        read = [facts.window / n for n in cut]
        figures.append(Figure(metric, "all", "", len(read) / counted, None, None, counted,
                              {"truncated": len(read), "window": facts.window,
                               "median_share_read": statistics.median(read) if read
                               else None}))
    return figures


def separation(raw: Sequence[float]) -> dict[str, Any] | None:
    """How far apart the evaluator's raw rewards are, read as its own preference probability."""
    values = [v for v in raw if math.isfinite(v)]
    return spread_of(min(values), max(values), len(values)) if values else None


def spread_of(low: float, high: float, count: int) -> dict[str, Any] | None:
    """``separation`` of ``count`` rewards from ``low`` to ``high``; None under two."""
    if count < 2:
        return None
    spread = high - low
    preference = 1 / (1 + math.exp(-min(spread, 50.0)))
    return {"raw_spread": spread, "preference_at_extremes": preference,
            "barely_separates": preference < MIN_PREFERENCE_AT_EXTREMES,
            "threshold": MIN_PREFERENCE_AT_EXTREMES, "scores": count}


# Sentences -------------------------------------------------------------------------------------

def separation_note(spread: dict[str, Any] | None, what: str = "scores",
                    verdict: dict[str, Any] | None = None) -> str | None:
    """One sentence for a model whose raw rewards span little, else None: what the spread
    means (a probability statement of its own) and what its ranking shows (the report's
    ``verdict``), which the spread neither confirms nor denies."""
    if not spread or not spread["barely_separates"]:
        return None
    readout = "calibrated scores" if what == "scores" else "action credits"
    if verdict is None:
        ranking = ("whether the order it puts traces in matches task success only verified "
                   "outcomes can show" + ("" if what == "scores" else
                                          ", through its mean action credit"))
    else:
        ranking = (f"the order it puts traces in is another question, which its outcome AUC "
                   f"answers: {verdict['value']:.3f} (95% {verdict['low']:.2f} to "
                   f"{verdict['high']:.2f}), {verdict['label']}")
    threshold = spread["threshold"]
    return (f"Its raw {what} span only {spread['raw_spread']:.3g}: by its own Bradley-Terry "
            f"reading even the highest is preferred to the lowest with probability only "
            f"{digits_below(spread['preference_at_extremes'], threshold)}, under {threshold:g}, so "
            f"its {readout}, stretched by the training rewards' standard deviation, are weak "
            f"preferences rather than confident ones; {ranking}.")


def digits_below(value: float, limit: float) -> str:
    """``value`` (< ``limit``) with the fewest decimals, two at least, that still read below
    ``limit``: 0.5996 under 0.6 is "0.5996", never "0.60"."""
    for places in range(2, 7):
        text = f"{value:.{places}f}"
        if float(text) < limit:
            return text
    return f"{limit - 1e-6:.6f}"  # closer than a millionth: the truncation is still true


def _notes(facts: TrustFacts, report: dict[str, Any]) -> list[str]:
    notes = [verdict_line(report["verdict"])] if report["verdict"] else []
    held = report["held_out"]
    if held["note"]:
        notes.append(f"{held['pairs']} held-out pairs: {held['note']}")
    elif held["unavailable"]:
        notes.append(f"No held-out accuracy: {held['unavailable']}.")
    for spread, what in ((report["separation"], "scores"),
                         (report["action_separation"], "action rewards")):
        sentence = separation_note(spread, what, report["verdict"])
        if sentence:
            notes.append(sentence)
    counts = report["traces"]
    if not counts["with_outcome"] and not facts.held_out_only:
        notes.append("No verified outcome on the traces it did not train on: import outcomes "
                     "(metadata.outcome, --outcome-field, feedback outcome) to measure its "
                     "agreement with task success.")
    if facts.kind == "shared" and counts["with_outcome"] and not counts["with_score"]:
        notes.append("The release scores actions on its own; whole-trace scores exist only for "
                     "traces scored again with it (Score again), so only mean action credit is "
                     "compared with outcomes.")
    for metric, what in (("truncated_traces", "scored traces"),
                         ("truncated_actions", "scored actions")):
        cut = figures_of(report, metric)
        if cut and cut[0]["detail"]["truncated"]:
            detail = cut[0]["detail"]
            notes.append(f"{detail['truncated']} of {cut[0]['n']} {what} were longer than the "
                         f"{detail['window']}-token window and lost their beginning (a median "
                         f"{detail['median_share_read']:.0%} of each was read).")
    if facts.truncated_training_pairs:
        notes.append(f"{facts.truncated_training_pairs} of {facts.training_pairs} training and "
                     "held-out pairs had a side longer than the window.")
    return notes


# Charts ----------------------------------------------------------------------------------------

# Each figure's chart: its title, its axis and the line it is read against.
CHARTS = {
    "heldout_accuracy": ("Held-out pairwise accuracy", 0.0, 1.0, 0.5, "chance"),
    "outcome_auc_trace_score": ("AUC of the whole-trace score against verified outcomes",
                                0.0, 1.0, 0.5, "chance"),
    "baseline_length_auc": ("Baseline: AUC of the trace-length rule on the same traces",
                            0.0, 1.0, 0.5, "chance"),
    "baseline_untrained_auc": ("Baseline: AUC of the untrained base on the same traces",
                               0.0, 1.0, 0.5, "chance"),
    "outcome_auc_mean_action_credit": ("AUC of mean action credit against verified outcomes",
                                       0.0, 1.0, 0.5, "chance"),
    "within_task_accuracy_trace_score": ("Within a task: succeeded over failed, whole-trace "
                                         "score", 0.0, 1.0, 0.5, "chance"),
    "baseline_length_within_task": ("Baseline: the trace-length rule within a task",
                                    0.0, 1.0, 0.5, "chance"),
    "spearman_trace_rating": ("Spearman: whole-trace score and trace ratings", -1.0, 1.0, 0.0,
                              "no relation"),
    "spearman_trace_rating_mean_credit": ("Spearman: mean action credit and trace ratings",
                                          -1.0, 1.0, 0.0, "no relation"),
    "spearman_step_rating": ("Spearman: action credit and step ratings", -1.0, 1.0, 0.0,
                             "no relation"),
}
RELIABILITY_TITLE = "Verified success rate by calibrated score"
RELIABILITY_AXIS = ("calibrated score (dashed: where a probability of success would lie; "
                    "this score is not one)")
MAX_CHART_ROWS = 24  # overall and the most populated slices


def charted(report: dict[str, Any], metric: str) -> list[dict[str, Any]]:
    """A metric's figures a chart draws: overall first, then its slices with the most members
    (at most ``MAX_CHART_ROWS``), in the report's order."""
    found = figures_of(report, metric)
    kept = found[:1] + sorted(found[1:], key=lambda f: -f["n"])[:MAX_CHART_ROWS - 1]
    kept.sort(key=found.index)
    return kept


def chart_rows(figures: Sequence[dict[str, Any]]
               ) -> list[tuple[str, float | None, float | None, float | None, int]]:
    """(label, value, low, high, n) of each figure."""
    return [("all" if f["slice_kind"] == "all" else f"{f['slice_kind']} {f['slice']}",
             f["value"], f["low"], f["high"], f["n"]) for f in figures]


def charts(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(metric, title, SVG) of every chart the report has figures for, the reliability curve
    last (``success_rate_by_calibrated_score``)."""
    drawn = []
    for metric, (title, low, high, reference, label) in CHARTS.items():
        kept = charted(report, metric)
        svg = interval_plot(chart_rows(kept), title=title, low=low, high=high,
                            reference=reference, reference_label=label,
                            unjudged={i for i, f in enumerate(kept)
                                      if f["detail"].get("too_few_groups")})
        if svg is not None:
            drawn.append((metric, title, svg))
    bins = [(f["detail"]["bin_low"], f["detail"]["bin_high"], f["value"], f["low"], f["high"],
             f["n"]) for f in figures_of(report, "success_rate_by_calibrated_score")]
    svg = reliability_plot(bins, title=RELIABILITY_TITLE, x_label=RELIABILITY_AXIS)
    if svg is not None:
        drawn.append(("success_rate_by_calibrated_score", RELIABILITY_TITLE, svg))
    return drawn
