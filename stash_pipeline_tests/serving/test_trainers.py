"""Plugging a downloaded checkpoint into the trainers people use: TRL's GRPO three ways (the
checkpoint folder itself, the project's in-process reward function, the HTTP reward function that
asks the service), and plain transformers (what any stack that serves sequence classifiers runs)
reproducing the served rewards."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from stash_pipeline.core.reward_requests import CandidatesRequest, ConversationRequest
from stash_pipeline.core.traces import Message, Trace
from stash_pipeline.serving.trl import HttpRewardFunction, RewardFunction
from stash_pipeline.worker.rewards import score_requests
from stash_pipeline_tests.support.serving_helpers import (
    Deployment,
    conversation,
    import_conversations,
    succeeded_model,
)

pytestmark = pytest.mark.slow
PROMPT = [{"role": "system", "content": "Follow the refund policy."},
          {"role": "user", "content": "Refund order 7, please."}]
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "get_order", "arguments": "{\"order_id\": 7}"}}]}
# The policy's own template (the tiny base model has none): ChatML with a generation prompt.
POLICY_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                   "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def reward(checkpoints) -> RewardFunction:
    return RewardFunction(checkpoints["personal"], device="cpu")


@pytest.fixture(scope="module")
def folder(checkpoints, tmp_path_factory) -> Path:
    """The personal checkpoint unpacked: what a user downloads."""
    where = tmp_path_factory.mktemp("downloaded")
    with tarfile.open(checkpoints["personal"]) as archive:
        archive.extractall(where, filter="data")
    return where / "reward-model"


def test_the_reward_function_gives_the_served_numbers(reward, checkpoints):
    """Conversational completions of one prompt are candidates of one context, each the whole
    reward of the conversation it completes; a text prompt is a user turn and its completion an
    assistant turn; ``output="calibrated"`` the scores."""
    completions = [[{"role": "assistant", "content": "Checking the order."}], [CALL],
                   [{"role": "assistant", "content": "No."}]]
    rewards = reward(prompts=[PROMPT] * 3, completions=completions, completion_ids=[[1]] * 3,
                     trainer_state=None, log_extra=None, log_metric=None, answer=["x"] * 3)
    context = Trace("c", (Message("system", PROMPT[0]["content"]),
                          Message("user", PROMPT[1]["content"])))
    candidates = tuple(reward_message(c[0]) for c in completions)
    served = score_requests(reward.model, [CandidatesRequest(context, candidates,
                                                             actions=False)])[0]
    assert rewards == pytest.approx([c["raw"] for c in served["candidates"]], abs=1e-6)
    assert reward.__name__ == "stash_reward_model"

    text = reward(prompts=["Refund order 7?"], completions=["Done."])
    alone = score_requests(reward.model, [ConversationRequest(Trace("t", (
        Message("user", "Refund order 7?"), Message("assistant", "Done."))), actions=False)])[0]
    assert text == pytest.approx([alone["raw"]], abs=1e-6)
    calibrated = RewardFunction(checkpoints["personal"], device="cpu", output="calibrated")
    assert calibrated(prompts=["Refund order 7?"], completions=["Done."]) == pytest.approx(
        [alone["calibrated"]], abs=1e-6)


# TRL 1.16's GRPOTrainer asks transformers a question transformers 5 renamed: TRL's code, not ours.
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_grpo_rewards_the_same_three_ways(served: Deployment, reward, folder, checkpoints,
                                          pipeline_base_model, tmp_path):
    """A GRPO step of the tiny Qwen3 policy on the CPU, on conversational prompts with a system
    message, rewarded by the checkpoint folder as TRL loads it, by ``RewardFunction`` and by
    ``HttpRewardFunction`` through the API: every completion gets the same reward from each
    (the folder's template leaves the system message out, as the personal model was trained)."""
    if "sqlite" not in str(served.api.store.engine.url):
        pytest.skip("the trainer's side is the same whatever the database: run once, on SQLite")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    ana, client = served.account("ana")
    import_conversations(client, conversation("t1"))
    model_id = succeeded_model(served, client, ana, checkpoints["personal"], ["t1"])
    key = client.headers["Authorization"].split()[1]
    http = HttpRewardFunction(served.api.url, key=key, model=model_id)
    tokenizer = AutoTokenizer.from_pretrained(pipeline_base_model)
    tokenizer.chat_template = POLICY_TEMPLATE
    policy = AutoModelForCausalLM.from_pretrained(pipeline_base_model)
    prompts = Dataset.from_list([{"prompt": [PROMPT[0], {
        "role": "user", "content": f"Refund order {i}, please."}]} for i in range(2)])
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=8, max_steps=1, learning_rate=1e-3, logging_steps=1,
                      report_to="none", use_cpu=True, bf16=False, save_strategy="no", seed=0,
                      gradient_checkpointing=False)
    trainer = GRPOTrainer(model=policy, reward_funcs=[str(folder), reward, http], args=args,
                          train_dataset=prompts, processing_class=tokenizer)
    computed = []
    calculate = trainer._calculate_rewards

    def recorded(*arguments, **options):
        computed.append(calculate(*arguments, **options).clone())
        return computed[-1]

    trainer._calculate_rewards = recorded
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    trainer.train()
    http.close()
    assert len(computed) == 1 and computed[0].shape == (4, 3)
    by_folder, in_process, over_http = computed[0].T.tolist()
    assert by_folder == pytest.approx(in_process, rel=1e-5, abs=1e-5)
    assert over_http == pytest.approx(in_process, rel=1e-5, abs=1e-5)
    logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert all(f"rewards/{name}/mean" in logged[0]
               for name in ("reward-model", reward.__name__, http.__name__))
    assert any(not p.detach().equal(before[n]) for n, p in policy.named_parameters())


def test_plain_transformers_reproduces_the_served_rewards(reward, checkpoints, tmp_path):
    """The downloaded archive loads as AutoModelForSequenceClassification with its tokenizer and
    chat template: a whole conversation, and an action (``open_end``: the template's variable
    that leaves the last assistant turn open), give the rewards the server gives; the system
    message is left out by the template itself (a personal model is trained without it)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    with tarfile.open(checkpoints["personal"]) as archive:
        archive.extractall(tmp_path, filter="data")
    path = Path(tmp_path) / "reward-model"
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
    messages = [*PROMPT, {"role": "assistant", "content": "Checking.",
                          "tool_calls": CALL["tool_calls"]}]

    def plain(**options) -> float:
        text = tokenizer.apply_chat_template(messages, tokenize=False, **options)
        inputs = tokenizer(text, return_tensors="pt", truncation=True,
                           max_length=tokenizer.model_max_length, add_special_tokens=False)
        with torch.no_grad():
            return model(**inputs).logits[0, 0].item()

    served = score_requests(reward.model, [ConversationRequest(Trace("t", (
        Message("system", PROMPT[0]["content"]), Message("user", PROMPT[1]["content"]),
        reward_message(messages[2]))))])[0]
    assert plain() == pytest.approx(served["raw"], rel=1e-6, abs=1e-6)
    call = next(a for a in served["actions"] if a["action_id"] == "m2.call0")
    assert plain(open_end=True) == pytest.approx(call["raw"], rel=1e-6, abs=1e-6)


def reward_message(message: dict) -> Message:
    from stash_pipeline.importers.openai_chat import convert_message

    return convert_message(message, "m", 0)
