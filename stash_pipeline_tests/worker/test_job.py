"""The job directory contract end to end on the tiny model: train, score, checkpoint, failures."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from stash_pipeline.compute.contract import (
    JobSettings,
    read_jsonl,
    read_metrics,
    read_settings,
    write_job,
)
from stash_pipeline.compute.worker_log import failure_reason, phase_seconds
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.pairs import PairSide
from stash_pipeline.worker.runner import main
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, bound

REPO = Path(__file__).resolve().parents[2]
METRIC_FIELDS = {
    "train_pairs", "eval_pairs", "eval_accuracy", "action_scoring_version", "action_train_pairs",
    "action_eval_pairs", "action_eval_accuracy", "tool_eval_pairs", "tool_eval_accuracy",
    "excluded_cross_trace_pairs", "final_loss", "epochs", "device", "seconds", "attempt", "phases",
    "num_pairs", "eval_unavailable_reason", "max_length", "chat_template", "loss_curve",
    "truncated_pairs", "eval_slices", "truncated_traces", "truncated_actions",
}
TRAINING_PHASES = {"inputs", "load", "untrained", "training", "save", "evaluation", "archive",
                   "scoring"}


@pytest.fixture(scope="module")
def trained_job(tmp_path_factory, tiny_base_model, synthetic_pairs, tau2_sample):
    job_dir = tmp_path_factory.mktemp("job")
    settings = JobSettings(evaluator="model-1", base_model=str(tiny_base_model), epochs=2,
                           excluded_cross_trace_pairs=3)
    score_traces = [p.chosen.trace for p in synthetic_pairs(900, 2)] + tau2_sample[:1]
    write_job(job_dir, settings, train_pairs=synthetic_pairs(0, 10),
              eval_pairs=synthetic_pairs(100, 4), score_traces=score_traces)
    assert main(str(job_dir)) == 0, failure_reason(job_dir)
    return job_dir, score_traces


@pytest.mark.slow
def test_the_model_card_names_its_model_data_and_window_and_its_recipe_scores(trained_job,
                                                                             tiny_base_model):
    """README.md: the base model, the data counts and metrics of this job, the window; and its
    plain-transformers recipe gives the raw reward the worker stored (within float noise)."""
    import re

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from stash_pipeline.worker.render import message_dicts

    job_dir, score_traces = trained_job
    metrics = json.loads((job_dir / "metrics.json").read_text())
    card = (job_dir / "reward-model" / "README.md").read_text()
    assert f"`.../{tiny_base_model.name}`" in card and "# Reward model `model-1`" in card
    # Nothing a user downloads names a server path: not the card, not the configs.
    for file in (job_dir / "reward-model").iterdir():
        if file.suffix in (".json", ".md", ".jinja", ".txt"):
            assert str(tiny_base_model.parent) not in file.read_text(errors="replace"), file.name
    assert f"| training pairs | {metrics['train_pairs']} |" in card
    assert f"| held-out pairs | {metrics['eval_pairs']} |" in card
    assert "| excluded: spanning both partitions | 3 |" in card
    assert f"| held-out accuracy (0.5 is chance) | {metrics['eval_accuracy']:.4f} |" in card
    window = int(re.search(r"At most (\d+) tokens", card).group(1))
    recipe = re.search(r"```python\n(.*?)```", card, re.S).group(1)
    assert "apply_chat_template" in recipe and f"max_length={window}" in recipe
    # The recipe's steps on a trace the job scored, with its own messages and tools.
    path = job_dir / "reward-model"
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
    trace = score_traces[0]
    text = tokenizer.apply_chat_template(message_dicts(trace, "personal"),
                                         tools=list(trace.tools) or None, tokenize=False)
    inputs = tokenizer(text, return_tensors="pt", truncation=True, max_length=window)
    with torch.no_grad():
        raw = model(**inputs).logits[0, 0].item()
    stored = next(s for s in read_jsonl(job_dir / "scores.jsonl") if s["trace_id"] == trace.id)
    assert raw == pytest.approx(stored["score"], abs=1e-3)


@pytest.mark.slow
def test_training_job_writes_every_output(trained_job):
    job_dir, score_traces = trained_job
    metrics = json.loads((job_dir / "metrics.json").read_text())
    assert set(metrics) == METRIC_FIELDS
    assert metrics["train_pairs"] == 10 and metrics["eval_pairs"] == 4
    assert metrics["num_pairs"] == 14 and metrics["eval_unavailable_reason"] is None
    assert metrics["max_length"] == 1024 and metrics["chat_template"] == "chatml-think"
    assert metrics["action_scoring_version"] == 1 and metrics["action_train_pairs"] == 10
    assert metrics["action_eval_pairs"] == 4 and metrics["tool_eval_pairs"] == 4
    assert 0 <= metrics["eval_accuracy"] <= 1
    assert metrics["excluded_cross_trace_pairs"] == 3 and metrics["epochs"] == 2
    assert metrics["device"] in ("cpu", "cuda", "mps") and metrics["seconds"] > 0
    assert metrics["final_loss"] > 0

    scores = read_jsonl(job_dir / "scores.jsonl")
    assert [s["trace_id"] for s in scores] == [t.id for t in score_traces]
    assert {s["evaluator"] for s in scores} == {"model-1"}
    action_scores = read_jsonl(job_dir / "action_scores.jsonl")
    assert [a["action_id"] for a in action_scores] == [a.id for t in score_traces
                                                       for a in t.actions()]
    assert all(-1 < a["credit"] < 1 for a in action_scores)
    # Inputs longer than the window are counted: the tau2 trace (over 1,500 tokens) and those of
    # its actions whose own rendering is; the short synthetic pairs fit.
    window = metrics["max_length"]
    assert [s["input_tokens"] > window for s in scores] == [False, False, True]
    assert metrics["truncated_traces"] == 1 and metrics["truncated_pairs"] == 0
    assert metrics["truncated_actions"] == sum(a["input_tokens"] > window
                                               for a in action_scores) > 0
    # Held-out pairs per slice: the two whose sides call the tool (the fixture's refusals store
    # no slices), with how many were right.
    [tool] = metrics["eval_slices"]
    assert (tool["slice"], tool["value"], tool["pairs"]) == ("tool", "search_direct_flight", 2)
    assert 0 <= tool["correct"] <= 2

    assert sorted(p.name for p in (job_dir / "reward-model").iterdir()) == sorted([
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
        "chat_template.jinja", "reward_stats.json", "action_reward_stats.json", "README.md"])
    with tarfile.open(job_dir / "reward-model.tar.gz") as tar:
        assert {Path(n).parts[0] for n in tar.getnames()} == {"reward-model"}
        assert "reward-model/README.md" in tar.getnames()
    log = (job_dir / "worker.log").read_text()
    assert "step 6/6 loss" in log and "metrics:" in log
    # Every phase in the log with its duration, and the same seconds in the metrics.
    assert set(phase_seconds(log)) == set(metrics["phases"]) == TRAINING_PHASES
    assert metrics["phases"] == pytest.approx(phase_seconds(log), abs=0.01)
    assert metrics["attempt"] == read_settings(job_dir).attempt and read_metrics(job_dir) == metrics
    assert all(0 < s["calibrated"] < 1 for s in scores)
    # The trust report's baseline: the base with its fresh head, before any step, on each trace.
    assert all(isinstance(s["untrained"], float) for s in scores)
    assert [s["untrained"] for s in scores] != [s["score"] for s in scores]


@pytest.mark.slow
def test_scoring_job_from_the_archive_gives_identical_scores(trained_job, tmp_path):
    job_dir, score_traces = trained_job
    settings = JobSettings(evaluator="model-1", checkpoint=str(job_dir / "reward-model.tar.gz"),
                           outputs=("scores", "action_scores"))
    write_job(tmp_path, settings, score_traces=score_traces)
    assert main(str(tmp_path)) == 0, failure_reason(tmp_path)
    for name, key in (("scores.jsonl", "score"), ("action_scores.jsonl", "raw_reward")):
        trained = [row[key] for row in read_jsonl(job_dir / name)]
        reloaded = [row[key] for row in read_jsonl(tmp_path / name)]
        assert reloaded == pytest.approx(trained, abs=1e-6)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert (metrics["scored_traces"] == 3
            and metrics["scored_actions"] == len(read_jsonl(tmp_path / "action_scores.jsonl")))
    assert (metrics["audience"] == "personal"
            and set(metrics["phases"]) == {"load", "inputs", "scoring"})
    calibrated = [row["calibrated"] for row in read_jsonl(job_dir / "scores.jsonl")]
    assert [row["calibrated"] for row in read_jsonl(tmp_path / "scores.jsonl")] == \
        pytest.approx(calibrated, abs=1e-6)


@pytest.mark.slow
def test_bf16_asked_for_on_a_device_without_it_scores_in_fp32_and_says_so(trained_job, tmp_path,
                                                                         monkeypatch):
    """The fallback itself, on every machine: the device is made to report no bf16 (as a CPU
    without AVX512-BF16 or AMX does); the job scores exactly as fp32 and its log names the
    reason."""
    from stash_pipeline.worker import modeling

    monkeypatch.setattr(modeling, "supports_bf16", lambda device: False)
    job_dir, score_traces = trained_job
    write_job(tmp_path,
              JobSettings(evaluator="model-1", score_dtype="bfloat16", outputs=("scores",),
                                    checkpoint=str(job_dir / "reward-model.tar.gz")),
              score_traces=score_traces)
    assert main(str(tmp_path)) == 0, failure_reason(tmp_path)
    trained = [row["score"] for row in read_jsonl(job_dir / "scores.jsonl")]
    assert [row["score"] for row in read_jsonl(tmp_path / "scores.jsonl")] == \
        pytest.approx(trained, abs=1e-6)
    log = (tmp_path / "worker.log").read_text()
    assert ("score_dtype bfloat16 asks for bfloat16 but device cpu has no bf16 support "
            "(torch.ops.mkldnn._is_mkldnn_bf16_supported() is False: the CPU lacks AVX512-BF16 and "
            "AMX): scores computed in float32") in log


@pytest.mark.slow
def test_benchmark_pairs_get_the_rewards_their_held_out_twins_get(trained_job, tmp_path,
                                                                  synthetic_pairs):
    """pair_rewards.jsonl scores each side as training renders it: a benchmark pair scored by a
    scoring-only job agrees with the held-out accuracy the training job computed on the same
    pairs."""
    job_dir, _ = trained_job
    settings = JobSettings(evaluator="model-1", checkpoint=str(job_dir / "reward-model.tar.gz"),
                           outputs=("pair_rewards",))
    benchmark = synthetic_pairs(100, 4)  # the training job's eval pairs
    write_job(tmp_path, settings, benchmark_pairs=benchmark)
    assert main(str(tmp_path)) == 0, failure_reason(tmp_path)
    rows = read_jsonl(tmp_path / "pair_rewards.jsonl")
    assert [row["pair_id"] for row in rows] == [p.id for p in benchmark]
    accuracy = sum(row["chosen"] > row["rejected"] for row in rows) / len(rows)
    trained = json.loads((job_dir / "metrics.json").read_text())
    assert accuracy == trained["eval_accuracy"]
    assert json.loads((tmp_path / "metrics.json").read_text())["scored_pairs"] == 4
    assert not (tmp_path / "scores.jsonl").exists()


def test_a_bad_pair_fails_the_job_with_the_record_and_field_last_in_the_log(tmp_path,
                                                                            tiny_base_model,
                                                                          synthetic_pairs):
    write_job(tmp_path, JobSettings(evaluator="m", base_model=str(tiny_base_model)),
              train_pairs=synthetic_pairs(0, 3))
    lines = (tmp_path / "train_pairs.jsonl").read_text().splitlines()
    broken = json.loads(lines[1])
    del broken["chosen"]["trace"]["messages"]
    (tmp_path / "train_pairs.jsonl").write_text("\n".join([lines[0], json.dumps(broken), lines[2]])
                                                + "\n")
    assert main(str(tmp_path)) == 1
    last = (tmp_path / "worker.log").read_text().rstrip().splitlines()[-1]
    assert "InputError" in last and "record 1" in last and "train_pairs" in last
    assert last.startswith("job failed in phase inputs: ")
    assert not (tmp_path / "metrics.json").exists()


@pytest.mark.slow
def test_two_pairs_split_one_and_one_train_and_evaluate(tmp_path, tiny_base_model, synthetic_pairs):
    write_job(tmp_path, JobSettings(evaluator="m", base_model=str(tiny_base_model),
                                    outputs=("checkpoint", "scores")),
              train_pairs=synthetic_pairs(0, 1), eval_pairs=synthetic_pairs(50, 1))
    assert main(str(tmp_path)) == 0, failure_reason(tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert (metrics["train_pairs"], metrics["eval_pairs"]) == (1, 1)
    assert metrics["eval_accuracy"] in (0.0, 1.0)


@pytest.mark.slow
def test_without_held_out_pairs_evaluation_is_unavailable(tmp_path, tiny_base_model,
                                                          synthetic_pairs):
    write_job(tmp_path, JobSettings(evaluator="m", base_model=str(tiny_base_model),
                                    outputs=("checkpoint",)),
              train_pairs=synthetic_pairs(0, 3))
    assert main(str(tmp_path)) == 0, failure_reason(tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert (metrics["train_pairs"], metrics["eval_pairs"], metrics["eval_accuracy"]) == (3, 0, None)


def test_fewer_than_two_pairs_fail_before_the_model_loads(tmp_path, tiny_base_model,
                                                           synthetic_pairs, monkeypatch):
    from stash_pipeline.worker import procedures

    def no_download(*args, **kwargs):
        raise AssertionError("the base model was loaded")

    monkeypatch.setattr(procedures, "load_reward_model", no_download)
    write_job(tmp_path, JobSettings(evaluator="m", base_model=str(tiny_base_model)),
              train_pairs=synthetic_pairs(0, 1))
    assert main(str(tmp_path)) == 1
    last = (tmp_path / "worker.log").read_text().rstrip().splitlines()[-1]
    assert "NotEnoughPairsError" in last and "at least 2 usable pairs, found 1" in last


def test_the_module_entry_point_exits_non_zero_with_the_reason(tmp_path):
    (tmp_path / "settings.json").write_text(json.dumps({"evaluator": "m", "base_model": "x",
                                                        "epochs": 0}))
    done = subprocess.run([sys.executable, "-m", "stash_pipeline.worker", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=bound(PROCESS_EXIT_S))
    assert done.returncode == 1
    assert failure_reason(tmp_path).rstrip().endswith(
        "InputError: file settings.json, field 'epochs': expected an integer of at least 1, got 0")


@pytest.mark.parametrize("data, field", [
    ({"base_model": "b"}, "evaluator"),
    ({"evaluator": "m"}, "base_model"),
    ({"evaluator": "m", "base_model": "b", "checkpoint": "c"}, "base_model"),
    ({"evaluator": "m", "base_model": "b", "audience": "public"}, "audience"),
    ({"evaluator": "m", "base_model": "b", "compute": "modal"}, "compute"),
    ({"evaluator": "m", "checkpoint": "c", "outputs": ["checkpoint"]}, "outputs"),
    ({"evaluator": "m", "base_model": "b", "epochs": True}, "epochs"),
    ({"evaluator": "m", "base_model": "b", "checkpoint_dtype": "int8"}, "checkpoint_dtype"),
    ({"evaluator": "m", "base_model": "b", "score_dtype": "float16"}, "score_dtype"),
    ({"evaluator": "m", "base_model": "b", "attempt": ""}, "attempt"),
])
def test_settings_errors_name_the_field(data, field):
    with pytest.raises(InputError) as raised:
        JobSettings.from_dict(data)
    assert raised.value.field == field and raised.value.file == "settings.json"


def test_settings_round_trip(tmp_path):
    settings = JobSettings(evaluator="release-3", audience="shared", base_model="Qwen/Qwen3-0.6B",
                           epochs=2, checkpoint_dtype="float32", score_dtype="bfloat16")
    written = write_job(tmp_path, settings)
    assert written.attempt and written == JobSettings(**{**settings.to_dict(),
                                                         "outputs": settings.outputs,
                                                         "attempt": written.attempt})
    assert read_settings(tmp_path) == written
    assert write_job(tmp_path, settings).attempt != written.attempt  # a new attempt id each time


@pytest.mark.slow
def test_score_again_scores_with_the_audience_the_checkpoint_was_trained_for(
        tmp_path, tiny_base_model, synthetic_pairs, tau2_sample):
    trained = tmp_path / "trained"
    write_job(trained,
              JobSettings(evaluator="shared-1", audience="shared", base_model=str(tiny_base_model)),
              train_pairs=synthetic_pairs(0, 4), eval_pairs=synthetic_pairs(100, 2),
              score_traces=tau2_sample[:2])
    assert main(str(trained)) == 0, failure_reason(trained)
    again = tmp_path / "again"
    # The settings Score again writes name no audience: the checkpoint's own is used.
    write_job(again,
              JobSettings(evaluator="shared-1", checkpoint=str(trained / "reward-model.tar.gz"),
                                 outputs=("scores",)), score_traces=tau2_sample[:2])
    assert main(str(again)) == 0, failure_reason(again)
    assert json.loads((again / "metrics.json").read_text())["audience"] == "shared"
    stored = [row["score"] for row in read_jsonl(trained / "scores.jsonl")]
    assert [row["score"] for row in read_jsonl(again / "scores.jsonl")] == \
        pytest.approx(stored, abs=1e-6)

    write_job(again, JobSettings(evaluator="shared-1", audience="personal", outputs=("scores",),
                                 checkpoint=str(trained / "reward-model")),
              score_traces=tau2_sample[:2])
    assert main(str(again)) == 1
    assert failure_reason(again).endswith(
        "field 'audience': checkpoint .../reward-model"
        " was trained for the shared audience; a scoring job scores with the audience it was "
        "trained for")


@pytest.mark.slow
def test_the_checkpoint_is_stored_in_the_base_models_dtype(tmp_path, tiny_base_model,
                                                           synthetic_pairs, tau2_sample):
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from stash_pipeline.worker.scoring import RewardModel

    base = tmp_path / "bf16-base"  # stored in bf16, as Qwen3-0.6B is
    AutoModelForCausalLM.from_pretrained(tiny_base_model,
                                         dtype=torch.bfloat16).save_pretrained(base)
    AutoTokenizer.from_pretrained(tiny_base_model).save_pretrained(base)
    job_dir = tmp_path / "job"
    write_job(job_dir, JobSettings(evaluator="m", base_model=str(base)),
              train_pairs=synthetic_pairs(0, 4), eval_pairs=synthetic_pairs(100, 2),
              score_traces=tau2_sample[:2])
    assert main(str(job_dir)) == 0, failure_reason(job_dir)
    with safe_open(job_dir / "reward-model" / "model.safetensors", "pt") as weights:
        assert {weights.get_tensor(name).dtype for name in weights.keys()} == {torch.bfloat16}
    assert "checkpoint weights stored in bfloat16" in (job_dir / "worker.log").read_text()

    # RewardModel loads it in fp32 or bf16 as asked; fp32 (the CPU default) holds the bf16 values
    # exactly, and scores as the job did (the job scored with the weights it stored).
    as_fp32 = RewardModel(job_dir / "reward-model.tar.gz", device="cpu")
    as_bf16 = RewardModel(job_dir / "reward-model", device="cpu", dtype=torch.bfloat16)
    assert {p.dtype for p in as_fp32.model.parameters()} == {torch.float32}
    assert {p.dtype for p in as_bf16.model.parameters()} == {torch.bfloat16}
    for wide, narrow in zip(as_fp32.model.parameters(), as_bf16.model.parameters()):
        assert torch.equal(wide, narrow.float())
    stored = [row["score"] for row in read_jsonl(job_dir / "scores.jsonl")]
    assert as_fp32.score_traces(tau2_sample[:2]) == pytest.approx(stored, abs=1e-6)


@pytest.mark.parametrize("offline", [False, True])
def test_a_hub_model_that_cannot_be_downloaded_fails_at_once_naming_the_cause(
        tmp_path, synthetic_pairs, monkeypatch, offline):
    """Issue 52.1: no network and an empty cache: the reason says so in one line (one request
    to the hub, refused at once here: a closed loopback port), not the library's last retry."""
    import socket

    from huggingface_hub import constants

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    write_job(tmp_path / "job", JobSettings(evaluator="m", base_model="stash-test/nowhere"),
              train_pairs=synthetic_pairs(0, 2))
    assert main(str(tmp_path / "job")) == 1
    [line] = failure_reason(tmp_path / "job").strip().splitlines()[-1:]
    assert line.startswith("job failed in phase inputs: ModelLoadError: base model "
                           "stash-test/nowhere: not in the local cache")
    cause = ("HF_HUB_OFFLINE forbids downloading it" if offline
             else f"the hub ({endpoint}) is unreachable (ConnectError)")
    assert cause in line and "download it once where there is network" in line


