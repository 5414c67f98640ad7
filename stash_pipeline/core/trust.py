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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from stash_pipeline.core.estimates import (
    auc,
    auc_interval,
    reliability_bins,
    spearman,
    spearman_interval,
    wilson_interval,
)
from stash_pipeline.core.plots import interval_plot, reliability_plot
from stash_pipeline.core.release_gate import min_slice_pairs, slice_keys

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
}


def handful(pairs: int) -> bool:
    """Whether held-out pairs are a handful: fewer than the release gate's smallest judged slice
    (``min_slice_pairs``: where a 95% interval around 50% is +/-0.25 wide)."""
    return pairs < min_slice_pairs()


def heldout_note(pairs: int) -> str | None:
    """The seed's sentence for held-out accuracy on a handful of pairs (none: no sentence)."""
    return HANDFUL_NOTE if 0 < pairs and handful(pairs) else None


@dataclass(frozen=True)
class TraceFacts:
    """One trace the evaluator did not train on, and what is known of it."""

    id: str
    agent: str | None = None
    domain: str | None = None
    tools: tuple[str, ...] = ()
    succeeded: bool | None = None  # verified outcome: every check succeeded; None without one
    rating: float | None = None  # the mean of its trace ratings
    score: float | None = None  # the evaluator's whole-trace raw reward
    calibrated: float | None = None
    mean_credit: float | None = None  # the mean of its actions' credit by this evaluator
    input_tokens: int | None = None  # its whole rendering's tokens before the window cut


@dataclass(frozen=True)
class StepFacts:
    """A rated action of such a trace: the mean of its step ratings and its credit."""

    action_id: str
    rating: float
    credit: float
    tool: str | None = None
    agent: str | None = None
    domain: str | None = None


@dataclass(frozen=True)
class HeldOutCount:
    """Held-out pairs of one slice (``OVERALL`` for all) and how many the evaluator got right."""

    slice_kind: str
    slice: str
    pairs: int
    correct: int


@dataclass(frozen=True)
class Figure:
    metric: str
    slice_kind: str  # all, tool, domain, agent; bin for the reliability curve
    slice: str  # "" for all
    value: float | None
    low: float | None
    high: float | None
    n: int
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrustFacts:
    evaluator: str
    kind: str  # "shared" (a release) or "personal"
    traces: Sequence[TraceFacts]  # not trained on
    steps: Sequence[StepFacts] = ()
    held_out: Sequence[HeldOutCount] = ()
    held_out_source: str = "held-out pairs"
    held_out_unavailable: str | None = None  # why there are none, when known
    trained_traces: int = 0  # the owner's traces left out: the evaluator trained on them
    window: int | None = None  # tokens each input keeps (from the end)
    raw_scores: Sequence[float] = ()  # every whole-trace raw reward on the owner's traces
    action_raw_range: tuple[float, float, int] | None = None  # min, max and count of actions'
    scored_actions: int = 0  # actions not trained on whose rendering's length is known
    cut_action_tokens: Sequence[int] = ()  # the lengths of those longer than the window
    # Training and held-out pairs, and how many had a side cut (the worker's metrics).
    training_pairs: int | None = None
    truncated_training_pairs: int | None = None
    held_out_only: bool = False  # a checkpoint's report before it scored anyone's traces


# The report's shape: a report saved under another format is computed again rather than served in
# a shape the API's typed answer no longer describes. Raise it with any change to the keys.
REPORT_FORMAT = 2


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
    figures = [*_held_out(facts), *_outcome_aucs(facts.traces), *_spearmans(facts),
               *_reliability(facts.traces), *_truncation(facts)]
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
    }
    report["notes"] = _notes(facts, report)
    return report


def figures_of(report: dict[str, Any], metric: str) -> list[dict[str, Any]]:
    return [f for f in report["figures"] if f["metric"] == metric]


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


def _outcome_aucs(traces: Sequence[TraceFacts]) -> list[Figure]:
    figures = []
    for metric, value in (("outcome_auc_trace_score", lambda t: t.score),
                          ("outcome_auc_mean_action_credit", lambda t: t.mean_credit)):
        known = [t for t in traces if t.succeeded is not None and value(t) is not None]
        for (kind, name), group in _grouped(known, _trace_slices).items():
            wins = [value(t) for t in group if t.succeeded]
            losses = [value(t) for t in group if not t.succeeded]
            area = auc(wins, losses)
            low, high = auc_interval(area, len(wins), len(losses)) if area is not None \
                else (None, None)
            figures.append(Figure(metric, kind, name, area, low, high, len(group),
                                  {"succeeded": len(wins), "failed": len(losses)}))
    return figures


