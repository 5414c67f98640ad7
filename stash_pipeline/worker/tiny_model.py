"""A tiny random base model for demos, tests and benchmarks: nothing is downloaded.

A Qwen3 causal LM built from a config, with a byte-level BPE tokenizer trained on trace text,
saved like a real base checkpoint: loading it for classification goes through the real
``from_pretrained`` path and adds the score head. It learns from ratings but knows no language.

``python -m stash_pipeline.worker.tiny_model DIR [FILE ...]`` builds one into DIR from the text of
the given trace files (what ``scripts/main.sh`` does).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import (
    AddedToken,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3Config
from transformers.utils import logging as transformers_logging

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen adds these as non-special added tokens: they are split off before pre-tokenisation.
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>",
                "</think>"]
# "tiny" (tests, the embedded demo): 2 layers, 64 wide; "small" (CPU benchmarks): 4 layers, 256
# wide.
SHAPES = {
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16},
    "small": {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64},
}


def build_tokenizer(texts: Iterable[str], vocab_size: int = 1024,
                    added_tokens: Iterable[str] = ADDED_TOKENS) -> PreTrainedTokenizerFast:
    """Qwen's special and added tokens around a BPE vocabulary learnt from ``texts``."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bpe.add_tokens([AddedToken(t, special=False, normalized=False) for t in added_tokens])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")


def build_wordpiece_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A BERT-style tokenizer (lowercased WordPiece, ``[CLS] text [SEP]``) learnt from ``texts``:
    what an encoder such as MiniLM reads, for models of that family built from a config."""
    wordpiece = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=True)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    wordpiece.train_from_iterator(texts, trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=specials, show_progress=False))
    wordpiece.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=wordpiece, unk_token="[UNK]",
                                   pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
                                   mask_token="[MASK]")


def save_base_model(directory: Path, vocab_size: int, shape: str = "tiny", seed: int = 0,
                    context: int = 2048) -> None:
    """``context`` is the model's ``max_position_embeddings``: the worker's window is the shorter
    of it and the job's ``max_length``."""
    config = Qwen3Config(vocab_size=vocab_size, max_position_embeddings=context,
                         tie_word_embeddings=True, **SHAPES[shape])
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(directory)


def save_tiny_base_model(directory: Path, texts: Iterable[str], *, vocab_size: int = 1024,
                         shape: str = "tiny", context: int = 2048) -> Path:
    """The tokenizer and the model, saved to ``directory`` like a hub checkpoint."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(texts, vocab_size)
    tokenizer.save_pretrained(directory)
    save_base_model(directory, len(tokenizer), shape, context=context)
    return directory


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m stash_pipeline.worker.tiny_model",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("files", nargs="*", type=Path, help="trace files whose text trains the "
                        "tokenizer (default: the package's samples)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    args = parser.parse_args(argv)
    files = args.files or sorted((Path(__file__).parents[1] / "samples").glob("*.jsonl"))
    texts = [line for path in files for line in path.read_text().splitlines() if line.strip()]
    transformers_logging.disable_progress_bar()  # one shard of a tiny model: no bar to watch
    save_tiny_base_model(args.directory, texts, shape=args.shape)
    print(f"A tiny random Qwen3 base model ({args.shape} shape; not a trained language model) is "
          f"in {args.directory}.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