@pytest.mark.parametrize("content, expected", [
    ((), "the directory has no config.json (it holds nothing: the directory is empty)"),
    (("config.json",),
     "the directory has no tokenizer, none of tokenizer.json, tokenizer_config.json"),
])
def test_a_base_model_directory_without_a_model_names_the_path_and_what_it_lacks(
        tmp_path, synthetic_pairs, tiny_base_model, content, expected):
    base = tmp_path / "base"
    base.mkdir()
    for name in content:
        (base / name).write_bytes((tiny_base_model / name).read_bytes())
    write_job(tmp_path / "job", JobSettings(evaluator="m", base_model=str(base)),
              train_pairs=synthetic_pairs(0, 2))
    assert main(str(tmp_path / "job")) == 1
    last = failure_reason(tmp_path / "job").splitlines()[-1]
    # The reason a user reads names the directory without the server's path; worker.log keeps it.
    assert last.startswith("job failed in phase inputs: ModelLoadError: model .../base: ")
    assert f"model {base}: " in (tmp_path / "job" / "worker.log").read_text()
    assert expected in last and "sentencepiece" not in last


@pytest.mark.slow
def test_a_failed_retry_where_a_job_succeeded_leaves_no_success_behind(tmp_path, tiny_base_model,
                                                                       synthetic_pairs):
    write_job(tmp_path,
              JobSettings(evaluator="m", base_model=str(tiny_base_model), outputs=("scores",)),
              train_pairs=synthetic_pairs(0, 2))
    assert main(str(tmp_path)) == 0, failure_reason(tmp_path)
    (tmp_path / "settings.json").write_text("{not json")  # the retry fails before anything else
    assert main(str(tmp_path)) == 1
    assert not (tmp_path / "metrics.json").exists() and not (tmp_path / "scores.jsonl").exists()
    assert failure_reason(tmp_path).splitlines()[-1].startswith(
        "job failed: InputError: file settings.json: not JSON")
    assert len(list((tmp_path / "attempt-logs").iterdir())) == 1


