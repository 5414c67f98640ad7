"""The fast decoder path gives the model's own rewards, losses and gradients: in fp32 to float
rounding, and with its bf16 compute copy as close to autocast over the modules as autocast is to
itself across kernels."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from stash_pipeline.worker import decoder
from stash_pipeline.worker.decoder import DecoderWeights, decoder_rewards, runs_fast, training_copy
from stash_pipeline.worker.readout import read_rewards, right_padded, tree_attention
from stash_pipeline.worker.train import CPU_BACKWARD_TOKENS, EncodedPair, make_optimizer, train_step
from stash_pipeline_tests.support.tiny_models import SMALL_DECODER_TYPES, small_decoder_classifier
from stash_pipeline_tests.support.worker_fixtures import mixed_pairs

SEQUENCES = [[5 + (7 * i) % 90 for i in range(120)], [3 + (11 * i) % 90 for i in range(75)], [9, 4]]
READS = [(0, 119), (0, 40), (0, 0), (1, 74), (1, 30), (2, 1), (0, 40)]
# Row 0 shares its first 40 tokens with a branch from token 60 on: a tree row.
TREE = ([(60, 39)], [], [])


@pytest.fixture(params=["autograd", "fused"])
def layers(request, monkeypatch) -> str:
    """Both ways a fast decoder's layers train, each on this CPU: autograd's backward over
    ``layer_forward`` (a device in ``decoder.AUTOGRAD_LAYER_DEVICES``) and ``_FusedLayer``'s
    written-out one (every other device)."""
    monkeypatch.setattr(decoder, "AUTOGRAD_LAYER_DEVICES",
                        frozenset({"cpu"}) if request.param == "autograd" else frozenset())
    return request.param


@pytest.fixture(params=["last-layer-at-reads", "whole-last-layer"])
def last_layer(request, monkeypatch) -> str:
    """Both ways the fast decoder runs its last layer, each on this CPU: at the read tokens only
    (a device in ``decoder.LAST_LAYER_AT_READS_DEVICES``, the CPU's default) and over every
    token (every other device)."""
    monkeypatch.setattr(decoder, "LAST_LAYER_AT_READS_DEVICES",
                        frozenset({"cpu"}) if request.param == "last-layer-at-reads"
                        else frozenset())
    return request.param


def test_runs_fast_for_the_llama_family_only():
    assert set(SMALL_DECODER_TYPES) == decoder.FAST_DECODER_TYPES
    assert all(runs_fast(small_decoder_classifier(kind)) for kind in SMALL_DECODER_TYPES)
    from transformers import AutoModelForSequenceClassification, BertConfig

    bert = AutoModelForSequenceClassification.from_config(BertConfig(
        vocab_size=97, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, num_labels=1))
    assert not runs_fast(bert)


@pytest.mark.parametrize("model_type", SMALL_DECODER_TYPES)
@pytest.mark.parametrize("tree", [False, True], ids=["plain", "tree"])
def test_rewards_equal_the_models_own_forward(model_type, tree, last_layer):
    model = small_decoder_classifier(model_type).eval()
    ids, mask = right_padded(SEQUENCES, 0, "cpu")
    rows, positions = zip(*READS)
    shape = tree_attention(TREE, [len(s) for s in SEQUENCES], ids.shape[1], "cpu") if tree else None
    with torch.no_grad():
        theirs = read_rewards(model, ids, mask, rows, positions, shape)
        ours = decoder_rewards(model, DecoderWeights(model, torch.float32), ids, rows, positions,
                               shape)
        assert torch.allclose(ours, theirs, atol=1e-5), (ours - theirs).abs().max()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            autocast = read_rewards(model, ids, mask, rows, positions, shape)
            copied = decoder_rewards(model, DecoderWeights(model, torch.bfloat16), ids, rows,
                                     positions, shape)
    # Llama and Qwen2 give autocast's numbers exactly; Qwen3's fused q/k norm rounds once less.
    assert torch.allclose(copied, autocast, atol=1e-3), (copied - autocast).abs().max()


def step_gradients(model, pairs, *, fast: bool, dtype: torch.dtype, budget: int | None):
    """One training step's loss and every parameter's gradient, through the fast decoder with a
    compute copy in ``dtype``, or through the modules (under autocast for bf16)."""
    model = copy.deepcopy(model)
    with training_copy(model, dtype) if fast else _no_copy() as weights:
        loss = train_step(model, make_optimizer(model, "cpu"), pairs, device="cpu", pad_id=0,
                          use_autocast=dtype == torch.bfloat16, backward_tokens=budget,
                          copy=weights)
        return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


class _no_copy:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["qwen3", "qwen2", "llama"])
def test_a_step_has_todays_loss_and_gradients(model_type, layers, last_layer):
    """Today's exact path: the modules, a group of at most two windows at a time. The fast path:
    the compute copy, the whole batch in one forward and backward."""
    model = small_decoder_classifier(model_type).train()
    pairs = mixed_pairs()[:4]
    today_loss, today = step_gradients(model, pairs, fast=False, dtype=torch.float32,
                                       budget=CPU_BACKWARD_TOKENS)
    loss, ours = step_gradients(model, pairs, fast=True, dtype=torch.float32, budget=None)
    assert loss == pytest.approx(today_loss, abs=1e-6)
    assert ours.keys() == today.keys()
    for name, gradient in ours.items():
        assert torch.allclose(gradient, today[name], atol=1e-6, rtol=1e-4), name
    # bf16: the copy against autocast over the modules, to bf16's rounding.
    auto_loss, auto = step_gradients(model, pairs, fast=False, dtype=torch.bfloat16,
                                     budget=CPU_BACKWARD_TOKENS)
    loss, ours = step_gradients(model, pairs, fast=True, dtype=torch.bfloat16, budget=None)
    assert loss == pytest.approx(auto_loss, abs=2e-3)
    for name, gradient in ours.items():
        scale = auto[name].abs().max().item()
        assert (gradient - auto[name]).abs().max().item() <= 0.05 * scale + 1e-6, name


def test_a_device_trains_through_the_layers_chosen_for_it(monkeypatch):
    """A device in ``AUTOGRAD_LAYER_DEVICES`` trains with no ``_FusedLayer`` (autograd's backward
    over ``layer_forward``); any other device through the fused layers. None is listed today:
    the CPU measured no slower fused (docs/worker.md, "On this CPU")."""
    assert decoder.AUTOGRAD_LAYER_DEVICES == frozenset()
    fused_calls = []
    apply = decoder._FusedLayer.apply
    monkeypatch.setattr(decoder._FusedLayer, "apply",
                        lambda *args: fused_calls.append(1) or apply(*args))
    pairs = mixed_pairs()[:4]
    for devices in (frozenset({"cpu"}), frozenset()):
        monkeypatch.setattr(decoder, "AUTOGRAD_LAYER_DEVICES", devices)
        model = small_decoder_classifier("qwen3").train()
        with training_copy(model, torch.bfloat16) as weights:
            train_step(model, make_optimizer(model, "cpu", weights), pairs, device="cpu",
                       pad_id=0, backward_tokens=None, copy=weights)
        assert bool(fused_calls) == (not devices), devices


def step_flops(pairs: list[EncodedPair]) -> int:
    """The matrix products' FLOPs of one bf16 training step of the small Qwen3 on this CPU."""
    from torch.utils.flop_counter import FlopCounterMode

    model = small_decoder_classifier("qwen3").train()
    counter = FlopCounterMode(display=False)
    with training_copy(model, torch.bfloat16) as weights, counter:
        train_step(model, make_optimizer(model, "cpu", weights), pairs, device="cpu", pad_id=0,
                   backward_tokens=None, copy=weights)
    return counter.get_total_flops()


def test_the_cpu_runs_the_last_layer_at_the_read_tokens_only(monkeypatch, layers):
    """A reward is the score head on one token's final state: on this CPU, where the arithmetic
    bounds a step, the last layer runs its queries, attention output, o and MLP at the read
    tokens only (``decoder.LAST_LAYER_AT_READS_DEVICES``). Of the small Qwen3's three layers a
    step's matrix products then cost two, plus the last one's keys and values (a ninth of a
    layer) and the few read tokens: about 0.70 of the whole layers' (issue 54: the fused layers
    ran the last layer whole, 28% more arithmetic a pair on the benchmark's 4-layer model)."""
    assert "cpu" in decoder.LAST_LAYER_AT_READS_DEVICES
    pairs = mixed_pairs()[:4]
    at_reads = step_flops(pairs)
    monkeypatch.setattr(decoder, "LAST_LAYER_AT_READS_DEVICES", frozenset())
    whole = step_flops(pairs)
    assert at_reads <= 0.75 * whole, (at_reads, whole)


@pytest.mark.slow
def test_training_keeps_fp32_master_weights_and_releases_them(layers):
    """bf16 weights would not learn at AdamW's 1e-5 (updates underflow): the master weights and the
    optimizer stay fp32 and take updates far under bf16's resolution; after training every
    parameter has its own storage again (a checkpoint saves them apart)."""
    model = small_decoder_classifier("qwen3").train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = make_optimizer(model, "cpu")
    rng = random.Random(0)
    pairs = [EncodedPair([rng.randrange(1, 97) for _ in range(30)],
                         [rng.randrange(1, 97) for _ in range(20)]) for _ in range(4)]
    with training_copy(model, torch.bfloat16) as weights:
        assert weights is not None and weights.weights.flat.dtype == torch.bfloat16
        train_step(model, optimizer, pairs, device="cpu", pad_id=0, copy=weights)
        q = model.model.layers[0].self_attn.q_proj.weight
        assert q.dtype == torch.float32 and q.grad is not None
    change = (q.detach() - before["model.layers.0.self_attn.q_proj.weight"]).abs()
    # About lr = 1e-5 per weight, where bf16 resolves 2^-8 of a weight's size.
    assert 0 < change.max().item() < 2e-5
    storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    assert len(storages) == len(list(model.parameters()))
    assert all(p.grad is None for p in decoder.master_tensors(model))


def test_reading_reuses_one_compute_copy_while_the_weights_stay_the_same():
    from stash_pipeline.worker.batching import Row, read_rows, scoring_weights

    model = small_decoder_classifier("qwen3").eval()
    rows = [Row(tuple(SEQUENCES[0]), ((119, "a"),))]
    first = read_rows(model, rows, pad_id=0)
    copy = scoring_weights(model, torch.device("cpu"))
    assert scoring_weights(model, torch.device("cpu")) is copy
    with torch.autocast("cpu", dtype=torch.bfloat16):  # another precision: another copy
        assert scoring_weights(model, torch.device("cpu")).flat.dtype == torch.bfloat16
    with torch.no_grad():  # an optimizer's in-place update
        model.model.layers[0].mlp.down_proj.weight.mul_(2.0)
    assert read_rows(model, rows, pad_id=0) != first
    assert scoring_weights(model, torch.device("cpu")) is not copy


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["qwen3", "qwen2", "llama"])
def test_the_written_out_backward_is_the_modules_gradient_in_float64(model_type, layers,
                                                                   last_layer):
    """In float64 rounding is out of the way: the fused layers' hand-written backward (norms,
    rotary, q/k norms, attention, gated MLP, readout and loss) gives the gradient autograd takes
    through the model's own modules, for plain and tree rows. Both paths take the loss of
    rewards in fp32 (``pair_rewards``), so the loss's gradient carries fp32's rounding (1e-7
    of each gradient), a thousandth of what the fp32 comparison allows."""
    model = small_decoder_classifier(model_type).double().train()
    pairs = mixed_pairs()[:4]
    theirs_loss, theirs = step_gradients(model, pairs, fast=False, dtype=torch.float64,
                                         budget=None)
    loss, ours = step_gradients(model, pairs, fast=True, dtype=torch.float64, budget=None)
    assert loss == pytest.approx(theirs_loss, abs=1e-12)
    assert ours.keys() == theirs.keys()
    for name, gradient in ours.items():
        scale = theirs[name].abs().max().item()
        assert (gradient - theirs[name]).abs().max().item() <= 1e-6 * scale, name


