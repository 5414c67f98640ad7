"""Rendering the base model reads natively: its own template when prefix-stable, ChatML without
think tokens it lacks, plain text for BERT-style tokenizers; and a stored score reproduced with
plain transformers from a raw OpenAI-format trace."""

from __future__ import annotations

import json
import tarfile

import pytest
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedTokenizerFast

from stash_pipeline.compute.contract import JobSettings, read_jsonl, write_job
from stash_pipeline.compute.worker_log import failure_reason
from stash_pipeline.importers import read_path
from stash_pipeline.worker import tiny_model
from stash_pipeline.worker.modeling import load_tokenizer
from stash_pipeline.worker.render import (
    CHAT_TEMPLATE,
    CHATML_TEMPLATE,
    PLAIN_TEMPLATE,
    TOOL_ARGUMENTS_MACRO,
    action_end_offsets,
    choose_template,
    cut_at_action,
    render_trace,
    template_kind,
)
from stash_pipeline.worker.runner import main
from stash_pipeline_tests.support.tiny_models import corpus_text

# A ChatML template that renders every turn the same way (prefix-stable), tool calls in the Hugging
# Face shape, string arguments as sent: OpenAI-form arguments would read otherwise than objects.
VERBATIM_ARGUMENTS = ("{{ c.function.arguments if c.function.arguments is string "
                      "else c.function.arguments | tojson }}")
VERBATIM_ARGUMENTS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}"
    "{{ messages[0].content }}\n\n{% endif %}# Tools\n{% for t in tools %}{{ t | tojson }}\n"
    "{% endfor %}<|im_end|>\n{%- elif messages[0].role == 'system' %}<|im_start|>system\n"
    "{{ messages[0].content }}<|im_end|>\n{%- endif %}"
    "{%- for m in messages %}{%- if m.role == 'system' and loop.first %}"
    "{%- elif m.role == 'tool' %}<|im_start|>tool\n{{ m.content }}<|im_end|>\n"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    "{%- for c in m.tool_calls or [] %}{% if not loop.first or m.content %}\n{% endif %}"
    "<tool_call>{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    + VERBATIM_ARGUMENTS +
    "}</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- endif %}{%- endfor %}"
)
# The same with arguments written as the project's macro writes them, whatever their form: a
# tokenizer that ships it is rendered with it.
NATIVE_TEMPLATE = TOOL_ARGUMENTS_MACRO + VERBATIM_ARGUMENTS_TEMPLATE.replace(
    VERBATIM_ARGUMENTS, "{{ tool_arguments(c.function.arguments) }}")
# SmolLM2-Instruct's template: ChatML, but it drops tool calls (and adds a default system turn).
TOOL_BLIND_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
)


def chatml_tokenizer(directory, *, think: bool, template: str | None = None):
    added = [t for t in tiny_model.ADDED_TOKENS if think or "think" not in t]
    tokenizer = tiny_model.build_tokenizer(corpus_text(), 1024, added_tokens=added)
    if template:
        tokenizer.chat_template = template
    tokenizer.save_pretrained(directory)
    return load_tokenizer(str(directory))


@pytest.fixture(scope="module")
def bert_tokenizer(tmp_path_factory):
    directory = tmp_path_factory.mktemp("bert-tokenizer")
    wordpiece = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=True)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    wordpiece.train_from_iterator(corpus_text(), trainers.WordPieceTrainer(
        vocab_size=800, special_tokens=specials))
    wordpiece.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    PreTrainedTokenizerFast(tokenizer_object=wordpiece, unk_token="[UNK]", pad_token="[PAD]",
                            cls_token="[CLS]", sep_token="[SEP]",
                            mask_token="[MASK]").save_pretrained(directory)
    return load_tokenizer(str(directory))


def assert_prefix_stable(tokenizer, traces):
    for audience in ("personal", "shared"):
        for trace in traces:
            full, offsets = action_end_offsets(tokenizer, trace, audience)
            full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
            for action in trace.actions():
                prefix = render_trace(tokenizer, cut_at_action(trace, action.id), audience,
                                      open_end=True)
                assert full[: offsets[action.id]] == prefix
                ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
                assert full_ids[: len(ids)] == ids, action.id


def test_qwen3_style_tokenizer_gets_chatml_with_the_think_block(tiny_base_model, tau2_sample):
    tokenizer = load_tokenizer(str(tiny_base_model))
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert template_kind(CHAT_TEMPLATE) == "chatml-think"
    assert "<think>" in render_trace(tokenizer, tau2_sample[0], "personal")
    assert_prefix_stable(tokenizer, tau2_sample)


def test_chatml_tokenizer_without_think_tokens_gets_no_think_block(tmp_path, tau2_sample):
    tokenizer = chatml_tokenizer(tmp_path, think=False)
    assert tokenizer.chat_template == CHATML_TEMPLATE
    text = render_trace(tokenizer, tau2_sample[0], "personal")
    assert "<think>" not in text and text.count("<|im_start|>assistant\n") > 2
    assert_prefix_stable(tokenizer, tau2_sample)


def test_a_tool_blind_own_template_is_not_used(tmp_path, tau2_sample):
    tokenizer = chatml_tokenizer(tmp_path, think=False, template=TOOL_BLIND_TEMPLATE)
    assert tokenizer.chat_template == CHATML_TEMPLATE
    assert_prefix_stable(tokenizer, tau2_sample)