@pytest.mark.slow
def test_post_training_work_forwards_each_rendering_once(tmp_path, tiny_base_model, synthetic_pairs,
                                                         monkeypatch):
    """Whole-trace pair sides are rendered exactly as the traces they score: scoring reuses their
    rewards, and a side shared by several pairs (one success against many failures) runs once."""
    from stash_pipeline.worker import evaluation, scoring

    traces = [p.chosen.trace for p in synthetic_pairs(500, 6)]
    pairs = [replace(p, kind="trace", chosen=PairSide(traces[0]), rejected=PairSide(t),
                     source_trace_ids=(traces[0].id, t.id)) for p, t in
             zip(synthetic_pairs(500, 5), traces[1:])]
    forwarded: list[int] = []
    real = evaluation.read_rows

    def counting(model, rows, **kwargs):
        forwarded.append(sum(len(row.reads) for row in rows))  # renderings read, tree rows or not
        return real(model, rows, **kwargs)

    monkeypatch.setattr(evaluation, "read_rows", counting)
    monkeypatch.setattr(scoring, "read_rows", counting)
    write_job(tmp_path, JobSettings(evaluator="m", base_model=str(tiny_base_model),
                                    outputs=("checkpoint", "scores")),
              train_pairs=pairs[:4], eval_pairs=pairs[4:], score_traces=traces)
    assert main(str(tmp_path)) == 0, failure_reason(tmp_path)
    # The untrained base: each of the 6 traces once, before training. Evaluation: 2 distinct
    # sides of the eval pair, 4 more of the training pairs; scoring: none.
    assert forwarded == [6, 2, 4, 0]
    scores = read_jsonl(tmp_path / "scores.jsonl")
    # The same numbers a scoring-only job computes from the checkpoint's own forwards.
    again = tmp_path / "again"
    write_job(again, JobSettings(evaluator="m", checkpoint=str(tmp_path / "reward-model.tar.gz"),
                                 outputs=("scores",)), score_traces=traces)
    assert main(str(again)) == 0, failure_reason(again)
    assert [s["score"] for s in read_jsonl(again / "scores.jsonl")] == pytest.approx(
        [s["score"] for s in scores], abs=1e-5)


