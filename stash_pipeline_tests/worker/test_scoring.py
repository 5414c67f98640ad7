"""Scoring: one-pass action scores equal per-action scores, truncation, batching, other models."""

from __future__ import annotations

import copy
import random
from dataclasses import replace

import pytest
import torch
from tokenizers import AddedToken
from transformers import BertConfig, BertForSequenceClassification

from stash_pipeline.core.traces import Message, ToolCall, Trace
from stash_pipeline.worker import render, scoring
from stash_pipeline.worker.batching import Row, length_batches, read_rows
from stash_pipeline.worker.modeling import load_tokenizer, tokenize, tokenize_counted
from stash_pipeline.worker.readout import pools_last_token
from stash_pipeline.worker.render import cut_at_action, render_trace
from stash_pipeline.worker.scoring import plan_action_rows, score_texts, score_trace_actions
from stash_pipeline_tests.support.worker_fixtures import model, tokenizer  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow
TOLERANCE = 1e-4  # fp32, the bound for one-pass against per-action scores


@pytest.fixture(scope="module")
def short_traces(tau2_sample):
    # Without tool schemas the early actions of real traces fit the window and the later ones do
    # not: both the one-pass read and the window fallback are exercised on real data.
    return [replace(trace, tools=()) for trace in tau2_sample]


@torch.no_grad()
def per_action_scores(model, tokenizer, traces, audience):
    """The definition: each action's own rendering, scored alone by the model's own forward."""
    scores = {}
    for trace in traces:
        for action in trace.actions():
            text = render_trace(tokenizer, cut_at_action(trace, action.id), audience, open_end=True)
            ids = torch.tensor(tokenize(tokenizer, [text]))
            scores[action.id] = model(input_ids=ids).logits[0, 0].item()
    return scores


def max_difference(a, b):
    assert a.keys() == b.keys()
    return max(abs(a[k] - b[k]) for k in a)


def multi_call_trace() -> Trace:
    return Trace(
        id="multi",
        messages=(
            Message("system", "Follow the refund policy."),
            Message("user", "Refund order 7 and tell me the policy."),
            Message("assistant", "Checking the order and the policy.", tool_calls=(
                ToolCall("c1", "get_order", {"order_id": 7}),
                ToolCall("c2", "get_policy", {"kind": "refund"}),
                ToolCall("c3", "get_user", {"user_id": "u1"}),
            )),
            Message("tool", '{"status": "delivered"}', tool_call_id="c1"),
            Message("tool", '{"days": 30}', tool_call_id="c2"),
            Message("tool", '{"name": "Ada"}', tool_call_id="c3"),
            Message("assistant", "Refunded: the order is within 30 days."),
        ),
        tools=({"type": "function", "function": {"name": "get_order", "parameters": {}}},),
        metadata={"evaluation_context": "Orders older than 30 days are not refundable."},
    )


def read_counts(tokenizer, traces, audience):
    heads = windows = 0
    for trace in traces:
        head_rows, window_rows = plan_action_rows(tokenizer, trace, audience)
        heads += sum(len(row.reads) for row in head_rows)
        windows += len(window_rows)
    return heads, windows


def test_one_pass_equals_per_action_scores_on_real_traces(model, tokenizer, short_traces):
    heads, windows = read_counts(tokenizer, short_traces, "personal")
    assert heads >= 10 and windows >= 5, "both paths must be exercised"
    fast = score_trace_actions(model, tokenizer, short_traces, "personal")
    assert max_difference(
        fast, per_action_scores(model, tokenizer, short_traces, "personal")) <= TOLERANCE


def test_traces_longer_than_the_window_fall_back_to_exact_windows(model, tokenizer, tau2_sample):
    # With the policy and tool schemas every real trace is longer than 1024 tokens of this
    # tokenizer.
    heads, windows = read_counts(tokenizer, tau2_sample, "shared")
    assert windows == sum(len(t.actions()) for t in tau2_sample) and heads == 0
    fast = score_trace_actions(model, tokenizer, tau2_sample, "shared")
    assert max_difference(fast,
                          per_action_scores(model, tokenizer, tau2_sample, "shared")) <= TOLERANCE


def test_a_wider_window_reads_whole_long_traces_in_one_pass(tiny_base_model, model, short_traces):
    wide = load_tokenizer(str(tiny_base_model), max_length=2048)
    traces = short_traces[:2]
    heads, _ = read_counts(wide, traces, "personal")
    assert (heads >= 8
            and heads > read_counts(load_tokenizer(str(tiny_base_model)), traces, "personal")[0])
    fast = score_trace_actions(model, wide, traces, "personal")
    assert max_difference(fast, per_action_scores(model, wide, traces, "personal")) <= TOLERANCE


