"""The trust report's agreement with verified outcomes (docs/trust.md): each AUC and within-task
accuracy with its task-clustered interval, beside its baselines on exactly the same traces (the
trace-length rule; the untrained base with a fresh score head), each baseline with its paired
difference to the model, and a verdict that never says more than the figures do. Pure.

- ``outcome_auc_<score>``: the probability that a succeeded trace outscores a failed one.
- ``within_task_accuracy_<score>``: within one task, the share of (succeeded, failed) trace
  pairs the score orders right (ties half): the comparison verified-outcome pairs teach.
- ``baseline_length_<figure>`` / ``baseline_untrained_<figure>``: the same figure of a baseline;
  its ``detail`` has the model's figure on the same traces and the difference with its paired
  clustered interval.

``<score>`` is ``trace_score`` (the whole-trace raw reward) or ``mean_action_credit``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from stash_pipeline.core.clustered import (
    Clustering,
    auc_influences,
    clustering,
    paired_difference,
    proportion_influences,
)
from stash_pipeline.core.estimates import auc, auc_interval, wilson_interval
from stash_pipeline.core.trust_facts import Figure, TraceFacts

Score = Callable[[TraceFacts], float | None]
SCORES: tuple[tuple[str, Score], ...] = (
    ("trace_score", lambda t: t.score),
    ("mean_action_credit", lambda t: t.mean_credit),
)
CHANCE = 0.5
LENGTH_LABEL = "the trace-length rule"
UNTRAINED_LABEL = "the untrained base"


def group_of(trace: TraceFacts) -> Hashable:
    """A trace's group: its task by the grouping rule, else the trace alone."""
    return trace.group if trace.group is not None else ("trace", trace.id)


@dataclass(frozen=True)
class LengthRule:
    """The trace-length rule: shorter (or longer) traces succeed. Its direction comes from the
    traces the model trained on, never from those it is evaluated on."""

    shorter: bool
    basis: str  # how the direction was fixed, for the report

    def score(self, trace: TraceFacts) -> float | None:
        if trace.length is None:
            return None
        return -float(trace.length) if self.shorter else float(trace.length)

    @property
    def label(self) -> str:
        return f"{LENGTH_LABEL} ({'shorter' if self.shorter else 'longer'} succeeded)"


def length_rule(trained: Sequence[tuple[int, bool]]) -> LengthRule:
    """Shorter succeeded unless the trained-on traces say longer did (their length AUC above
    0.5); without both outcomes among them, shorter (the usual finding: failing agents loop)."""
    area = auc([float(n) for n, ok in trained if ok], [float(n) for n, ok in trained if not ok])
    if area is None:
        return LengthRule(True, "no succeeded and failed traces among those it trained on: "
                                "shorter by default")
    return LengthRule(area <= CHANCE, f"from the {len(trained)} traces with an outcome it "
                                      f"trained on (length AUC {area:.3f})")


@dataclass(frozen=True)
class Measured:
    """One figure of one scorer on a set of traces: its value, per-item influences (aligned with
    the items) and the items' groups."""

    value: float
    influences: list[float]
    groups: list[Hashable]
    n: int
    detail: dict[str, Any]


def _auc_of(traces: Sequence[TraceFacts], score: Score) -> Measured | None:
    wins = [t for t in traces if t.succeeded]
    losses = [t for t in traces if not t.succeeded]
    found = auc_influences([score(t) for t in wins], [score(t) for t in losses])  # type: ignore
    if found is None:
        return None
    area, on_wins, on_losses = found
    return Measured(area, on_wins + on_losses, [group_of(t) for t in [*wins, *losses]],
                    len(traces), {"succeeded": len(wins), "failed": len(losses)})


def task_pairs(traces: Sequence[TraceFacts]) -> list[tuple[TraceFacts, TraceFacts]]:
    """Every (succeeded, failed) pair of traces of the same task (traces on their own have
    none), in a fixed order."""
    tasks: dict[str, list[TraceFacts]] = defaultdict(list)
    for trace in traces:
        if trace.group is not None:
            tasks[trace.group].append(trace)
    return [(win, loss) for task in sorted(tasks) for win in tasks[task] if win.succeeded
            for loss in tasks[task] if not loss.succeeded]


def _within_task_of(pairs: Sequence[tuple[TraceFacts, TraceFacts]], score: Score
                    ) -> Measured | None:
    scored = {t.id: score(t) for pair in pairs for t in pair}
    right = [1.0 if a > b else 0.5 if a == b else 0.0  # type: ignore[operator]
             for a, b in ((scored[w.id], scored[f.id]) for w, f in pairs)]
    found = proportion_influences(right)
    if found is None:
        return None
    share, influences = found
    return Measured(share, influences, [group_of(w) for w, _ in pairs], len(pairs),
                    {"right": sum(right), "pairs": len(pairs)})


def _interval(kind: str, measured: Measured, spread: Clustering) -> tuple[float, float]:
    if spread.critical is None:
        return 0.0, 1.0
    if kind == "auc":
        return auc_interval(measured.value, measured.detail["succeeded"],
                            measured.detail["failed"], spread.critical)
    return wilson_interval(measured.detail["right"], measured.n, spread.critical)  # type: ignore


