"""README.md of every checkpoint: what the model is, what it learned from, how to use it.

This module gives its text; ``checkpoint.CheckpointWriter.finish`` writes it beside the seed's files
(weights, config, tokenizer, template, stats) before the archive is made, from the job's own
numbers: nothing in it is a placeholder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stash_pipeline.core.calibration import RewardStats
from stash_pipeline.core.failures import hide_server_paths

DATA_ROWS = (("train_pairs", "training pairs"), ("eval_pairs", "held-out pairs"),
             ("action_train_pairs", "action comparisons trained on"),
             ("action_eval_pairs", "held-out action comparisons"),
             ("tool_eval_pairs", "held-out tool-call comparisons"),
             ("excluded_cross_trace_pairs", "excluded: spanning both partitions"))
METRIC_ROWS = (("eval_accuracy", "held-out accuracy (0.5 is chance)"),
               ("action_eval_accuracy", "held-out action accuracy"),
               ("tool_eval_accuracy", "held-out tool-call accuracy"),
               ("final_loss", "final Bradley-Terry loss (last epoch)"), ("epochs", "epochs"),
               ("device", "trained on"))


def _value(value: Any) -> str:
    if value is None:
        return "null (no usable held-out pairs)"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def model_card(*, evaluator: str, audience: str, base_model: str, window: int,
               stored_dtype: str, metrics: Mapping[str, Any], reward_stats: RewardStats,
               action_reward_stats: RewardStats | None) -> str:
    """The card's Markdown. A local base model is named by its folder's name only: the card is
    downloaded by users, who have no business with the server's paths."""
    base_model = hide_server_paths(base_model)
    who = ("the shared evaluator (every account's opted-in traces)" if audience == "shared"
           else "a personal reward model (one account's own traces and feedback)")
    data = "\n".join(f"| {label} | {_value(metrics.get(key))} |" for key, label in DATA_ROWS
                     if key in metrics)
    results = "\n".join(f"| {label} | {_value(metrics.get(key))} |"
                        for key, label in METRIC_ROWS if key in metrics)
    credit = (f"Action credit: `tanh((raw - {action_reward_stats.mean:.6g}) / (2 * "
              f"{action_reward_stats.scale:.6g}))` (`action_reward_stats.json`), from -1 to +1."
              if action_reward_stats is not None else
              "This model was not trained on action comparisons: it has no action credit.")
    systems = ("; system messages are read, and the trace's evaluation context is passed as "
               "`evaluation_context=`" if audience == "shared"
               else "; the template leaves system messages out: this model was trained without "
                    "them")
    return f"""# Reward model `{evaluator}`

A Bradley-Terry reward model trained by stash-pipeline: {who}. It reads a rendered agent trace
and returns one number, its raw reward: higher is better, with no fixed scale. Compare scores of
this model with each other, never with another model's.

## Base model

`{base_model}`, loaded as `AutoModelForSequenceClassification` with `num_labels=1` and trained with
the loss `-log sigmoid(r(chosen) - r(rejected))`. The weights here are stored in `{stored_dtype}`.

## Data

| | pairs |
| --- | --- |
{data}

Held-out pairs come from separate source traces; they neither trained the model nor set its
display scale. Accuracy measures agreement with the preference supervision, not task success.

## Metrics

| | |
| --- | --- |
{results}

## Window

At most {window} tokens. Longer texts lose their beginning (the tokenizer truncates on the left),
so the end of the conversation, the part being judged, is kept.

## Render and score with plain transformers

The trace is rendered with the chat template saved here (`chat_template.jinja`, which the
tokenizer loads): OpenAI-style messages (`role`, `content`, assistant `tool_calls` as
`{{"name", "arguments"}}` or OpenAI's `{{"type": "function", "function": {{...}}}}`, the arguments a
JSON string of any spacing or an object: the template writes them alike){systems}, and the trace's
tools.

```python
import json
import math

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

path = "reward-model"
tokenizer = AutoTokenizer.from_pretrained(path)
model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
messages = [{{"role": "user", "content": "Move my flight to Friday."}},
            {{"role": "assistant", "content": "Which time on Friday would you like?"}}]
text = tokenizer.apply_chat_template(messages, tokenize=False)
inputs = tokenizer(text, return_tensors="pt", truncation=True, max_length={window})
with torch.no_grad():
    raw = model(**inputs).logits[0, 0].item()
stats = json.load(open(f"{{path}}/reward_stats.json"))
calibrated = 1 / (1 + math.exp(-(raw - stats["mean"]) / (stats["std"] or 1.0)))
print(raw, calibrated)
```

An action's reward (an assistant message's text, or one of its tool calls) is read the same way
from the conversation cut right after the action, rendered with `open_end=True` (a variable of the
chat template: the last assistant turn is left open). Candidate replies to one conversation are
ranked by the reward of the conversation each completes.

`calibrated` places the raw reward among this model's own training rewards (mean
{reward_stats.mean:.6g}, std {reward_stats.scale:.6g} in `reward_stats.json`): 0.5 at their mean.
It is not a probability of being correct. {credit}
"""

