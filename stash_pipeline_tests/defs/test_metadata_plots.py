"""Dagster metadata draws real plots: SVG images in Markdown, and the phases as a table."""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ElementTree

from stash_pipeline.core import plots
from stash_pipeline.core.trust import (
    HANDFUL_NOTE,
    TraceFacts,
    TrustFacts,
    held_out_report,
    trust_report,
)
from stash_pipeline.defs import metadata

SVG = "{http://www.w3.org/2000/svg}"


def svg_of(markdown: str) -> ElementTree.Element:
    found = re.match(r"!\[plot\]\(data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)\)", markdown)
    assert found, markdown[:80]
    return ElementTree.fromstring(base64.b64decode(found.group(1)))


def test_loss_curve_is_a_plotted_line_with_its_numbers():
    losses = [0.7 - 0.001 * i for i in range(500)]
    markdown = metadata.loss_curve(losses).value
    svg = svg_of(markdown)
    line = svg.find(f"{SVG}polyline")
    assert line is not None and line.get("stroke") and line.get("fill") == "none"
    assert len(line.get("points").split()) == 167  # 500 steps in means of 3
    assert "500 steps, loss 0.7000 at the first step, 0.2010 at the last" in markdown
    assert metadata.loss_curve([]).value == "no training steps"


def test_histogram_draws_a_bar_per_filled_bin():
    markdown = metadata.histogram([0.0, 0.0, 1.0, 2.0], title="Scores", x_label="raw").value
    bars = svg_of(markdown).findall(f"{SVG}rect[@class='plot-bar']")
    assert len(bars) == 3 and all(b.get("fill") for b in bars)
    heights = sorted(float(b.get("height")) for b in bars)
    assert heights[-1] == 2 * heights[0]  # two values in the first bin, one in the others
    assert "4 values from 0 to 2" in markdown


def test_phases_are_a_table():
    markdown = metadata.phases({"load": 1.25, "training": 4.5}).value
    assert markdown.splitlines() == ["| phase | seconds |", "|---|---|", "| load | 1.25 |",
                                     "| training | 4.5 |"]
    shown = metadata.training("file:///x", {"phases": {"load": 1.0}, "final_loss": 0.5,
                                            "loss_curve": [0.6, 0.5]}, [0.6, 0.5])
    assert "phases" not in shown["metrics"].value and "loss_curve" not in shown["metrics"].value
    assert "| load | 1 |" in shown["phases"].value


def test_labels_are_escaped_and_nothing_is_drawn_from_nothing():
    svg = plots.histogram([1.0], title="<script>alert(1)</script>", x_label="a & b")
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "a &amp; b" in svg
    ElementTree.fromstring(svg)
    assert plots.line_plot([float("nan")], title="t", x_label="x") is None
    assert plots.histogram([], title="t", x_label="x") is None


def test_a_trust_report_shows_its_sentences_figures_and_charts():
    report = held_out_report("m1", "personal", {"eval_pairs": 3, "eval_accuracy": 1.0,
                                                 "max_length": 512, "num_pairs": 9,
                                                 "truncated_pairs": 2})
    shown = metadata.trust(report)
    assert HANDFUL_NOTE in shown["trust"].value and "Wilson" in shown["trust"].value
    assert "2 of 9 training and held-out pairs had a side longer" in shown["trust"].value
    assert shown["trust_figures"].value.splitlines()[2].startswith("| heldout_accuracy | all |")
    assert shown["heldout_accuracy"] == 1.0 and shown["heldout_accuracy_n"] == 3
    chart = svg_of(shown["trust_chart_heldout_accuracy"].value)
    [interval] = chart.findall(f"{SVG}g[@class='plot-interval']")
    assert "all: 1.000 (95% 0.439 to 1.000), n 3" == interval.find(f"{SVG}title").text
    # A model with verified outcomes gets its reliability curve, one point per filled bin.
    facts = TrustFacts("m1", "personal", [TraceFacts(f"t{i}", succeeded=i % 2 == 0, score=0.0,
                                                     calibrated=i / 10) for i in range(10)])
    curve = svg_of(metadata.trust(trust_report(facts))[
        "trust_chart_success_rate_by_calibrated_score"].value)
    assert len(curve.findall(f"{SVG}g[@class='plot-bin']")) == 10
    # Its verdict, and the length baseline beside its AUC, as the report has them.
    facts = TrustFacts("m1", "personal", [TraceFacts(f"t{i}", succeeded=i % 2 == 0, score=0.0,
                                                     group=f"task-{i % 4}", length=10 + i)
                                          for i in range(10)])
    shown = metadata.trust(trust_report(facts))
    assert shown["trust_verdict"].value == "too few tasks (4) to judge"
    assert "Task-clustered" in shown["trust"].value
    assert shown["baseline_length_auc_n"] == shown["outcome_auc_trace_score_n"] == 10