@pytest.mark.parametrize("audience", ["personal", "shared"])
def test_text_and_several_tool_calls_of_one_message(model, tokenizer, audience):
    trace = multi_call_trace()
    heads, windows = plan_action_rows(tokenizer, trace, audience)
    assert len(heads) == 1 and not windows
    assert {key for _, key in heads[0].reads} == {a.id for a in trace.actions()}
    assert {a.local_id for a in trace.actions()} == {"m2", "m2.call0", "m2.call1", "m2.call2", "m6"}
    fast = score_trace_actions(model, tokenizer, [trace], audience)
    expected = per_action_scores(model, tokenizer, [trace], audience)
    assert max_difference(fast, expected) <= TOLERANCE
    # Each read is a different prefix: the scores are not all one number.
    assert len({round(v, 4) for v in fast.values()}) == len(fast)


def test_an_action_whose_tokens_merge_across_its_end_gets_its_own_window(model, tokenizer,
                                                                         monkeypatch):
    # Cut inside a word: the prefix ends in a piece of a token that the whole text merges further,
    # so the token at the cut in the full pass is not the prefix's last token.
    trace = multi_call_trace()
    full = render_trace(tokenizer, trace, "personal")
    full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    start = full.index("Refunded: the order")

    def splits_a_token(cut):
        prefix_ids = tokenizer(full[:cut], add_special_tokens=False)["input_ids"]
        return full_ids[: len(prefix_ids)] != prefix_ids

    cut = next(c for c in range(start + 1, start + 19) if splits_a_token(c))
    action_id = trace.actions()[-1].id
    monkeypatch.setattr(scoring, "action_end_offsets",
                        lambda tok, tr, aud: (full, {action_id: cut}))
    heads, windows = plan_action_rows(tokenizer, trace, "personal")
    assert not heads and len(windows) == 1
    fast = score_trace_actions(model, tokenizer, [trace], "personal")
    assert abs(fast[action_id] - score_texts(model, tokenizer, [full[:cut]])[0]) <= TOLERANCE


@pytest.mark.parametrize("audience", ["personal", "shared"])
def test_every_action_ends_where_one_tokenisation_of_the_trace_serves(tokenizer, tau2_sample,
                                                                      audience):
    for trace in tau2_sample + [multi_call_trace()]:
        full, ends = render.action_end_offsets(tokenizer, trace, audience)
        full_ids, counts = scoring._tokens_up_to(tokenizer, full, list(ends.values()))
        assert None not in counts
        alone = tokenizer([full[:end] for end in ends.values()],
                          add_special_tokens=False)["input_ids"]
        assert [full_ids[:count] for count in counts] == alone


def test_a_cut_not_beside_an_added_token_is_tokenised_alone(tokenizer):
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.add_tokens([AddedToken("<mark>", lstrip=True, normalized=False)])
    text = "ask the user <mark> then refund<|im_end|>"
    cuts = [text.index("user") + 2, text.index("<mark>"), text.index("then"),
            text.index("<mark>") + len("<mark>"), text.index("<|im_end|>"), len(text)]
    ids, counts = scoring._tokens_up_to(tokenizer, text, cuts)
    # Inside a word; before a token that strips the space on its left; after a space. Then after
    # that token, before <|im_end|> and at the end, which are certain.
    assert counts[:3] == [None, None, None]
    assert None not in counts[3:]
    for cut, count in zip(cuts[3:], counts[3:]):
        assert ids[:count] == tokenizer(text[:cut], add_special_tokens=False)["input_ids"]


def test_window_ids_are_the_tokens_training_sees(tokenizer, tau2_sample):
    trace = tau2_sample[0]
    _, windows = plan_action_rows(tokenizer, trace, "shared")
    for row, action in zip(windows, trace.actions()):
        text = render_trace(tokenizer, cut_at_action(trace, action.id), "shared", open_end=True)
        assert list(row.ids) == tokenize(tokenizer, [text])[0]
        assert len(row.ids) == 1024


def test_left_truncation_keeps_the_end(model, tokenizer, tau2_sample):
    text = render_trace(tokenizer, tau2_sample[0], "shared")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) > 1500
    assert tokenize(tokenizer, [text])[0] == ids[-1024:]
    # The counted form gives the tokenizer's own left truncation and each length before it.
    short = render_trace(tokenizer, Trace(id="s", messages=(Message("user", "hi"),)), "shared")
    counted, lengths = tokenize_counted(tokenizer, [text, short])
    assert counted == tokenizer([text, short], add_special_tokens=False, truncation=True,
                                max_length=1024)["input_ids"]
    assert lengths == [len(ids), len(counted[1])] and tokenize_counted(tokenizer, []) == ([], [])
    # A different beginning is cut away: same score. A different end is read: another score.
    other_start = "<|im_start|>user\nSomething else entirely.<|im_end|>\n" + text
    other_end = text + "<|im_start|>user\nThanks!<|im_end|>\n"
    base, same, changed = score_texts(model, tokenizer, [text, other_start, other_end])
    assert same == pytest.approx(base, abs=1e-6)
    assert abs(changed - base) > 1e-3
    with torch.inference_mode():
        direct = model(input_ids=torch.tensor([ids[-1024:]])).logits[0, 0].item()
    assert base == pytest.approx(direct, abs=1e-5)


