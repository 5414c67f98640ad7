"""Loading the base model and tokenizer the way training and scoring both need them."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from pathlib import Path
from typing import Any, ContextManager

import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

from stash_pipeline.core.errors import StashError
from stash_pipeline.core.training_settings import MAX_LENGTH
from stash_pipeline.worker.readout import reads_inner_tokens
from stash_pipeline.worker.render import choose_template

# Sequence classification pools at the last token that is not the pad id, so the pad id must never
# be a token a rendering can end with (renderings end with text, </tool_call> or a newline).
PAD_TOKEN = "<|endoftext|>"
TOKENS_A_RENDERING_CAN_END_WITH = ("<|im_end|>", "</tool_call>")
# What a local model directory needs before transformers is asked to load it: without these,
# transformers guesses at other tokenizer formats and fails with an unrelated message
# ("You need to have sentencepiece or tiktoken installed").
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.txt",
                   "vocab.json")


logger = logging.getLogger(__name__)


class ModelLoadError(StashError):
    """A base model or checkpoint that cannot be loaded; the message names the path and why."""


def pick_device() -> str:
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def _is_local(path_or_id: str) -> bool:
    path = Path(path_or_id)
    return path.is_absolute() or path_or_id.startswith((".", "~")) or path.exists()


HUB_PROBE_TIMEOUT_S = 5.0  # one request to the hub before loading a model it must download


def check_hub_model(model_id: str) -> None:
    """For a Hugging Face id the local cache does not hold: one short request to the hub first,
    so a machine without network fails in seconds with the cause (not after minutes of the
    library's retries with the last of them as the reason), as does an id the hub does not know.
    """
    from huggingface_hub import constants, try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(model_id, "config.json")
    except ValueError:  # not a valid repository id
        raise ModelLoadError(f"model {model_id}: neither a local directory nor a Hugging Face "
                             "id (give the directory's path, or an id such as "
                             "Qwen/Qwen3-0.6B)") from None
    if isinstance(cached, str):
        return  # in the cache: loading reads it from there
    fix = ("download it once where there is network (it is cached after), or give a local "
           "model directory as the base model")
    if constants.HF_HUB_OFFLINE:
        raise ModelLoadError(f"base model {model_id}: not in the local cache, and HF_HUB_OFFLINE "
                             f"forbids downloading it: {fix}")
    import httpx

    endpoint = constants.ENDPOINT.rstrip("/")
    try:
        answer = httpx.head(f"{endpoint}/api/models/{model_id}", timeout=HUB_PROBE_TIMEOUT_S,
                            follow_redirects=True)
    except httpx.HTTPError as error:
        raise ModelLoadError(f"base model {model_id}: not in the local cache and the hub "
                             f"({endpoint}) is unreachable ({type(error).__name__}): "
                             f"{fix}") from None
    if answer.status_code in (401, 403, 404):
        raise ModelLoadError(f"base model {model_id}: the hub ({endpoint}) has no such model, "
                             f"or it is gated (answered {answer.status_code}): check the id, or "
                             "set HF_TOKEN for a gated model")


def _checked_source(path_or_id: str, *, needs_config: bool, needs_tokenizer: bool) -> None:
    """Fail early, naming the path and what it lacks, for a local directory that holds no model,
    and (``check_hub_model``) for a Hugging Face id that cannot be downloaded."""
    if not _is_local(path_or_id):
        check_hub_model(path_or_id)
        return
    path = Path(path_or_id)
    if not path.is_dir():
        raise ModelLoadError(f"model {path_or_id}: no such directory")
    held = sorted(p.name for p in path.iterdir())
    held_text = ", ".join(held[:10]) if held else "nothing: the directory is empty"
    if needs_config and not (path / "config.json").is_file():
        raise ModelLoadError(f"model {path_or_id}: the directory has no config.json (it holds "
                             f"{held_text})")
    if needs_tokenizer and not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ModelLoadError(f"model {path_or_id}: the directory has no tokenizer, none of "
                             f"{', '.join(TOKENIZER_FILES)} (it holds {held_text})")


def load_config(path_or_id: str) -> Any:
    _checked_source(path_or_id, needs_config=True, needs_tokenizer=False)
    try:
        return AutoConfig.from_pretrained(path_or_id)
    except (OSError, ValueError, KeyError) as error:
        raise ModelLoadError(f"model {path_or_id}: cannot read its config: {error}") from error


def load_tokenizer(path_or_id: str, max_length: int = MAX_LENGTH, *, config: Any = None) -> Any:
    """The tokenizer with left truncation (persisted by save_pretrained) and a safe pad token.

    truncation_side and padding_side are passed to from_pretrained because setting them afterwards
    is not saved (see the ML notes). The window is ``max_length``, or less when the model's
    positions end sooner (BERT: 512). The chat template is the one the model reads natively
    (``render.choose_template``). ``reward_add_special_tokens`` (read by ``tokenize``) is set
    for models read at a sequence's end by their own forward: they get their special tokens.
    """
    _checked_source(path_or_id, needs_config=False, needs_tokenizer=True)
    if config is None and (not _is_local(path_or_id)
                           or (Path(path_or_id) / "config.json").is_file()):
        # A tokenizer saved alone has none: the window is max_length.
        config = load_config(path_or_id)
    positions = getattr(config, "max_position_embeddings", None)
    window = (min(max_length, positions) if isinstance(positions, int) and positions > 0
              else max_length)
    try:
        probe = AutoTokenizer.from_pretrained(path_or_id)
        pad_token = _pad_token(probe, path_or_id)
        tokenizer = AutoTokenizer.from_pretrained(
            path_or_id, truncation_side="left", padding_side="right", model_max_length=window,
            pad_token=pad_token,
        )
    except (OSError, ValueError, ImportError) as error:
        raise ModelLoadError(f"model {path_or_id}: cannot load its tokenizer: {error}") from error
    tokenizer.reward_add_special_tokens = config is not None and not reads_inner_tokens(config)
    choose_template(tokenizer)  # after the pad token and special tokens: the check reads both
    return tokenizer


def _pad_token(tokenizer: Any, path_or_id: str) -> str:
    vocab = tokenizer.get_vocab()
    if PAD_TOKEN in vocab:
        return PAD_TOKEN
    for candidate in (tokenizer.pad_token, tokenizer.eos_token):
        if candidate and candidate not in TOKENS_A_RENDERING_CAN_END_WITH:
            return candidate
    raise ModelLoadError(
        f"model {path_or_id}: its tokenizer has no pad token distinct from the tokens a "
        f"rendering can end with {TOKENS_A_RENDERING_CAN_END_WITH}"
    )


def load_reward_model(path_or_id: str, *, dtype: torch.dtype = torch.float32,
                      device: str | None = None, tokenizer: Any = None) -> Any:
    """AutoModelForSequenceClassification with one output, its pad id set, on ``device``.

    fp32 by default: transformers 5 loads a bf16 checkpoint as bf16 otherwise, and bf16 weights do
    not learn with AdamW at 1e-5 (updates underflow); bf16 comes from autocast instead.
    """
    _checked_source(path_or_id, needs_config=True, needs_tokenizer=tokenizer is None)
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(path_or_id)
    # transformers prints a LOAD REPORT table of every weight the checkpoint lacks: for a base
    # model that is the new score head, as expected, and alarming to read. What is unusual is
    # said in worker.log instead (report_loading).
    # (A filter, not a higher level: transformers checks a tensor-parallel plan, and warns of
    # every layer it leaves unsharded, when its logger's level is WARNING or above.)
    transformers_logger = logging.getLogger("transformers.modeling_utils")
    transformers_logger.addFilter(_without_load_report)
    try:
        model, loading = AutoModelForSequenceClassification.from_pretrained(
            path_or_id, num_labels=1, dtype=dtype, output_loading_info=True)
    except (OSError, ValueError, KeyError) as error:
        raise ModelLoadError(f"model {path_or_id}: cannot load its weights: {error}") from error
    finally:
        transformers_logger.removeFilter(_without_load_report)
    report_loading(model, loading, path_or_id)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.to(device or pick_device())
    model.eval()
    return model


def _without_load_report(record: logging.LogRecord) -> bool:
    return "LOAD REPORT" not in str(record.msg)


def report_loading(model: Any, loading: dict[str, Any], path_or_id: str,
                   shown: int = 5) -> None:
    """What loading left to chance, in worker.log: a new score head (what a base model lacks) at
    INFO; any other weight the checkpoint lacks, or holds in another shape, as a WARNING; weights
    the model does not use (a language-model head) at INFO."""
    def listed(keys: list[str]) -> str:
        return ", ".join(keys[:shown]) + (f" and {len(keys) - shown} more" if len(keys) > shown
                                          else "")

    base = f"{model.base_model_prefix}."
    missing = sorted(loading.get("missing_keys") or ())
    head = [key for key in missing if not key.startswith(base)]
    others = [key for key in missing if key.startswith(base)]
    mismatched = sorted(str(entry[0]) for entry in loading.get("mismatched_keys") or ())
    unused = sorted(loading.get("unexpected_keys") or ())
    if head:
        logger.info(f"model {path_or_id}: a new score head ({listed(head)}), randomly "
                    "initialised for training")
    if others or mismatched:
        logger.warning(f"model {path_or_id}: weights newly initialised, not from its "
                       f"checkpoint: {listed(others + mismatched)}")
    if unused:
        logger.info(f"model {path_or_id}: checkpoint weights a reward model does not use: "
                    f"{listed(unused)}")


def cast_parameters(model: Any, dtype: torch.dtype) -> None:
    """The weights in ``dtype``, as ``from_pretrained(dtype=...)`` would load them: buffers such as
    the rotary frequencies stay fp32 (``model.to(dtype)`` would round them and shift every
    score)."""
    for parameter in model.parameters():
        if parameter.is_floating_point() and parameter.dtype != dtype:
            parameter.data = parameter.data.to(dtype)


def stored_dtype(config: Any) -> torch.dtype:
    """The dtype a model's checkpoint is stored in (Qwen3-0.6B: bf16); float32 when it says none."""
    dtype = getattr(config, "dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32


def scoring_precision(choice: str, device: str) -> ContextManager[Any]:
    """How scores are computed, from the settings' ``score_dtype``: "auto" is bf16 autocast on an
    accelerator that supports it and fp32 elsewhere; "bfloat16" asks for autocast anywhere it is
    supported; "float32" for none. Weights stay as loaded (fp32 holds a bf16 checkpoint exactly):
    autocast runs the matrix products in bf16 and keeps norms and the residual stream in fp32,
    which agrees with fp32 better than bf16 weights do (docs/worker.md). One context around many
    forwards casts each weight once."""
    return autocast(device, _wants_bf16(choice, device))


def _wants_bf16(choice: str, device: str) -> bool:
    return choice == "bfloat16" or (choice == "auto" and device != "cpu")


def scoring_precision_note(choice: str, device: str) -> str:
    """The log line that says which precision scores are computed in, and why when bf16 was asked
    for and the device cannot run it (a CPU without AVX512-BF16 or AMX: fp32 instead)."""
    if not _wants_bf16(choice, device):
        return f"scores computed in float32 (score_dtype {choice}, device {device})"
    if supports_bf16(device):
        return f"scores computed under bfloat16 autocast (score_dtype {choice}, device {device})"
    return (f"score_dtype {choice} asks for bfloat16 but device {device} has no bf16 support "
            f"({BF16_FEATURE[device] if device in BF16_FEATURE else 'not supported'}): "
            "scores computed in float32")


def tokenize(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Token ids, cut from the left to the tokenizer's max length: the same in training and scoring.

    A decoder read at inner tokens gets no special tokens: the rendering already holds every one it
    reads, and one-pass action reads need a text's tokens to begin the longer text's. Other models
    (BERT) get their own ([CLS] ... [SEP]), kept by the truncation.
    """
    return tokenize_counted(tokenizer, texts)[0]


def tokenize_counted(tokenizer: Any, texts: list[str]) -> tuple[list[list[int]], list[int]]:
    """``tokenize``'s ids and each text's length before the cut: a text longer than the window
    (``tokenizer.model_max_length``) lost its beginning. Without special tokens one untruncated
    pass gives both (left truncation keeps the last tokens); with them (BERT), the truncated ids
    come from the tokenizer, which keeps them."""
    if not texts:
        return [], []  # the tokenizer rejects an empty batch
    special = getattr(tokenizer, "reward_add_special_tokens", False)
    window = tokenizer.model_max_length
    # verbose=False: the "longer than the maximum" warning is wrong here, we truncate ourselves.
    full = [list(ids) for ids in tokenizer(list(texts), add_special_tokens=special,
                                           truncation=False, verbose=False)["input_ids"]]
    lengths = [len(ids) for ids in full]
    if not special:
        return [ids[-window:] if len(ids) > window else ids for ids in full], lengths
    cut = tokenizer(list(texts), add_special_tokens=True, truncation=True, max_length=window)
    return [list(ids) for ids in cut["input_ids"]], lengths


# What a device needs for bf16, as the skip reasons and the fallback log line name it.
BF16_FEATURE = {
    "cuda": "torch.cuda.is_bf16_supported() is False",
    "cpu": "torch.ops.mkldnn._is_mkldnn_bf16_supported() is False: "
           "the CPU lacks AVX512-BF16 and AMX",
}


def supports_bf16(device: str) -> bool:
    """Whether bf16 autocast runs on ``device``: the one decision the worker and the tests share."""
    if device == "cuda":
        return torch.cuda.is_bf16_supported()
    if device == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return False  # mps: fp32, the safe choice


def autocast(device: str, enabled: bool = True) -> ContextManager[Any]:
    """bf16 autocast over fp32 master weights where the device supports it, else a no-op."""
    if enabled and supports_bf16(device):
        return torch.autocast(device_type=device, dtype=torch.bfloat16)
    return nullcontext()