@pytest.mark.slow
def test_the_flat_optimizer_steps_every_weight_as_one_per_parameter_does(layers):
    """AdamW and clipping over the copy's flat master buffer (``TrainingCopy.parameters``) move
    every weight as AdamW over the model's own parameters does."""
    pairs = mixed_pairs()[:4]
    after = []
    for flat in (True, False):
        model = small_decoder_classifier("qwen3").train()
        with training_copy(model, torch.float32) as weights:
            optimizer = make_optimizer(model, "cpu", weights if flat else None)
            for _ in range(2):
                train_step(model, optimizer, pairs, device="cpu", pad_id=0, use_autocast=False,
                           backward_tokens=None, copy=weights)
        after.append({n: p.detach().clone() for n, p in model.named_parameters()})
    before = dict(small_decoder_classifier("qwen3").named_parameters())
    for name, weight in after[0].items():
        assert not torch.equal(weight, before[name]), name  # every weight moved
        assert torch.allclose(weight, after[1][name], atol=1e-9, rtol=0), name


@pytest.mark.parametrize("model_type", ["qwen3", "llama"])
def test_a_model_loaded_in_bf16_reads_its_own_rewards(model_type):
    """Masters in bf16 (a checkpoint loaded at its stored precision): the norms still normalise
    in fp32 and the readout meets the score head in its precision, as the modules do."""
    model = small_decoder_classifier(model_type).eval().to(torch.bfloat16)
    ids, mask = right_padded(SEQUENCES, 0, "cpu")
    rows, positions = zip(*READS)
    with torch.no_grad():
        theirs = read_rewards(model, ids, mask, rows, positions)
        ours = decoder_rewards(model, DecoderWeights(model, torch.bfloat16), ids, rows, positions)
    assert ours.dtype == theirs.dtype == torch.bfloat16
    assert torch.allclose(ours.float(), theirs.float(), atol=4e-3), (ours - theirs).abs().max()
