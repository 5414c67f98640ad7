"""Every chunk bounded (issue 54 item 4): a scoring job with a work budget scores its traces in
groups and starts no group once the budget is spent (the first group always), writes only the
traces it finished, whole, and lists them; the caller stores those and leaves the rest queued."""

from __future__ import annotations

import json

import pytest
import torch

from stash_pipeline.compute.contract import (
    ACTION_SCORES,
    FINISHED,
    SCORES,
    JobSettings,
    read_jsonl,
    write_job,
)
from stash_pipeline.compute.worker_log import failure_reason
from stash_pipeline.core.calibration import RewardStats
from stash_pipeline.core.errors import InputError
from stash_pipeline.pipelines.worker_io import read_results
from stash_pipeline.worker.modeling import load_reward_model, load_tokenizer
from stash_pipeline.worker.scoring import (
    FIRST_GROUP,
    WorkBudget,
    score_traces_and_actions,
    score_within_budget,
)
from stash_pipeline_tests.support.tiny_models import write_checkpoint
from stash_pipeline_tests.worker.conftest import synthetic_trace

pytestmark = pytest.mark.slow
TRACES = [synthetic_trace(i) for i in range(11)]


@pytest.fixture(scope="module")
def trained(pipeline_base_model):
    tokenizer = load_tokenizer(str(pipeline_base_model))
    model = load_reward_model(str(pipeline_base_model), device="cpu", tokenizer=tokenizer)
    torch.manual_seed(3)
    with torch.no_grad():
        model.score.weight.normal_(0.0, 1.0)
    return model, tokenizer


class Ticks:
    """A clock that moves one second each time it is read: the groups' sizes follow from the
    reads, never from how fast this machine is."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_groups_stop_once_the_budget_is_spent_and_score_as_one_call(trained):
    model, tokenizer = trained
    whole, actions = score_traces_and_actions(model, tokenizer, TRACES, "personal")
    # A budget spent before the first group ends: that group only.
    spent = score_within_budget(model, tokenizer, TRACES, "personal",
                                WorkBudget(1e-9, 0.0, Ticks()))
    assert [t.id for t in spent.finished] == [t.id for t in TRACES[:FIRST_GROUP]]
    assert set(spent.whole) == {t.id for t in spent.finished}
    assert set(spent.actions) == {a.id for t in spent.finished for a in t.actions()}
    # A budget of many reads: several groups, every trace, the same numbers as one call.
    ample = score_within_budget(model, tokenizer, TRACES, "personal",
                                WorkBudget(10_000.0, 0.0, Ticks()))
    assert [t.id for t in ample.finished] == [t.id for t in TRACES]
    for got, expected in ((ample.whole, whole), (ample.actions, actions)):
        assert got.keys() == expected.keys()
        assert all(got[k] == pytest.approx(expected[k], abs=1e-5) for k in expected)


def test_a_budgeted_job_writes_and_lists_only_the_traces_it_finished(trained, tmp_path, caplog):
    from stash_pipeline.worker.runner import main

    model, tokenizer = trained
    write_checkpoint(model, tokenizer, tmp_path / "reward-model", audience="personal",
                     reward_stats=RewardStats(0.0, 1.0, 4),
                     action_reward_stats=RewardStats(0.0, 1.0, 4))
    job_dir = tmp_path / "job"
    # A budget no group fits in: the job stops after its first group, whatever the machine.
    write_job(job_dir, JobSettings(evaluator="m", checkpoint=str(tmp_path / "reward-model"),
                                   outputs=("scores", "action_scores"), work_seconds=1e-6),
              score_traces=TRACES)
    with caplog.at_level("INFO", logger="stash_pipeline.worker"):
        assert main(str(job_dir)) == 0, failure_reason(job_dir)
    first = TRACES[:FIRST_GROUP]
    assert [(r["trace_id"], r["trace_version"]) for r in read_jsonl(job_dir / FINISHED)] == \
        [(t.id, t.version) for t in first]
    assert [r["trace_id"] for r in read_jsonl(job_dir / SCORES)] == [t.id for t in first]
    assert {r["action_id"] for r in read_jsonl(job_dir / ACTION_SCORES)} == \
        {a.id for t in first for a in t.actions()}
    metrics = json.loads((job_dir / "metrics.json").read_text())
    assert metrics["unfinished_traces"] == len(TRACES) - FIRST_GROUP
    said = (f"stopped after {FIRST_GROUP} of {len(TRACES)} traces: the chunk's 1e-06 s budget; "
            "the rest stay queued")
    assert said in caplog.text and said in (job_dir / "worker.log").read_text()
    # The caller reads and marks only those, though it gave the job every trace.
    results = read_results(job_dir, "m", scored={t.id: t.version for t in TRACES})
    assert results.finished == {t.id: t.version for t in first}
    assert results.scored == results.finished
    assert {s.trace_id for s in results.scores} == set(results.finished)
    assert {s.trace_id for s in results.action_scores} == set(results.finished)


def test_only_a_scoring_job_takes_a_positive_budget():
    base = {"evaluator": "m", "checkpoint": "c.tar.gz", "outputs": ["scores"]}
    assert JobSettings.from_dict({**base, "work_seconds": 30}).work_seconds == 30
    for bad in (0, -1, True, "30"):
        with pytest.raises(InputError, match="work_seconds"):
            JobSettings.from_dict({**base, "work_seconds": bad})
    with pytest.raises(InputError, match="only a scoring-only job has a work budget"):
        JobSettings.from_dict({"evaluator": "m", "base_model": "b", "work_seconds": 30})
    # Settings without one read as before budgets: a worker of an older release reads them.
    assert "work_seconds" not in JobSettings(evaluator="m", checkpoint="c.tar.gz").to_dict()
