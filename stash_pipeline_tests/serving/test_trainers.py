"""Plugging a downloaded checkpoint into the trainers people use: TRL's GRPO with the project's
reward function, and plain transformers (what any stack that serves sequence classifiers runs)
reproducing the served rewards."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from stash_pipeline.core.reward_requests import CandidatesRequest, ConversationRequest
from stash_pipeline.core.traces import Message, Trace
from stash_pipeline.serving.trl import RewardFunction
from stash_pipeline.worker.rewards import score_requests

pytestmark = pytest.mark.slow
PROMPT = [{"role": "system", "content": "Follow the refund policy."},
          {"role": "user", "content": "Refund order 7, please."}]
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "get_order", "arguments": "{\"order_id\": 7}"}}]}


@pytest.fixture(scope="module")
def reward(checkpoints) -> RewardFunction:
    return RewardFunction(checkpoints["personal"], device="cpu")


def test_the_reward_function_gives_the_served_numbers(reward, checkpoints):
    """Conversational completions of one prompt are candidates of one context; a text prompt is
    a user turn and its completion an assistant turn; ``output="calibrated"`` the scores."""
    completions = [[{"role": "assistant", "content": "Checking the order."}], [CALL],
                   [{"role": "assistant", "content": "No."}]]
    rewards = reward(prompts=[PROMPT] * 3, completions=completions, completion_ids=[[1]] * 3,
                     trainer_state=None, log_extra=None, log_metric=None, answer=["x"] * 3)
    context = Trace("c", (Message("system", PROMPT[0]["content"]),
                          Message("user", PROMPT[1]["content"])))
    from stash_pipeline.importers.openai_chat import convert_message

    candidates = tuple(convert_message(c[0], "c", 0) for c in completions)
    served = score_requests(reward.model, [CandidatesRequest(context, candidates)])[0]
    assert rewards == pytest.approx([c["raw"] for c in served["candidates"]], abs=1e-6)
    assert reward.__name__ == "stash_reward_model"

    text = reward(prompts=["Refund order 7?"], completions=["Done."])
    alone = score_requests(reward.model, [ConversationRequest(Trace("t", (
        Message("user", "Refund order 7?"), Message("assistant", "Done."))))])[0]
    assert text == pytest.approx([alone["raw"]], abs=1e-6)
    calibrated = RewardFunction(checkpoints["personal"], device="cpu", output="calibrated")
    assert calibrated(prompts=["Refund order 7?"], completions=["Done."]) == pytest.approx(
        [alone["calibrated"]], abs=1e-6)


# TRL 1.16's GRPOTrainer asks transformers a question transformers 5 renamed: TRL's code, not ours.
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_grpo_trains_a_tiny_policy_with_it(reward, pipeline_base_model, tmp_path):
    """A few GRPO steps of the tiny Qwen3 policy on the CPU, rewarded by the checkpoint."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(pipeline_base_model)
    policy = AutoModelForCausalLM.from_pretrained(pipeline_base_model)
    calls = []

    def counted(prompts, completions, **columns):
        calls.append(len(completions))
        return reward(prompts, completions, **columns)

    counted.__name__ = reward.__name__
    prompts = Dataset.from_list([{"prompt": f"Refund order {i}, please."} for i in range(4)])
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=8, max_steps=2, learning_rate=1e-3, logging_steps=1,
                      report_to="none", use_cpu=True, bf16=False, save_strategy="no", seed=0,
                      gradient_checkpointing=False)
    trainer = GRPOTrainer(model=policy, reward_funcs=counted, args=args, train_dataset=prompts,
                          processing_class=tokenizer)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    trainer.train()
    assert calls == [4, 4]
    logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert len(logged) == 2 and all(
        f"rewards/{reward.__name__}/mean" in entry for entry in logged)
    assert any(not p.detach().equal(before[n]) for n, p in policy.named_parameters())


def test_plain_transformers_reproduces_the_served_rewards(reward, checkpoints, tmp_path):
    """The downloaded archive loads as AutoModelForSequenceClassification with its tokenizer and
    chat template: a whole conversation, and an action (``open_end``: the template's variable
    that leaves the last assistant turn open), give the rewards the server gives."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    with tarfile.open(checkpoints["personal"]) as archive:
        archive.extractall(tmp_path, filter="data")
    path = Path(tmp_path) / "reward-model"
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
    # A personal model leaves system messages out.
    messages = [PROMPT[1], {"role": "assistant", "content": "Checking.",
                            "tool_calls": CALL["tool_calls"]}]

    def plain(**options) -> float:
        text = tokenizer.apply_chat_template(messages, tokenize=False, **options)
        inputs = tokenizer(text, return_tensors="pt", truncation=True,
                           max_length=tokenizer.model_max_length, add_special_tokens=False)
        with torch.no_grad():
            return model(**inputs).logits[0, 0].item()

    served = score_requests(reward.model, [ConversationRequest(Trace("t", (
        Message("system", PROMPT[0]["content"]), Message("user", PROMPT[1]["content"]),
        reward_message(messages[1]))))])[0]
    assert plain() == pytest.approx(served["raw"], abs=1e-4)
    call = next(a for a in served["actions"] if a["action_id"] == "m2.call0")
    assert plain(open_end=True) == pytest.approx(call["raw"], abs=1e-4)


def reward_message(message: dict) -> Message:
    from stash_pipeline.importers.openai_chat import convert_message

    return convert_message(message, "m", 0)
