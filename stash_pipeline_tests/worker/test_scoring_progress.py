"""Scoring that shows progress and forwards nothing twice (issue 18)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from stash_pipeline.compute.contract import (
    ACTION_SCORES,
    SCORES,
    JobSettings,
    read_jsonl,
    write_job,
)
from stash_pipeline.compute.worker_log import LOG
from stash_pipeline.worker import batching, progress
from stash_pipeline.worker.modeling import tokenize
from stash_pipeline.worker.progress import PhaseProgress
from stash_pipeline.worker.render import render_trace
from stash_pipeline.worker.scoring import score_texts, score_trace_actions, score_traces_and_actions
from stash_pipeline_tests.support.worker_fixtures import model, tokenizer  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow
LINE = re.compile(r"scoring: (\d+)/(\d+) traces, (\d+)/(\d+) actions, [\d.]+ actions/s, "
                  r"(about \d+ s left|time left unknown)")




def test_phase_progress_reports_on_its_interval_with_counts_rate_and_time_left():
    now = [0.0]
    lines: list[str] = []
    reporter = PhaseProgress(lines.append, "scoring", {"traces": 4, "actions": 10}, work=100,
                             interval_s=10, clock=lambda: now[0])
    now[0] = 4.0
    reporter.add(25, traces=1, actions=2)
    assert lines == []  # not yet ten seconds
    now[0] = 10.0
    reporter.add(25, traces=1, actions=3)
    assert lines == ["scoring: 2/4 traces, 5/10 actions, 0.5 actions/s, about 10 s left"]
    now[0] = 15.0
    reporter.add(0)
    assert len(lines) == 1


def test_a_unit_the_run_has_none_of_is_not_counted():
    """An actions-only run (the shared evaluator's auto-scoring) counts actions, not 0/0
    traces."""
    now = [0.0]
    reporter = PhaseProgress(lambda line: None, "scoring", {"traces": 0, "actions": 0}, work=10,
                             clock=lambda: now[0])
    reporter.totals.update(traces=0, actions=8)  # as scoring sets them once it knows
    now[0] = 2.0
    reporter.add(10, actions=8)
    assert reporter.line() == "scoring: 8/8 actions, 4.0 actions/s, about 0 s left"


def test_the_time_left_never_goes_negative_when_the_token_estimate_was_short():
    """Issue 44: "about -180 s left" once the tokens forwarded passed the estimate (sides that
    could not share a prompt); then the share of units done says how far the phase got."""
    now = [0.0]
    lines: list[str] = []
    reporter = PhaseProgress(lines.append, "evaluation", {"pairs": 10}, work=100,
                             interval_s=1, clock=lambda: now[0])
    now[0] = 30.0
    reporter.add(150, pairs=5)  # 1.5 times the estimate, half the pairs
    assert lines[-1] == "evaluation: 5/10 pairs, 0.2 pairs/s, about 30 s left"
    now[0] = 60.0
    reporter.add(100, pairs=5)
    assert lines[-1].endswith("about 0 s left")
    assert PhaseProgress(lines.append, "x", {"pairs": 3}, work=10).line().endswith(
        "time left unknown")


def test_traces_and_actions_in_shared_forwards_equal_scoring_each_alone(model, tokenizer,
                                                                       tau2_sample):
    traces = [replace(t, tools=()) for t in tau2_sample]  # some fit the window, some do not
    whole, actions = score_traces_and_actions(model, tokenizer, traces, "personal")
    alone = score_texts(model, tokenizer, [render_trace(tokenizer, t, "personal") for t in traces])
    assert [whole[t.id] for t in traces] == pytest.approx(alone, abs=1e-4)
    assert actions == pytest.approx(score_trace_actions(model, tokenizer, traces, "personal"),
                                    abs=1e-4)


def test_forwards_are_not_repeated(model, tokenizer, tau2_sample, monkeypatch):
    traces = [replace(t, tools=()) for t in tau2_sample]
    fits = [t for t in traces if len(tokenize(tokenizer, [render_trace(
        tokenizer, t, "personal")])[0]) < tokenizer.model_max_length]
    assert fits
    forwarded: list[int] = []
    real_modules, real_fast = batching.read_rewards, batching.decoder_rewards

    def counting(model, ids, *args):  # the models' own modules
        forwarded.append(ids.shape[0])
        return real_modules(model, ids, *args)

    def counting_fast(model, weights, ids, *args):  # the fast decoder (this Qwen3 model's path)
        forwarded.append(ids.shape[0])
        return real_fast(model, weights, ids, *args)

    monkeypatch.setattr(batching, "read_rewards", counting)
    monkeypatch.setattr(batching, "decoder_rewards", counting_fast)
    score_traces_and_actions(model, tokenizer, fits, "personal", batch_tokens=1)
    with_actions = sum(forwarded)
    assert with_actions > 0
    forwarded.clear()
    score_trace_actions(model, tokenizer, fits, "personal", batch_tokens=1)
    assert with_actions == sum(forwarded)  # whole traces rode along in the actions' rows
    # Whole traces read before (a training job's evaluation) are not forwarded at all.
    known = {tuple(tokenize(tokenizer, [render_trace(tokenizer, t, "personal")])[0]): float(i)
             for i, t in enumerate(fits)}
    forwarded.clear()
    whole, actions = score_traces_and_actions(model, tokenizer, fits, "personal", actions=False,
                                              known=known)
    assert forwarded == [] and actions == {}
    assert [whole[t.id] for t in fits] == [float(i) for i in range(len(fits))]


def test_a_scoring_job_of_sixty_actions_logs_its_progress(tmp_path, tiny_base_model,
                                                        monkeypatch):
    """The training job's evaluation and scoring phases report as they go, in worker.log (the
    same lines go to the Dagster run log through Pipes)."""
    from stash_pipeline.core.pair_builders import build_feedback_pairs
    from stash_pipeline.importers import read_path
    from stash_pipeline.worker.runner import main
    from stash_pipeline_tests.support.tiny_models import AGENTPROCESSBENCH

    records = []
    for record in read_path(AGENTPROCESSBENCH):  # 60 actions: dozens of progress lines
        records.append(record)
        if sum(len(r.trace.actions()) for r in records) >= 60:
            break
    traces = [r.trace for r in records]
    actions = sum(len(t.actions()) for t in traces)
    pairs = build_feedback_pairs(traces[:4], [f for r in records[:4] for f in r.feedback],
                                 "personal")
    job = tmp_path / "job"
    write_job(job, JobSettings(evaluator="m", base_model=str(tiny_base_model)),
              train_pairs=pairs, score_traces=traces)
    monkeypatch.setattr(progress, "PROGRESS_INTERVAL_S", 0.0)  # every forward reports
    assert main(str(job)) == 0
    lines = (job / LOG).read_text().splitlines()
    evaluation = [line for line in lines if "evaluation: " in line]
    assert f"evaluation: {len(pairs)}/{len(pairs)} pairs" in evaluation[-1]
    found = [tuple(map(int, m.groups()[:4])) for m in map(LINE.search, lines) if m]
    assert len(found) >= 3
    assert found[-1] == (len(traces), len(traces), actions, actions)
    assert [f[2] for f in found] == sorted(f[2] for f in found)  # counts only grow
    assert {(f[1], f[3]) for f in found} == {(len(traces), actions)}
    assert len(read_jsonl(job / SCORES)) == len(traces)
    assert len(read_jsonl(job / ACTION_SCORES)) == actions
