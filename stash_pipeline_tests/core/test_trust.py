"""The trust report (core.trust): figures with intervals and n per slice, and its sentences."""

from __future__ import annotations

import random

import pytest

from stash_pipeline.core.clustered import t_quantile
from stash_pipeline.core.estimates import auc, auc_interval, wilson_interval
from stash_pipeline.core.trust import (
    HANDFUL_NOTE,
    OVERALL,
    HeldOutCount,
    StepFacts,
    TraceFacts,
    TrustFacts,
    facts_digest,
    figures_of,
    handful,
    held_out_from_benchmark,
    held_out_from_metrics,
    heldout_note,
    trust_report,
)


def facts(traces=(), **fields) -> TrustFacts:
    return TrustFacts(evaluator="m1", kind="personal", traces=list(traces), **fields)


def figure(report, metric, kind="all", value=""):
    return next(f for f in figures_of(report, metric)
                if (f["slice_kind"], f["slice"]) == (kind, value))


def test_three_right_held_out_pairs_are_a_handful_not_a_bare_one():
    report = trust_report(facts(held_out=[HeldOutCount(*OVERALL, 3, 3)]))
    held = report["held_out"]
    assert held["accuracy"] == 1.0 and held["handful"] and held["note"] == HANDFUL_NOTE
    assert held["interval"] == pytest.approx(list(wilson_interval(3, 3)))
    assert held["interval"][0] < 0.5  # three of three does not rule out chance
    assert report["notes"][0] == f"3 held-out pairs: {HANDFUL_NOTE}"
    accuracy = figure(report, "heldout_accuracy")
    assert (accuracy["value"], accuracy["n"], accuracy["detail"]["correct"]) == (1.0, 3, 3)
    # From the release gate's smallest judged slice on, the sentence goes.
    assert handful(15) and not handful(16) and heldout_note(16) is None
    assert heldout_note(0) is None


def test_no_held_out_pairs_says_why():
    report = trust_report(facts(held_out_unavailable="the held-out traces gave no pairs"))
    assert report["held_out"]["accuracy"] is None
    assert "No held-out accuracy: the held-out traces gave no pairs." in report["notes"]


def test_outcome_auc_per_slice_with_its_interval_and_n():
    traces = [
        TraceFacts("s1", agent="a", domain="air", tools=("book",), succeeded=True, score=2.0,
                   mean_credit=0.5),
        TraceFacts("s2", agent="a", domain="air", tools=("book", "cancel"), succeeded=True,
                   score=0.5, mean_credit=-0.1),
        TraceFacts("f1", agent="a", domain="air", tools=("cancel",), succeeded=False,
                   score=1.0, mean_credit=0.2),
        TraceFacts("f2", agent="b", domain="air", tools=(), succeeded=False, score=-1.0),
        TraceFacts("n1", agent="a", domain="air", score=5.0),  # no outcome: not counted
    ]
    report = trust_report(facts(traces))
    overall = figure(report, "outcome_auc_trace_score")
    assert overall["value"] == auc([2.0, 0.5], [1.0, -1.0]) == 0.75
    # Four traces of no task: four groups, so t with 3 degrees of freedom, no design effect.
    assert (overall["low"], overall["high"]) == pytest.approx(
        auc_interval(0.75, 2, 2, t_quantile(3)))
    assert overall["n"] == 4
    assert overall["detail"] | {"succeeded": 2, "failed": 2, "groups": 4,
                                "design_effect": 1.0} == overall["detail"]
    assert overall["detail"]["verdict"] == "too few tasks (4) to judge"
    # A trace belongs to each tool it calls, to its domain and to its agent.
    cancel = figure(report, "outcome_auc_trace_score", "tool", "cancel")
    assert (cancel["value"], cancel["n"]) == (0.0, 2)  # s2 0.5 below f1 1.0
    only_wins = figure(report, "outcome_auc_trace_score", "tool", "book")
    assert only_wins["value"] is None and only_wins["low"] is None and only_wins["n"] == 2
    assert figure(report, "outcome_auc_trace_score", "agent", "b")["n"] == 1
    # Mean action credit: only traces that have it.
    credit = figure(report, "outcome_auc_mean_action_credit")
    assert credit["value"] == auc([0.5, -0.1], [0.2]) and credit["n"] == 3
    order = [(f["slice_kind"], f["slice"]) for f in figures_of(report, "outcome_auc_trace_score")]
    assert order == [("all", ""), ("tool", "book"), ("tool", "cancel"), ("domain", "air"),
                     ("agent", "a"), ("agent", "b")]