def _spearmans(facts: TrustFacts) -> list[Figure]:
    figures = []
    for metric, value in (("spearman_trace_rating", lambda t: t.score),
                          ("spearman_trace_rating_mean_credit", lambda t: t.mean_credit)):
        rated = [t for t in facts.traces if t.rating is not None and value(t) is not None]
        for (kind, name), group in _grouped(rated, _trace_slices).items():
            figures.append(_spearman_figure(metric, kind, name, [value(t) for t in group],
                                            [t.rating for t in group]))

    def step_slices(step: StepFacts) -> list[tuple[str, str]]:
        tools = (step.tool,) if step.tool else ()
        return [OVERALL, *slice_keys({"domain": step.domain, "agent": step.agent}, tools)]

    for (kind, name), group in _grouped(facts.steps, step_slices).items():
        figures.append(_spearman_figure("spearman_step_rating", kind, name,
                                        [s.credit for s in group], [s.rating for s in group]))
    return figures


def _spearman_figure(metric: str, kind: str, name: str, scores: list[float],
                     ratings: list[float]) -> Figure:
    rho = spearman(scores, ratings)
    low, high = spearman_interval(rho, len(scores)) if rho is not None else (None, None)
    return Figure(metric, kind, name, rho, low, high, len(scores))


def _reliability(traces: Sequence[TraceFacts]) -> list[Figure]:
    known = [t for t in traces if t.succeeded is not None and t.calibrated is not None]
    bins = reliability_bins([t.calibrated for t in known], [bool(t.succeeded) for t in known],
                            RELIABILITY_BINS)
    return [Figure("success_rate_by_calibrated_score", "bin", f"{b.low:.1f}-{b.high:.1f}",
                   b.rate, *b.interval, b.n,
                   {"successes": b.successes, "mean_score": b.mean_score,
                    "bin_low": b.low, "bin_high": b.high})
            for b in bins]


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

def separation_note(spread: dict[str, Any] | None, what: str = "scores") -> str | None:
    """The sentence for a model that barely separates anything, else None."""
    if not spread or not spread["barely_separates"]:
        return None
    readout = ("calibrated scores, which stretch that spread by the training rewards' standard "
               "deviation," if what == "scores" else "action credits, which stretch that spread "
               "by the training rewards' standard deviation,")
    threshold = spread["threshold"]
    return (f"This model barely separates anything: its raw {what} span only "
            f"{spread['raw_spread']:.3g}, so by its own Bradley-Terry reading even the "
            f"highest is preferred to the lowest with probability only "
            f"{digits_below(spread['preference_at_extremes'], threshold)}, under {threshold:g}. "
            f"Its {readout} look spread out but mean little.")


def digits_below(value: float, limit: float) -> str:
    """``value`` (< ``limit``) with the fewest decimals, two at least, that still read below
    ``limit``: 0.5996 under 0.6 is "0.5996", never "0.60"."""
    for places in range(2, 7):
        text = f"{value:.{places}f}"
        if float(text) < limit:
            return text
    return f"{limit - 1e-6:.6f}"  # closer than a millionth: the truncation is still true


def _notes(facts: TrustFacts, report: dict[str, Any]) -> list[str]:
    notes = []
    held = report["held_out"]
    if held["note"]:
        notes.append(f"{held['pairs']} held-out pairs: {held['note']}")
    elif held["unavailable"]:
        notes.append(f"No held-out accuracy: {held['unavailable']}.")
    for spread, what in ((report["separation"], "scores"),
                         (report["action_separation"], "action rewards")):
        sentence = separation_note(spread, what)
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
    "outcome_auc_mean_action_credit": ("AUC of mean action credit against verified outcomes",
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


def chart_rows(report: dict[str, Any], metric: str
               ) -> list[tuple[str, float | None, float | None, float | None, int]]:
    """(label, value, low, high, n) of a metric's figures: overall first, then its slices with
    the most members (at most ``MAX_CHART_ROWS``), in the report's order."""
    found = figures_of(report, metric)
    kept = found[:1] + sorted(found[1:], key=lambda f: -f["n"])[:MAX_CHART_ROWS - 1]
    kept.sort(key=found.index)
    return [("all" if f["slice_kind"] == "all" else f"{f['slice_kind']} {f['slice']}",
             f["value"], f["low"], f["high"], f["n"]) for f in kept]


def charts(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(metric, title, SVG) of every chart the report has figures for, the reliability curve
    last (``success_rate_by_calibrated_score``)."""
    drawn = []
    for metric, (title, low, high, reference, label) in CHARTS.items():
        svg = interval_plot(chart_rows(report, metric), title=title, low=low, high=high,
                            reference=reference, reference_label=label)
        if svg is not None:
            drawn.append((metric, title, svg))
    bins = [(f["detail"]["bin_low"], f["detail"]["bin_high"], f["value"], f["low"], f["high"],
             f["n"]) for f in figures_of(report, "success_rate_by_calibrated_score")]
    svg = reliability_plot(bins, title=RELIABILITY_TITLE, x_label=RELIABILITY_AXIS)
    if svg is not None:
        drawn.append(("success_rate_by_calibrated_score", RELIABILITY_TITLE, svg))
    return drawn
