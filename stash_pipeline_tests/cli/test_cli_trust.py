"""`rm show`, `rm trust` and `evaluator trust` on a real store (SQLite and PostgreSQL): the seed's
sentence instead of a bare accuracy, every figure with its interval and n, and JSON."""

from __future__ import annotations

from stash_pipeline.cli import main
from stash_pipeline.core.trust import HANDFUL_NOTE
from stash_pipeline.store import Release, TraceScore
from stash_pipeline_tests.support.cli_helpers import cli_store, run_json  # noqa: F401 - the fixture
from stash_pipeline_tests.support.store_samples import trust_sample


def test_rm_show_says_a_handful_instead_of_a_bare_one(cli_store, capsys):
    model_id = trust_sample(cli_store)
    assert main(["rm", "show", model_id, "--owner", "ana"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("eval_accuracy"))
    assert f"1 on 3 held-out pairs (95% interval 0.44 to 1.00). {HANDFUL_NOTE}" in line
    assert "eval_slices" not in out and f"stash-pipeline rm trust {model_id}" in out
    shown = run_json(capsys, "rm", "show", model_id, "--owner", "ana")
    assert shown["held_out"]["note"] == HANDFUL_NOTE and shown["metrics"]["eval_accuracy"] == 1.0


def test_rm_show_says_when_the_scores_barely_separate_anything(cli_store, capsys):
    model_id = trust_sample(cli_store)
    cli_store.save_scores([TraceScore(t, 1, model_id, 0.01 * i, 0.2 + 0.1 * i)
                           for i, t in enumerate("abcdef")])
    assert main(["rm", "show", model_id, "--owner", "ana"]) == 0
    assert "Its raw scores span only 0.05:" in \
        capsys.readouterr().out


def test_rm_trust_prints_each_figure_with_its_interval_and_n(cli_store, capsys):
    model_id = trust_sample(cli_store)
    assert main(["rm", "trust", model_id, "--owner", "ana"]) == 0
    out = capsys.readouterr().out
    assert f"How far to trust personal model {model_id}" in out
    assert f"- 3 held-out pairs: {HANDFUL_NOTE}" in out
    row = next(x.split() for x in out.splitlines() if x.startswith("outcome_auc_trace_score"))
    # One task: no clustered interval can be estimated, so the whole range.
    assert row[:7] == ["outcome_auc_trace_score", "all", "0.500", "0.00", "to", "1.00", "3"]
    assert "Wilson score interval (proportions)" in out
    report = run_json(capsys, "rm", "trust", model_id, "--owner", "ana")
    assert report["traces"]["considered"] == 4 and report["figures"]
    assert main(["rm", "trust", model_id, "--owner", "bob"]) == 2  # not bob's
    assert "no reward model" in capsys.readouterr().err


def test_evaluator_trust_reports_the_current_release_on_the_owners_traces(cli_store, capsys):
    assert main(["evaluator", "trust", "--owner", "ana"]) == 2
    assert "no shared evaluator release yet" in capsys.readouterr().err
    trust_sample(cli_store)
    cli_store.save_release(Release("v1", "file:///r", {"overall": {"pairs": 20,
                                                                   "candidate": 0.9}}, {}))
    report = run_json(capsys, "evaluator", "trust", "--owner", "ana")
    assert report["evaluator"] == "v1" and report["held_out"]["pairs"] == 20
    assert main(["evaluator", "trust", "v1", "--owner", "ana"]) == 0
    out = capsys.readouterr().out
    assert "How far to trust release v1" in out and "held-out accuracy: 0.9 on 20" in out