@pytest.mark.slow
def test_the_display_scale_beyond_its_limit_comes_from_a_seeded_sample_of_training_pairs(
        tmp_path, monkeypatch, tiny_base_model, synthetic_pairs):
    """Both stats files summarise both sides of the sampled training pairs only (3 of 10 here)."""
    from functools import partial

    from stash_pipeline.core.calibration import display_scale_sample, reward_stats
    from stash_pipeline.worker import procedures

    monkeypatch.setattr(procedures, "display_scale_sample", partial(display_scale_sample, limit=3))
    train = synthetic_pairs(0, 10)
    write_job(tmp_path, JobSettings(evaluator="m", base_model=str(tiny_base_model),
                                    outputs=("checkpoint", "pair_rewards")),
              train_pairs=train, eval_pairs=synthetic_pairs(100, 2), benchmark_pairs=train)
    assert main(str(tmp_path)) == 0, failure_reason(tmp_path)
    rewards = {row["pair_id"]: (row["chosen"], row["rejected"])
               for row in read_jsonl(tmp_path / "pair_rewards.jsonl")}
    everything, actions = display_scale_sample([p.kind for p in train], limit=3)
    for name, picked in (("reward_stats.json", everything), ("action_reward_stats.json", actions)):
        stored = json.loads((tmp_path / "reward-model" / name).read_text())
        expected = reward_stats(r for i in picked for r in rewards[train[i].id])
        assert stored["count"] == 6
        assert stored["mean"] == pytest.approx(expected.mean, abs=1e-5)
        assert stored["std"] == pytest.approx(expected.std, abs=1e-5)