def test_spearman_with_trace_and_step_ratings():
    traces = [TraceFacts(f"t{i}", domain="air", rating=float(i), score=float(i * i),
                         mean_credit=-0.1 * i if i else None)
              for i in range(6)]
    steps = [StepFacts(f"t0/m{i}", rating=float(i), credit=-0.1 * i, tool="book")
             for i in range(5)]
    report = trust_report(facts(traces, steps=steps))
    trace = figure(report, "spearman_trace_rating")
    assert trace["value"] == pytest.approx(1.0) and trace["n"] == 6 and trace["low"] < 1
    credit = figure(report, "spearman_trace_rating_mean_credit")  # t0 has no credit
    assert credit["value"] == pytest.approx(-1.0) and credit["n"] == 5
    step = figure(report, "spearman_step_rating", "tool", "book")
    assert step["value"] == pytest.approx(-1.0) and step["n"] == 5


def test_the_reliability_curve_and_the_sentence_that_it_is_no_probability():
    traces = [TraceFacts(f"t{i}", succeeded=i % 3 != 0, score=0.0, calibrated=c)
              for i, c in enumerate([0.05, 0.08, 0.55, 0.57, 0.59, 0.95])]
    report = trust_report(facts(traces))
    bins = figures_of(report, "success_rate_by_calibrated_score")
    assert [(b["slice"], b["n"], b["detail"]["successes"]) for b in bins] == [
        ("0.0-0.1", 2, 1), ("0.5-0.6", 3, 2), ("0.9-1.0", 1, 1)]
    assert (bins[1]["low"], bins[1]["high"]) == pytest.approx(
        wilson_interval(2, 3, t_quantile(2)))
    assert report["methods"]["proportion"] == "Wilson score interval"


def test_a_model_whose_raw_scores_span_006_barely_separates_anything():
    report = trust_report(facts(raw_scores=[0.01, 0.03, 0.07]))
    separation = report["separation"]
    assert separation["raw_spread"] == pytest.approx(0.06)
    assert separation["preference_at_extremes"] == pytest.approx(0.515, abs=1e-3)
    assert separation["barely_separates"]
    note = next(n for n in report["notes"] if n.startswith("Its raw scores span only 0.06:"))
    # One sentence: what the spread means, and that the ranking is for outcomes to show.
    assert "weak preferences rather than confident ones" in note
    assert "only verified outcomes can show" in note and "mean little" not in note
    wide = trust_report(facts(raw_scores=[-1.0, 1.0]))
    assert not wide["separation"]["barely_separates"]
    assert not any("span only" in n for n in wide["notes"])
    assert trust_report(facts(raw_scores=[1.0]))["separation"] is None
    actions = trust_report(facts(action_raw_range=(0.10, 0.12, 30)))
    assert actions["action_separation"]["barely_separates"]
    assert any("Its raw action rewards span only 0.02" in n for n in actions["notes"])


def test_the_separation_note_says_the_threshold_once_and_a_probability_that_reads_under_it():
    """Issue 52.6: never "probability 0.60 (under 0.6)"."""
    report = trust_report(facts(raw_scores=[0.0, 0.4054]))  # sigma(0.4054) = 0.599984
    [note] = [n for n in report["notes"] if n.startswith("Its raw scores span only")]
    assert "with probability only 0.59998, under 0.6, so " in note and note.count("0.6") == 1
    low = trust_report(facts(raw_scores=[0.01, 0.03, 0.07]))
    assert any("probability only 0.51, under 0.6, so " in n for n in low["notes"])


def test_inputs_cut_to_the_window_are_counted():
    traces = [TraceFacts(f"t{i}", score=0.0, input_tokens=n)
              for i, n in enumerate([400, 2048, 1024, 4096])]
    report = trust_report(facts(traces, window=1024, scored_actions=2, cut_action_tokens=[2000],
                                training_pairs=20, truncated_training_pairs=3))
    cut = figure(report, "truncated_traces")
    assert (cut["value"], cut["n"], cut["detail"]["truncated"]) == (0.5, 4, 2)
    assert cut["detail"]["median_share_read"] == pytest.approx((0.5 + 0.25) / 2)
    assert figure(report, "truncated_actions")["detail"]["truncated"] == 1
    assert ("2 of 4 scored traces were longer than the 1024-token window and lost their "
            "beginning (a median 38% of each was read).") in report["notes"]
    assert "3 of 20 training and held-out pairs had a side longer than the window." \
        in report["notes"]
    assert not figures_of(trust_report(facts(traces)), "truncated_traces")  # no window known


def test_notes_for_missing_outcomes_and_a_release_without_whole_trace_scores():
    assert any(n.startswith("No verified outcome") for n in trust_report(facts())["notes"])
    release = TrustFacts("v1", "shared", [TraceFacts("t", succeeded=True, mean_credit=0.1)])
    assert any("whole-trace scores exist only for traces scored again" in n
               for n in trust_report(release)["notes"])