def test_scores_do_not_depend_on_batch_composition(model, tokenizer, tau2_sample, short_traces):
    texts = [render_trace(tokenizer, t, "personal") for t in tau2_sample + short_traces]
    texts += ["<|im_start|>user\nhi<|im_end|>\n", "<|im_start|>assistant\nok"]
    alone = [score_texts(model, tokenizer, [text])[0] for text in texts]
    order = list(range(len(texts)))
    random.Random(0).shuffle(order)
    for budget in (1, 3000, 100_000):
        shuffled = score_texts(model, tokenizer, [texts[i] for i in order], batch_tokens=budget)
        assert max(abs(shuffled[k] - alone[i]) for k, i in enumerate(order)) <= 1e-5
    together = score_trace_actions(model, tokenizer, short_traces, "personal")
    for trace in short_traces:
        separate = score_trace_actions(model, tokenizer, [trace], "personal", batch_tokens=2048)
        assert max(abs(separate[k] - together[k]) for k in separate) <= 1e-5


def test_length_batches_respect_the_budget_and_keep_every_row_once():
    lengths = [5, 300, 17, 300, 1, 1024, 64, 2000]
    batches = length_batches(lengths, 1024)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        widths = [lengths[i] for i in batch]
        assert widths == sorted(widths, reverse=True)
        assert len(batch) == 1 or widths[0] * len(batch) <= 1024
    assert [7] in batches  # longer than the budget: alone
    with pytest.raises(ValueError):
        length_batches(lengths, 0)


def test_models_that_do_not_pool_the_last_token_are_scored_window_by_window(tokenizer):
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=1024,
                        num_labels=1, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    bert = BertForSequenceClassification(config).eval()
    assert not pools_last_token(bert)
    trace = multi_call_trace()
    fast = score_trace_actions(bert, tokenizer, [trace], "personal")
    lengths: dict[str, int] = {}
    plan_action_rows(tokenizer, trace, "personal", one_pass=False, lengths=lengths)
    assert set(lengths) == {a.id for a in trace.actions()} and all(lengths.values())
    assert max_difference(fast,
                          per_action_scores(bert, tokenizer, [trace], "personal")) <= TOLERANCE
    with pytest.raises(ValueError, match="last token"):
        read_rows(bert, [Row((1, 2, 3), ((1, "inner"),))], pad_id=tokenizer.pad_token_id)


def test_empty_inputs(model, tokenizer):
    assert score_texts(model, tokenizer, []) == []
    assert score_trace_actions(model, tokenizer, [], "personal") == {}
    no_actions = Trace(id="quiet", messages=(Message("user", "hello"),))
    assert score_trace_actions(model, tokenizer, [no_actions], "personal") == {}
    with pytest.raises(ValueError, match="text 1 has no tokens"):
        score_texts(model, tokenizer, ["<|im_start|>user\nhi", ""])


@pytest.mark.parametrize("audience", ["personal", "shared"])
def test_one_tokenisation_serves_whole_traces_and_their_actions(tokenizer, tau2_sample,
                                                                 short_traces, audience):
    """``plan_trace_rows`` takes a whole trace's ids from the one tokenisation its actions need
    (all traces in one batch): the same ids and length as tokenising the trace's own rendering,
    and the same action rows as planning the trace's actions alone."""
    # A trace cut to its first messages fits the window whole (read inside its actions' row).
    cut = [replace(t, id=f"{t.id}-cut", messages=t.messages[:5]) for t in short_traces]
    traces = [*tau2_sample, *cut, multi_call_trace()]
    lengths: dict[str, int] = {}
    plan = scoring.plan_trace_rows(tokenizer, traces, audience, lengths=lengths)
    alone, counts = tokenize_counted(tokenizer, [render_trace(tokenizer, t, audience)
                                                 for t in traces])
    assert any(count > tokenizer.model_max_length for count in counts)  # some are cut
    assert any(count <= tokenizer.model_max_length for count in counts)  # some fit
    for trace, ids, count in zip(traces, alone, counts):
        assert lengths[trace.id] == count
        [(row, position)] = [(row, p) for row in plan.rows for p, key in row.reads
                             if key == (scoring.TRACE, trace.id)]
        assert list(row.ids[: position + 1]) == ids
        heads, windows = plan_action_rows(tokenizer, trace, audience)
        assert all(window in plan.rows for window in windows)
        action_reads = {key for row in heads for _, key in row.reads}
        assert action_reads <= {key for row in plan.rows for _, key in row.reads}
