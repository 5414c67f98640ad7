"""RewardModel: a saved checkpoint (directory or archive) scores exactly as the model that wrote
it."""

from __future__ import annotations

import json
import math
import tarfile

import pytest
import torch

from stash_pipeline.core.calibration import RewardStats
from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.worker.checkpoint import MODEL_FILES, archive, writing_checkpoint
from stash_pipeline.worker.modeling import load_reward_model, load_tokenizer
from stash_pipeline.worker.render import render_trace
from stash_pipeline.worker.scoring import RewardModel, score_texts, score_trace_actions
from stash_pipeline_tests.support.tiny_models import write_checkpoint

pytestmark = pytest.mark.slow
REWARD_STATS = RewardStats(mean=0.25, std=2.0, count=8)
ACTION_STATS = RewardStats(mean=-0.5, std=0.5, count=6)


@pytest.fixture(scope="module")
def trained(tiny_base_model):
    """The in-memory model and tokenizer a training run would end with (head set to non-trivial)."""
    tokenizer = load_tokenizer(str(tiny_base_model))
    model = load_reward_model(str(tiny_base_model), device="cpu", tokenizer=tokenizer)
    torch.manual_seed(2)
    with torch.no_grad():
        model.score.weight.normal_(0.0, 1.0)
    return model, tokenizer


@pytest.fixture(scope="module")
def checkpoint(trained, tmp_path_factory):
    model, tokenizer = trained
    directory = tmp_path_factory.mktemp("job") / "reward-model"
    write_checkpoint(model, tokenizer, directory, audience="shared", reward_stats=REWARD_STATS,
                     action_reward_stats=ACTION_STATS)
    return directory


@pytest.fixture(scope="module")
def short_traces(tau2_sample):
    from dataclasses import replace

    return [replace(trace, tools=()) for trace in tau2_sample[:2]]


@pytest.mark.parametrize("form", ["directory", "archive"])
def test_loaded_checkpoint_scores_like_the_model_that_saved_it(trained, checkpoint, tau2_sample,
                                                               short_traces, form):
    model, tokenizer = trained
    path = checkpoint if form == "directory" else archive(checkpoint)
    loaded = RewardModel(str(path), device="cpu")
    assert loaded.audience == "shared"  # recorded by training, so rendering matches it
    assert loaded.tokenizer.truncation_side == "left" and loaded.tokenizer.model_max_length == 1024
    assert loaded.tokenizer.chat_template == tokenizer.chat_template
    rendered = [render_trace(tokenizer, trace, "shared") for trace in tau2_sample]
    assert [loaded.render(trace) for trace in tau2_sample] == rendered
    expected = score_texts(model, tokenizer, rendered)
    assert loaded.score(rendered) == pytest.approx(expected, abs=1e-5)
    assert loaded.score_traces(tau2_sample) == pytest.approx(expected, abs=1e-5)
    actions = loaded.score_actions(short_traces)
    reference = score_trace_actions(model, tokenizer, short_traces, "shared")
    assert actions.keys() == reference.keys() == {a.id for t in short_traces for a in t.actions()}
    assert max(abs(actions[k] - reference[k]) for k in actions) <= 1e-5


def test_credit_and_calibration_use_the_checkpoint_stats(checkpoint):
    loaded = RewardModel(checkpoint, device="cpu")
    assert loaded.reward_stats == REWARD_STATS and loaded.action_reward_stats == ACTION_STATS
    assert loaded.credit(-0.5) == 0.0
    assert loaded.credit(0.5) == pytest.approx(math.tanh(1.0))
    assert loaded.calibrated(0.25) == 0.5
    assert loaded.calibrated(2.25) == pytest.approx(1 / (1 + math.exp(-1.0)))


def test_an_explicit_audience_overrides_the_saved_one(checkpoint, tau2_sample):
    loaded = RewardModel(checkpoint, device="cpu", audience="personal")
    assert loaded.audience == "personal"
    assert not loaded.render(tau2_sample[0]).startswith(
        "<|im_start|>system\n# Airline Agent Policy")
    assert loaded.render(tau2_sample[0], "shared").startswith(
        "<|im_start|>system\n# Airline Agent Policy")


def test_a_model_without_action_stats_gives_no_credit(trained, tmp_path):
    model, tokenizer = trained
    directory = write_checkpoint(model, tokenizer, tmp_path / "reward-model", audience="personal",
                                 reward_stats=REWARD_STATS, action_reward_stats=None)
    loaded = RewardModel(directory, device="cpu")
    assert loaded.action_reward_stats is None
    with pytest.raises(NotFoundError, match="action comparisons"):
        loaded.credit(0.0)
    assert loaded.calibrated(0.25) == 0.5


def test_bad_checkpoints_name_what_is_wrong(checkpoint, tmp_path):
    with pytest.raises(NotFoundError, match="no reward-model checkpoint"):
        RewardModel(tmp_path / "missing", device="cpu")
    not_an_archive = tmp_path / "reward-model.tar.gz"
    not_an_archive.write_text("not a tar file")
    with pytest.raises(InputError, match="reward-model.tar.gz"):
        RewardModel(not_an_archive, device="cpu")
    empty = tmp_path / "empty.tar.gz"
    with tarfile.open(empty, "w:gz"):
        pass
    with pytest.raises(InputError, match="config.json"):
        RewardModel(empty, device="cpu")
    broken = tmp_path / "broken"
    broken.mkdir()
    for path in checkpoint.iterdir():
        (broken / path.name).write_bytes(path.read_bytes())
    (broken / "reward_stats.json").write_text(json.dumps({"mean": 0.0, "std": "wide"}))
    with pytest.raises(InputError) as caught:
        RewardModel(broken, device="cpu")
    assert caught.value.field == "std" and "reward_stats.json" in str(caught.value)
    (broken / "reward_stats.json").write_text(json.dumps({"mean": 0.0, "std": 1.0,
                                                          "audience": "team"}))
    with pytest.raises(InputError) as caught:
        RewardModel(broken, device="cpu")
    assert caught.value.field == "audience" and "'team'" in str(caught.value)


def test_the_writer_makes_the_seed_folder_whole_or_nothing(trained, checkpoint, tmp_path):
    """Every file of the seed (the card included) in a finished checkpoint; a checkpoint left
    without its stats and card never appears under its name."""
    assert {p.name for p in checkpoint.iterdir()} >= {
        *MODEL_FILES, "reward_stats.json", "action_reward_stats.json", "README.md"}
    model, tokenizer = trained
    unfinished = tmp_path / "reward-model"
    with pytest.raises(RuntimeError, match="unfinished"):
        with writing_checkpoint(unfinished) as writer:
            writer.save_model(model, tokenizer)
    assert list(tmp_path.iterdir()) == []
