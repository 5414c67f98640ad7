"""The release gate: overall, per slice, the first release, and the interval that sizes
tolerance."""

from __future__ import annotations

import pytest

from stash_pipeline.core.estimates import wilson_interval
from stash_pipeline.core.release_gate import (
    BenchmarkOutcome,
    min_slice_pairs,
    release_gate,
    slice_keys,
)


def outcomes(tool: str, n: int, candidate: int, incumbent: int | None,
             domain: str = "airline") -> list[BenchmarkOutcome]:
    """``n`` pairs on one tool: the first ``candidate`` right for the candidate, the first
    ``incumbent`` right for the incumbent."""
    return [BenchmarkOutcome(f"{tool}-{i}", {"tool": tool, "domain": domain, "agent": None},
                             candidate=i < candidate,
                             incumbent=None if incumbent is None else i < incumbent)
            for i in range(n)]


def gate(rows, incumbent="v1", reviewed=5, scores_actions=True):
    return release_gate(rows, incumbent=incumbent, reviewed_training_pairs=reviewed,
                        scores_actions=scores_actions)


def slice_row(report, kind, value):
    return next(r for r in report["slices"] if (r["slice"], r["value"]) == (kind, value))


def test_the_wilson_interval_matches_its_formula_and_narrows_with_size():
    low, high = wilson_interval(14, 20)
    assert (low, high) == pytest.approx((0.4810, 0.8545), abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(3, 3)[1] == 1.0 and wilson_interval(0, 3)[0] == 0.0
    widths = [wilson_interval(n // 2, n)[1] - wilson_interval(n // 2, n)[0]
              for n in (10, 40, 160)]
    assert widths[0] > widths[1] > widths[2]
    # A slice is judged from the size where that width at 50% is at most +/-0.25.
    assert min_slice_pairs() == 16
    low, high = wilson_interval(8, 16)
    assert high - 0.5 <= 0.25 + 1e-9


def test_a_comparison_belongs_to_each_tool_its_sides_call_and_to_its_domain_and_agent():
    slices = {"tool": None, "domain": "airline", "agent": "support"}
    assert slice_keys(slices, ("book", "cancel")) == [
        ("tool", "book"), ("tool", "cancel"), ("domain", "airline"), ("agent", "support")]
    assert slice_keys({"tool": "book", "domain": None, "agent": None}) == [("tool", "book")]


def test_a_first_release_needs_reviewed_data_a_benchmark_and_accuracy_above_chance():
    good = outcomes("search", 10, 9, None)
    report = gate(good, incumbent=None)
    assert report["passed"] and report["first_release"] and report["reasons"] == []
    assert report["overall"]["decision"] == "above chance"
    assert {r["decision"] for r in report["slices"]} == {"not compared (first release)"}

    assert not gate([], incumbent=None)["passed"]
    assert "benchmark is empty" in gate([], incumbent=None)["reasons"][0]
    unreviewed = gate(good, incumbent=None, reviewed=0)
    assert not unreviewed["passed"] and "reviewed training data" in unreviewed["reasons"][0]
    # 6 of 10 is better than a coin, but not beyond noise: its interval starts at 0.31.
    chance = gate(outcomes("search", 10, 6, None), incumbent=None)
    assert not chance["passed"] and "not above chance" in chance["reasons"][0]


def test_the_candidate_must_beat_the_incumbent_overall():
    tie = gate(outcomes("search", 40, 30, 30))
    assert not tie["passed"] and "does not beat the incumbent v1" in tie["reasons"][0]
    better = gate(outcomes("search", 40, 31, 30))
    assert better["passed"] and better["overall"]["decision"] == "beats the incumbent"
    assert (better["overall"]["candidate"], better["overall"]["incumbent"]) == (31 / 40, 30 / 40)


def test_a_populated_slice_regression_blocks_a_candidate_that_wins_overall():
    rows = outcomes("search", 60, 60, 20) + outcomes("cancel", 30, 5, 30, domain="retail")
    report = gate(rows)
    assert report["overall"]["candidate"] > report["overall"]["incumbent"]
    assert not report["passed"]
    cancel = slice_row(report, "tool", "cancel")
    assert cancel["decision"] == "regression" and cancel["populated"]
    assert cancel["incumbent"] > cancel["candidate_high"]
    assert any("regression on tool 'cancel'" in r for r in report["reasons"])
    assert any("regression on domain 'retail'" in r for r in report["reasons"])
    assert slice_row(report, "tool", "search")["decision"] == "ok"


def test_noise_in_a_small_slice_neither_blocks_nor_waves_a_real_drop_through():
    # The same 10-point drop (90% -> 80%): within noise on 20 pairs, a regression on 100.
    small = gate(outcomes("search", 100, 100, 50) + outcomes("cancel", 20, 16, 18))
    assert small["passed"], small["reasons"]
    assert slice_row(small, "tool", "cancel")["decision"] == "within noise"
    large = gate(outcomes("search", 200, 200, 100) + outcomes("cancel", 100, 80, 90))
    assert not large["passed"]
    assert slice_row(large, "tool", "cancel")["decision"] == "regression"
    assert slice_row(large, "tool", "cancel")["tolerance"] < slice_row(
        small, "tool", "cancel")["tolerance"]
    # Below the populated size even an all-wrong slice is not judged.
    tiny = gate(outcomes("search", 40, 40, 20) + outcomes("cancel", 4, 0, 4))
    assert tiny["passed"], tiny["reasons"]
    assert slice_row(tiny, "tool", "cancel")["decision"] == "too small to judge"
    assert not slice_row(tiny, "tool", "cancel")["populated"]


def test_a_candidate_that_scores_no_actions_is_never_released():
    report = gate(outcomes("search", 40, 40, 20), scores_actions=False)
    assert not report["passed"] and "scores no actions" in report["reasons"][0]


def test_every_outcome_needs_the_incumbents_result_when_there_is_one():
    with pytest.raises(ValueError, match="incumbent's result"):
        gate(outcomes("search", 3, 3, None))


def test_a_comparison_counts_in_the_slice_of_each_tool_its_sides_call():
    # 20 comparisons of get_order against cancel_order: both tool slices are populated, and
    # the candidate's drop shows in both even though no comparison "agrees" on one tool.
    rows = [BenchmarkOutcome(f"x{i}", {"tool": None, "domain": "airline", "agent": None},
                             candidate=i < 8, incumbent=i < 19,
                             tools=("cancel_order", "get_order")) for i in range(20)]
    rows += outcomes("search", 200, candidate=200, incumbent=150)  # wins overall
    report = gate(rows)
    for tool in ("get_order", "cancel_order"):
        row = slice_row(report, "tool", tool)
        assert row["pairs"] == 20 and row["populated"] and row["decision"] == "regression"
    assert not report["passed"]
    assert any("regression on tool 'get_order'" in r for r in report["reasons"])


def test_pair_tools_are_every_tool_either_side_calls():
    from stash_pipeline.core.pair_builders import pair_tools
    from stash_pipeline.core.pairs import Pair, PairSide
    from stash_pipeline.core.traces import Message, ToolCall, Trace

    calls = Trace("t", (Message("user", "q"), Message("assistant", "", tool_calls=(
        ToolCall("c1", "get_order", {}), ToolCall("c2", "cancel_order", {})))))
    text = Trace("u", (Message("user", "q"), Message("assistant", "No.")))
    one_call = calls.with_messages(calls.messages[:1] + (
        Message("assistant", "", tool_calls=calls.messages[1].tool_calls[:1]),))

    def pair(chosen, rejected):
        return Pair("p", "action", chosen, rejected, "reviewed_comparison", "s", ("t", "u"))

    assert pair_tools(pair(PairSide(one_call, "t/m1.call0"), PairSide(text, "u/m1"))) == (
        "get_order",)
    assert pair_tools(pair(PairSide(calls, "t/m1.call1"), PairSide(one_call, "t/m1.call0"))) == (
        "cancel_order", "get_order")
    assert pair_tools(pair(PairSide(calls), PairSide(text))) == ("cancel_order", "get_order")


def test_a_saturated_benchmark_is_reported_with_what_to_add():
    rows = outcomes("search", 40, candidate=40, incumbent=40)
    report = gate(rows)
    assert report["saturated"] and not report["passed"]
    assert report["overall"]["decision"] == "does not beat the incumbent"  # the rule stands
    (saturation,) = [r for r in report["reasons"] if "saturated" in r]
    assert "right on all 40 benchmark pairs" in saturation and "tool 'search'" in saturation
    assert "add independently reviewed comparisons or verified outcomes" in saturation
    assert not gate(outcomes("search", 40, candidate=40, incumbent=39))["saturated"]
    assert not gate(rows, incumbent=None)["saturated"]