def test_held_out_counts_from_a_models_metrics_and_a_release_report():
    metrics = {"eval_pairs": 4, "eval_accuracy": 0.75,
               "eval_slices": [{"slice": "tool", "value": "book", "pairs": 2, "correct": 1}]}
    assert held_out_from_metrics(metrics) == [HeldOutCount("all", "", 4, 3),
                                              HeldOutCount("tool", "book", 2, 1)]
    assert held_out_from_metrics({"eval_pairs": 0, "eval_accuracy": None}) == []
    gate = {"overall": {"pairs": 40, "candidate": 0.8},
            "slices": [{"slice": "domain", "value": "air", "pairs": 10, "candidate": 0.7}]}
    assert held_out_from_benchmark(gate) == [HeldOutCount("all", "", 40, 32),
                                             HeldOutCount("domain", "air", 10, 7)]
    assert held_out_from_benchmark({}) == []


def test_the_digest_follows_the_facts():
    base = facts([TraceFacts("t", succeeded=True, score=1.0)])
    assert facts_digest(base) == facts_digest(facts([TraceFacts("t", succeeded=True, score=1.0)]))
    assert facts_digest(base) != facts_digest(facts([TraceFacts("t", succeeded=False,
                                                                score=1.0)]))


def _tasks(score, tasks=40, trials=4, seed=7):
    """Traces of ``tasks`` tasks x ``trials``: short traces succeed (failing agents loop), and
    ``score(rng, succeeded, length)`` is the evaluator's score."""
    rng = random.Random(seed)
    traces = []
    for task in range(tasks):
        hard = rng.random()
        for trial in range(trials):
            length = int(6 + 20 * hard + rng.randint(0, 8))
            succeeded = rng.random() < 1.2 - length / 30
            traces.append(TraceFacts(f"t{task}-{trial}", succeeded=succeeded,
                                     score=score(rng, succeeded, length), group=f"task-{task}",
                                     length=length))
    return traces


def test_a_tiny_random_model_is_labelled_as_not_beating_its_baselines():
    report = trust_report(facts(_tasks(lambda rng, ok, n: rng.gauss(0.0, 1.0)),
                                raw_scores=[0.01, 0.05]))
    verdict = report["verdict"]
    assert not verdict["beats_baselines"] and verdict["judged"]
    assert verdict["label"] in ("not above chance",
                                "no better than the trace-length rule (shorter succeeded)")
    length = figure(report, "baseline_length_auc")
    assert length["value"] > 0.7 and length["detail"]["direction"] == "shorter"
    model = figure(report, "outcome_auc_trace_score")
    assert length["detail"]["model"] == model["value"]
    assert length["detail"]["difference"] == pytest.approx(model["value"] - length["value"])
    assert length["detail"]["difference_high"] < 0  # the length rule is plainly better
    # Its separation sentence and its ranking say one thing.
    note = next(n for n in report["notes"] if n.startswith("Its raw scores span only"))
    assert verdict["label"] in note
    assert report["notes"][0].startswith("Verdict: the AUC of its whole-trace score")


def test_a_model_that_reads_length_is_no_better_than_the_length_rule():
    report = trust_report(facts(_tasks(lambda rng, ok, n: -n + rng.gauss(0.0, 3.0))))
    model = figure(report, "outcome_auc_trace_score")
    assert model["low"] > 0.5  # above chance, and drawn so ...
    assert model["detail"]["verdict"] == \
        "no better than the trace-length rule (shorter succeeded)"  # ... but not better
    assert not report["verdict"]["beats_baselines"]


def test_a_model_that_sees_success_beats_its_baselines_within_tasks_too():
    report = trust_report(facts(_tasks(lambda rng, ok, n: 2.0 * ok + rng.gauss(0.0, 0.3))))
    assert report["verdict"]["beats_baselines"]
    within = figure(report, "within_task_accuracy_trace_score")
    assert within["value"] > 0.9 and within["detail"]["groups"] >= 10
    assert within["detail"]["verdict"].startswith("better than the trace-length rule")
    baseline = figure(report, "baseline_length_within_task")
    assert baseline["detail"]["pairs"] == within["detail"]["pairs"]  # the same pairs


def test_the_length_rules_direction_comes_from_the_traces_it_trained_on():
    traces = _tasks(lambda rng, ok, n: rng.gauss(0.0, 1.0))
    longer = [(30, True), (31, True), (5, False), (6, False)]
    report = trust_report(facts(traces, trained_lengths=longer))
    length = figure(report, "baseline_length_auc")
    assert length["detail"]["direction"] == "longer" and length["value"] < 0.5
    default = figure(trust_report(facts(traces)), "baseline_length_auc")["detail"]
    assert default["direction"] == "shorter" and "by default" in default["direction_from"]


def test_a_slice_of_few_tasks_says_so_instead_of_a_verdict():
    report = trust_report(facts(_tasks(lambda rng, ok, n: 2.0 * ok + rng.gauss(0.0, 0.3),
                                       tasks=6)))
    model = figure(report, "outcome_auc_trace_score")
    assert model["detail"]["too_few_groups"] and model["detail"]["groups"] == 6
    assert model["detail"]["verdict"] == "too few tasks (6) to judge"
    assert not report["verdict"]["judged"] and not report["verdict"]["beats_baselines"]