def test_an_own_template_that_writes_string_arguments_verbatim_is_not_used(tmp_path,
                                                                           tau2_sample):
    """Prefix-stable, but arguments sent as a JSON string (OpenAI's form) would be read as sent:
    plain transformers would read other text than the project renders."""
    tokenizer = chatml_tokenizer(tmp_path, think=False, template=VERBATIM_ARGUMENTS_TEMPLATE)
    assert tokenizer.chat_template == CHATML_TEMPLATE
    assert_prefix_stable(tokenizer, tau2_sample)


def test_a_prefix_stable_own_template_is_used_and_saved(tmp_path, tau2_sample):
    tokenizer = chatml_tokenizer(tmp_path / "base", think=False, template=NATIVE_TEMPLATE)
    assert tokenizer.chat_template == NATIVE_TEMPLATE
    assert template_kind(tokenizer.chat_template) == "native"
    trace = tau2_sample[0]
    text = render_trace(tokenizer, trace, "shared")
    assert text.startswith("<|im_start|>system\n") and "# Evaluation context" in text
    assert text.endswith("<|im_end|>") and "<think>" not in text
    assert_prefix_stable(tokenizer, tau2_sample)
    tokenizer.save_pretrained(tmp_path / "saved")
    assert (tmp_path / "saved" / "chat_template.jinja").read_text() == NATIVE_TEMPLATE
    assert load_tokenizer(str(tmp_path / "saved")).chat_template == NATIVE_TEMPLATE


def test_bert_style_tokenizer_gets_plain_role_labelled_text(bert_tokenizer, tau2_sample):
    assert bert_tokenizer.chat_template == PLAIN_TEMPLATE
    trace = tau2_sample[0]
    text = render_trace(bert_tokenizer, trace, "personal")
    assert "<|" not in text and "<tool_call>" not in text and "<think>" not in text
    assert text.startswith("Tools:\n") and "\n\nUser: " in text and "\n\nAssistant: " in text
    assert_prefix_stable(bert_tokenizer, tau2_sample)
    # Close to the conversation's own text: markup adds few tokens (role labels only).
    plain = "\n\n".join(m.content for m in trace.messages if m.role != "system")
    calls = " ".join(json.dumps(c.arguments) for m in trace.messages for c in m.tool_calls)
    tools = "\n".join(json.dumps(t) for t in trace.tools)
    count = len(bert_tokenizer(text, add_special_tokens=False)["input_ids"])
    bare = len(bert_tokenizer(f"{tools}\n{plain}\n{calls}", add_special_tokens=False)["input_ids"])
    assert count < 1.1 * bare


def test_choosing_again_keeps_the_choice(bert_tokenizer, tmp_path):
    for tokenizer in (bert_tokenizer, chatml_tokenizer(tmp_path, think=False)):
        chosen = tokenizer.chat_template
        assert choose_template(tokenizer) == chosen


RAW_OPENAI_TRACE = {
    "id": "raw-openai-1",
    "tools": [{"type": "function", "function": {
        "name": "search_direct_flight", "description": "Search direct flights.",
        "parameters": {"type": "object", "properties": {"destination": {"type": "string"}}}}}],
    "messages": [
        {"role": "user", "content": "Please book a flight to Paris."},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "search_direct_flight",
                         "arguments": json.dumps({"destination": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"flight": "HAT001"}'},
        {"role": "assistant", "content": "Flight HAT001 to Paris is booked."},
    ],
}


@pytest.mark.parametrize("think", [True, False])
def test_plain_transformers_reproduce_a_stored_score_of_a_raw_openai_trace(
        tmp_path, synthetic_pairs, think):
    base = tmp_path / "base"
    base.mkdir()
    tokenizer = tiny_model.build_tokenizer(
        corpus_text(), 1024,
        added_tokens=[t for t in tiny_model.ADDED_TOKENS if think or "think" not in t])
    tokenizer.save_pretrained(base)
    tiny_model.save_base_model(base, len(tokenizer))
    source = tmp_path / "trace.json"
    source.write_text(json.dumps(RAW_OPENAI_TRACE))
    (trace,) = [record.trace for record in read_path(source, format="openai")]
    job = tmp_path / "job"
    write_job(job, JobSettings(evaluator="m", base_model=str(base)),
              train_pairs=synthetic_pairs(0, 6), eval_pairs=synthetic_pairs(100, 2),
              score_traces=[trace])
    assert main(str(job)) == 0, failure_reason(job)
    (stored,) = read_jsonl(job / "scores.jsonl")
    with tarfile.open(job / "reward-model.tar.gz") as archive:
        archive.extractall(tmp_path / "download", filter="data")
    folder = tmp_path / "download" / "reward-model"

    # What a user does with the download: nothing of this project, the raw trace as it came.
    plain_tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    text = plain_tokenizer.apply_chat_template(RAW_OPENAI_TRACE["messages"],
                                               tools=RAW_OPENAI_TRACE["tools"], tokenize=False)
    assert ("<think>" in text) == think
    inputs = plain_tokenizer(text, return_tensors="pt", truncation=True)
    with torch.no_grad():
        score = model(**inputs).logits[0, 0].item()
    assert score == pytest.approx(stored["score"], abs=1e-4)