def outcome_figures(traces: Sequence[TraceFacts], rule: LengthRule,
                    slices: Callable[[TraceFacts], list[tuple[str, str]]],
                    grouped: Callable[..., dict[tuple[str, str], list[Any]]]) -> list[Figure]:
    """Each score's outcome AUC and within-task accuracy, overall and per slice, with their
    baselines: the model's figures first, each baseline's after."""
    figures: list[Figure] = []
    found: dict[tuple[str, ...], list[tuple[TraceFacts, TraceFacts]]] = {}

    def pairs_of(members: Sequence[TraceFacts]) -> list[tuple[TraceFacts, TraceFacts]]:
        """``task_pairs`` of a slice's traces, once: the model's figure and each baseline's
        read the same pairs."""
        key = tuple(t.id for t in members)
        if key not in found:
            found[key] = task_pairs(members)
        return found[key]

    for name, score in SCORES:
        known = [t for t in traces if t.succeeded is not None and score(t) is not None]
        by_slice = grouped(known, slices)
        baselines: list[tuple[str, str, Score, dict[str, Any]]] = [
            ("length", rule.label, rule.score, {"direction": "shorter" if rule.shorter
                                                else "longer", "direction_from": rule.basis})]
        if name == "trace_score":
            baselines.append(("untrained", UNTRAINED_LABEL, lambda t: t.untrained, {}))
        for kind, measure, metric, base_metric in (
                ("auc", _auc_of, f"outcome_auc_{name}", "auc"),
                ("within", lambda ts, sc: _within_task_of(pairs_of(ts), sc),
                 f"within_task_accuracy_{name}", "within_task")):
            suffix = "" if name == "trace_score" else f"_{name}"
            for (slice_kind, slice_name), members in by_slice.items():
                model = measure(members, score)
                if model is None and kind == "within":
                    continue  # no task has both a succeeded and a failed trace here
                compared = [_baseline(f"baseline_{b}_{base_metric}{suffix}", kind, measure,
                                      members, score, b_score, label, extra, slice_kind,
                                      slice_name)
                            for b, label, b_score, extra in baselines
                            if name == "trace_score" or b != "untrained"]
                compared = [c for c in compared if c is not None]
                figures.append(_model_figure(metric, kind, slice_kind, slice_name, model,
                                             members, compared))
                figures.extend(compared)
    return figures


def _model_figure(metric: str, kind: str, slice_kind: str, slice_name: str,
                  model: Measured | None, members: Sequence[TraceFacts],
                  baselines: Sequence[Figure]) -> Figure:
    if model is None:
        wins = sum(bool(t.succeeded) for t in members)
        detail: dict[str, Any] = ({"succeeded": wins, "failed": len(members) - wins}
                                  if kind == "auc" else {"right": 0, "pairs": 0})
        return Figure(metric, slice_kind, slice_name, None, None, None,
                      len(members) if kind == "auc" else 0, detail)
    spread = clustering(model.influences, model.groups)
    low, high = _interval(kind, model, spread)
    detail = {**model.detail, **spread.detail()}
    detail["verdict"] = verdict(low, spread, baselines)
    detail["judged"] = not spread.too_few_groups
    return Figure(metric, slice_kind, slice_name, model.value, low, high, model.n, detail)


def _baseline(metric: str, kind: str, measure: Callable[..., Measured | None],
              members: Sequence[TraceFacts], score: Score, baseline: Score, label: str,
              extra: dict[str, Any], slice_kind: str, slice_name: str) -> Figure | None:
    """The baseline's figure on the traces of the slice it can score (all of them for the
    length rule), and the model's on exactly those, with their paired difference."""
    both = [t for t in members if baseline(t) is not None]
    theirs, ours = measure(both, baseline), measure(both, score)
    if theirs is None or ours is None:
        return None
    spread = clustering(theirs.influences, theirs.groups)
    low, high = _interval(kind, theirs, spread)
    difference = ours.value - theirs.value
    paired = paired_difference(difference, ours.influences, theirs.influences, ours.groups)
    return Figure(metric, slice_kind, slice_name, theirs.value, low, high, theirs.n,
                  {**theirs.detail, **spread.detail(), **extra, "baseline": label,
                   "model": ours.value, "difference": difference,
                   "difference_low": paired[0] if paired else None,
                   "difference_high": paired[1] if paired else None})


def verdict(low: float, spread: Clustering, baselines: Sequence[Figure]) -> str:
    """What a figure may claim: nothing on too few tasks; above chance only when its clustered
    interval is; better than its baselines only when the paired difference to each of them is
    above 0 (else no better than the best one it does not beat)."""
    if spread.too_few_groups:
        return f"too few tasks ({spread.groups}) to judge"
    if low <= CHANCE:
        return "not above chance"
    if not baselines:
        return "above chance (no baseline to compare with)"
    # The best baseline first: the verdict names the strongest one the model does not beat.
    for baseline in sorted(baselines, key=lambda f: -(f.value if f.value is not None else -1.0)):
        above = baseline.detail["difference_low"]
        if above is None or above <= 0:
            return f"no better than {baseline.detail['baseline']}"
    return "better than " + " and ".join(b.detail["baseline"] for b in baselines)


def beats_baselines(figure: dict[str, Any]) -> bool:
    """Whether a model figure's verdict claims it beats its baselines."""
    return str(figure["detail"].get("verdict", "")).startswith("better than")
