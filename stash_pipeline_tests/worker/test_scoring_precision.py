"""bf16 scoring (autocast, the default on accelerators) ranks real traces as fp32 does."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3Config

from stash_pipeline.core.calibration import RewardStats
from stash_pipeline.core.ranking import kendall_tau
from stash_pipeline.importers import read_path
from stash_pipeline.worker.modeling import (
    BF16_FEATURE,
    load_reward_model,
    load_tokenizer,
    supports_bf16,
)
from stash_pipeline.worker.scoring import RewardModel
from stash_pipeline_tests.support.tiny_models import (
    AGENTPROCESSBENCH,
    build_tokenizer,
    tau2_traces,
    write_checkpoint,
)

pytestmark = pytest.mark.slow
STATS = RewardStats(mean=0.0, std=1.0, count=2)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """The benchmarks' model shape (4 layers, 256 wide), default initialisation, a unit-variance
    head."""
    base = tmp_path_factory.mktemp("base")
    build_tokenizer().save_pretrained(base)
    tokenizer = load_tokenizer(str(base))
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=256, intermediate_size=768,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=64, max_position_embeddings=2048, tie_word_embeddings=True)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(base)
    model = load_reward_model(str(base), device="cpu", tokenizer=tokenizer)
    with torch.no_grad():
        model.score.weight.normal_(0.0, 1.0)
    return write_checkpoint(model, tokenizer, tmp_path_factory.mktemp("job") / "reward-model",
                            audience="personal", reward_stats=STATS, action_reward_stats=STATS)


# Asked the way the worker decides it; on a CPU without bf16 the fallback is tested instead
# (test_job.py: bf16 asked for, fp32 used, the log says so).
needs_cpu_bf16 = pytest.mark.skipif(not supports_bf16("cpu"),
                                    reason=f"no bf16 on this CPU ({BF16_FEATURE['cpu']})")


@needs_cpu_bf16
def test_bf16_scores_rank_real_traces_as_fp32_does(checkpoint):
    apb = [record.trace for record in read_path(AGENTPROCESSBENCH, format="agentprocessbench")]
    traces = random.Random(0).sample(apb, 40) + tau2_traces(limit=20)
    scores, actions = {}, {}
    for precision in ("float32", "bfloat16"):
        model = RewardModel(checkpoint, device="cpu", score_dtype=precision)
        scores[precision] = model.score_traces(traces)
        actions[precision] = model.score_actions(traces[:12])
    keys = sorted(actions["float32"])
    exact, fast = scores["float32"], scores["bfloat16"]
    exact_actions, fast_actions = ([actions[p][k] for k in keys] for p in ("float32", "bfloat16"))
    assert exact != fast  # bf16 really ran
    assert kendall_tau(exact, fast) >= 0.99
    assert kendall_tau(exact_actions, fast_actions) >= 0.99
    # The largest difference, against the spread of the scores (recorded in docs/worker.md).
    spread = max(exact) - min(exact)
    largest = max(abs(a - b) for a, b in zip(exact + exact_actions, fast + fast_actions))
    print(f"largest difference {largest:.4f} on a spread of {spread:.2f}; "
          f"tau {kendall_tau(exact, fast):.4f} (traces), "
          f"{kendall_tau(exact_actions, fast_actions):.4f} (actions)")
    assert largest <= 0.01 * spread


def test_kendall_tau():
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == 1.0
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    assert kendall_tau([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / (3 * 2) ** 0.5)
    with pytest.raises(ValueError):
        kendall_tau([1], [1, 2])
