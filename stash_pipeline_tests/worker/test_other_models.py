"""Any AutoModelForSequenceClassification trains and scores: BERT, with its own tokenizer."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import BertConfig, BertModel

from stash_pipeline.compute.contract import JobSettings, read_jsonl, read_settings, write_job
from stash_pipeline.compute.worker_log import failure_reason
from stash_pipeline.worker.modeling import load_tokenizer, tokenize
from stash_pipeline.worker.render import render_trace
from stash_pipeline.worker.runner import main
from stash_pipeline.worker.scoring import RewardModel
from stash_pipeline.worker.tiny_model import build_wordpiece_tokenizer
from stash_pipeline_tests.support.tiny_models import corpus_text

pytestmark = pytest.mark.slow
WINDOW = 128  # BERT's positions end here: the window is cut to it


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A BERT base model with a WordPiece tokenizer built with `tokenizers`, saved like a real
    one."""
    directory = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = build_wordpiece_tokenizer(corpus_text(), 800)
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=64,
                         max_position_embeddings=WINDOW)).save_pretrained(directory)
    return directory


def test_bert_inputs_get_its_special_tokens_and_its_window(tiny_bert, tau2_sample):
    tokenizer = load_tokenizer(str(tiny_bert))
    assert tokenizer.model_max_length == WINDOW and tokenizer.reward_add_special_tokens
    (ids,) = tokenize(tokenizer, [render_trace(tokenizer, tau2_sample[0], "personal")])
    assert len(ids) == WINDOW
    assert tokenizer.convert_ids_to_tokens([ids[0], ids[-1]]) == ["[CLS]", "[SEP]"]


def test_bert_trains_and_scores_through_the_job(tmp_path, tiny_bert, synthetic_pairs, tau2_sample):
    traces = tau2_sample[:2] + [p.chosen.trace for p in synthetic_pairs(300, 2)]
    write_job(tmp_path, JobSettings(evaluator="bert-1", base_model=str(tiny_bert)),
              train_pairs=synthetic_pairs(0, 12), eval_pairs=synthetic_pairs(100, 4),
              score_traces=traces)
    assert main(str(tmp_path)) == 0, failure_reason(tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["train_pairs"] == 12 and metrics["final_loss"] > 0
    # The window used is BERT's, recorded in the metrics and the settings, with a warning.
    assert metrics["max_length"] == WINDOW and read_settings(tmp_path).max_length == WINDOW
    assert metrics["chat_template"] == "plain"
    log = (tmp_path / "worker.log").read_text()
    assert f"WARNING stash_pipeline.worker: base model {tiny_bert} has {WINDOW} positions" in log
    scores = read_jsonl(tmp_path / "scores.jsonl")
    actions = read_jsonl(tmp_path / "action_scores.jsonl")
    assert len(scores) == 4 and len(actions) == sum(len(t.actions()) for t in traces)
    assert len({round(a["raw_reward"], 5) for a in actions}) > 1

    # The checkpoint scores the same: each action is its own window, read through BERT's own
    # forward.
    loaded = RewardModel(tmp_path / "reward-model.tar.gz", device="cpu")
    assert loaded.tokenizer.model_max_length == WINDOW
    assert loaded.score_traces(traces) == pytest.approx([s["score"] for s in scores], abs=1e-5)
    again = loaded.score_actions(traces)
    assert [again[a["action_id"]] for a in actions] == \
        pytest.approx([a["raw_reward"] for a in actions], abs=1e-5)
