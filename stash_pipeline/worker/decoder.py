"""The decoder's layers as plain tensor functions over one compute copy of their weights.

On a GPU the worker's training step was launch-bound: the model's own modules issue about 350
kernels a layer for a forward and backward (each RMSNorm seven, each rotary seven, a weight cast
and its gradient's cast back at every use under autocast), most of them 4-13 us elementwise
kernels. Here a Llama-family layer (Llama, Qwen2, Qwen3: ``runs_fast``) runs as:

- one matrix product for q, k and v, one for gate and up, one each for o and down, over a compute
  copy of the weights (``DecoderWeights``) in the precision autocast would cast them to (bf16),
  refreshed from the fp32 master weights once per optimizer step;
- fused RMSNorm (``F.rms_norm``), q and k normed and rotated together in three kernels;
- SDPA on the causal kernel for plain rows, with the tree mask for shared-prompt rows.

The arithmetic is autocast's, operation for operation: matrix products in the compute precision,
the residual stream, norms and rotary in the master weights' precision (fp32), the score head in
fp32. Rewards and gradients equal the model's own forward (tested on all three architectures, in
fp32 to 1e-5 and under bf16 against autocast).

Training (``TrainingCopy``): the master weights of the layers' linear maps become views of one fp32
buffer laid out as the compute copy, so refreshing the copy is one cast; each compute tensor's
gradient is added into the fp32 master gradient as soon as it is complete (and freed), so the
bf16 gradients never pile up. The optimizer, clipping and checkpoint see the model's own
parameters.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from stash_pipeline.worker.readout import Tree, long_tensor, pools_last_token, score_head

# Decoders whose layers ``layer_forward`` reproduces (tests/worker compare it with their modules).
FAST_DECODER_TYPES = frozenset({"llama", "qwen2", "qwen3"})
# Off: every model runs through its own modules (benchmarks switch it to count today's path).
FAST_DECODER = True


def runs_fast(model: Any) -> bool:
    """Whether ``decoder_rewards`` may run this model: a checked decoder read by its score head,
    every layer full attention with a SiLU gated MLP and no MLP biases."""
    config = model.config
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    return (FAST_DECODER and pools_last_token(model) and config.model_type in FAST_DECODER_TYPES
            and all(kind == "full_attention" for kind in layer_types)
            and getattr(config, "hidden_act", "silu") == "silu"
            and not getattr(config, "mlp_bias", False))


@dataclass
class LayerWeights:
    """One layer's tensors: the linear maps fused and in the compute precision, the norms the
    master weights themselves."""

    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    gate_up: torch.Tensor
    down: torch.Tensor
    input_norm: torch.Tensor
    post_norm: torch.Tensor
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None


@dataclass(frozen=True)
class Shape:
    heads: int
    kv_heads: int
    head_dim: int
    scaling: float
    eps: float


def _linear_parts(layer: Any) -> list[list[torch.nn.Parameter]]:
    """The master tensors of each fused compute tensor, in order: qkv, its bias, o, its bias,
    gate_up, down (the biases only where the model has them)."""
    attention, mlp = layer.self_attn, layer.mlp
    parts = [[attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight]]
    if attention.q_proj.bias is not None:
        parts.append([attention.q_proj.bias, attention.k_proj.bias, attention.v_proj.bias])
    parts.append([attention.o_proj.weight])
    if attention.o_proj.bias is not None:
        parts.append([attention.o_proj.bias])
    parts += [[mlp.gate_proj.weight, mlp.up_proj.weight], [mlp.down_proj.weight]]
    return parts


def _layers(model: Any) -> Sequence[Any]:
    return getattr(model, model.base_model_prefix).layers


def master_tensors(model: Any) -> list[torch.nn.Parameter]:
    """Every master tensor the compute copy holds, in the copy's order."""
    return [p for layer in _layers(model) for part in _linear_parts(layer) for p in part]


class DecoderWeights:
    """A compute copy of the layers' linear maps in ``dtype``, fused per layer in one flat buffer;
    ``trainable``: each fused tensor is a leaf that collects its gradient."""

    def __init__(self, model: Any, dtype: torch.dtype, *, trainable: bool = False):
        layers = _layers(model)
        attention = layers[0].self_attn
        config = model.config
        self.shape = Shape(heads=config.num_attention_heads, kv_heads=config.num_key_value_heads,
                           head_dim=attention.head_dim, scaling=attention.scaling,
                           eps=layers[0].input_layernorm.variance_epsilon)
        self.masters = master_tensors(model)
        device = self.masters[0].device
        self.flat = torch.empty(sum(p.numel() for p in self.masters), dtype=dtype, device=device)
        # Per fused tensor: its leaf, the master tensors it holds, its offset in the flat buffer.
        self.fused: list[tuple[torch.Tensor, list[torch.nn.Parameter], int]] = []
        self.layers: list[LayerWeights] = []
        offset = 0
        for layer in layers:
            tensors = []
            for part in _linear_parts(layer):
                count = sum(p.numel() for p in part)
                shape = (sum(p.shape[0] for p in part), *part[0].shape[1:])
                tensor = self.flat[offset:offset + count].view(shape).detach()
                if trainable:
                    tensor.requires_grad_()
                self.fused.append((tensor, part, offset))
                tensors.append(tensor)
                offset += count
            attention = layer.self_attn
            biased, o_biased = attention.q_proj.bias is not None, attention.o_proj.bias is not None
            qkv = tensors.pop(0)
            qkv_bias = tensors.pop(0) if biased else None
            o = tensors.pop(0)
            o_bias = tensors.pop(0) if o_biased else None
            q_norm, k_norm = getattr(attention, "q_norm", None), getattr(attention, "k_norm", None)
            self.layers.append(LayerWeights(
                qkv=qkv, qkv_bias=qkv_bias, o=o, o_bias=o_bias, gate_up=tensors[0],
                down=tensors[1], input_norm=layer.input_layernorm.weight,
                post_norm=layer.post_attention_layernorm.weight,
                q_norm=q_norm.weight if q_norm is not None else None,
                k_norm=k_norm.weight if k_norm is not None else None))
        self.master_flat: torch.Tensor | None = None
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """The copy from the master weights: one cast when they are views of one flat buffer
        (``TrainingCopy``), else one per tensor."""
        if self.master_flat is not None:
            self.flat.copy_(self.master_flat)
        else:
            for _, part, offset in self.fused:
                for parameter in part:
                    self.flat[offset:offset + parameter.numel()].copy_(parameter.reshape(-1))
                    offset += parameter.numel()


class TrainingCopy:
    """``DecoderWeights`` for training: the master tensors become views of one fp32 buffer (a
    refresh is one cast), their gradients views of another, into which each compute tensor's
    gradient is added the moment autograd completes it (``register_post_accumulate_grad_hook``)
    and then freed. ``release`` gives the master tensors their own storage back."""

    def __init__(self, model: Any, dtype: torch.dtype):
        self.weights = DecoderWeights(model, dtype, trainable=True)
        masters = self.weights.masters
        self.master_flat = torch.empty(self.weights.flat.numel(), dtype=masters[0].dtype,
                                       device=masters[0].device)
        self.grad_flat = torch.zeros_like(self.master_flat)
        self.hooks = []
        for tensor, part, offset in self.weights.fused:
            at = offset
            for parameter in part:
                count = parameter.numel()
                self.master_flat[at:at + count].copy_(parameter.detach().reshape(-1))
                parameter.data = self.master_flat[at:at + count].view(parameter.shape)
                parameter.grad = self.grad_flat[at:at + count].view(parameter.shape)
                at += count
            into = self.grad_flat[offset:offset + tensor.numel()].view(tensor.shape)
            self.hooks.append(tensor.register_post_accumulate_grad_hook(_adding_into(into)))
        self.weights.master_flat = self.master_flat
        held = {id(p) for p in masters}
        self.others = [p for p in model.parameters() if id(p) not in held]

    def start_step(self) -> None:
        """Before a step's first backward: the copy from the updated masters, gradients zero."""
        self.weights.refresh()
        self.grad_flat.zero_()
        for parameter in self.others:
            parameter.grad = None

    def release(self) -> None:
        for hook in self.hooks:
            hook.remove()
        for parameter in self.weights.masters:
            parameter.data = parameter.data.clone()
            parameter.grad = None


def _adding_into(into: torch.Tensor) -> Any:
    def add(tensor: torch.Tensor) -> None:
        into.add_(tensor.grad)
        tensor.grad = None
    return add


@contextmanager
def training_copy(model: Any, dtype: torch.dtype) -> Iterator[TrainingCopy | None]:
    """A ``TrainingCopy`` of ``model`` while training, None for a model ``runs_fast`` refuses."""
    if not runs_fast(model):
        yield None
        return
    copy = TrainingCopy(model, dtype)
    try:
        yield copy
    finally:
        copy.release()


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The models' RMSNorm: normalised in fp32, rounded to the input's precision, then scaled (in
    fp32 the rounding is none, and the fused kernel scales as it normalises)."""
    if x.dtype == torch.float32 and weight.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return weight * F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)


class _GatedMlpDown(torch.autograd.Function):
    """``down(silu(gate) * up)`` that keeps only ``gate_up`` for the backward, where it recomputes
    silu and the product (two elementwise kernels): a quarter of a layer's saved activations less,
    with autograd's own gradient formulas (``silu_backward``, the linear's two products)."""

    @staticmethod
    def forward(ctx: Any, gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        ctx.save_for_backward(gate_up, down)
        return F.linear(F.silu(gate) * up, down)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gate_up, down = ctx.saved_tensors
        gate, up = gate_up.chunk(2, dim=-1)
        silu = F.silu(gate)
        hidden = silu * up
        grad_hidden = grad.matmul(down)
        grad_down = grad.reshape(-1, grad.shape[-1]).t().matmul(
            hidden.reshape(-1, hidden.shape[-1]))
        grad_gate = torch.ops.aten.silu_backward(grad_hidden * up, gate)
        return torch.cat([grad_gate, grad_hidden * silu], dim=-1), grad_down


def layer_forward(hidden: torch.Tensor, layer: LayerWeights, shape: Shape, cos: torch.Tensor,
                  sin: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """One decoder layer on ``hidden`` [rows, tokens, width]: autocast's arithmetic, fewer
    kernels. ``cos``/``sin`` [rows or 1, tokens, 1, head_dim], ``sin`` with the sign of
    rotate_half folded in; ``mask`` the tree rows' [rows, 1, tokens, tokens] (None: causal)."""
    rows, tokens, _ = hidden.shape
    compute = layer.qkv.dtype
    heads, kv_heads, head_dim = shape.heads, shape.kv_heads, shape.head_dim
    normed = _rms_norm(hidden, layer.input_norm, shape.eps).to(compute)
    qkv = F.linear(normed, layer.qkv, layer.qkv_bias)
    # One split (its backward one cat), not two slices (each backward a zeroed full-size copy).
    qk, value = qkv.split([(heads + kv_heads) * head_dim, kv_heads * head_dim], dim=-1)
    qk = qk.view(rows, tokens, heads + kv_heads, head_dim)
    value = value.view(rows, tokens, kv_heads, head_dim)
    if layer.q_norm is not None and layer.k_norm is not None:  # Qwen3: q and k normed per head
        scale = torch.cat([layer.q_norm.expand(heads, head_dim),
                           layer.k_norm.expand(kv_heads, head_dim)])
        # Normalised in fp32 inside the kernel and rounded to bf16, as the model's norm does after
        # casting up: the same numbers, with the bf16 input (a view of qkv) saved, not an fp32 copy.
        qk = scale * F.rms_norm(qk, (head_dim,), None, shape.eps)
    rotated = torch.addcmul(qk * cos, qk.roll(head_dim // 2, -1), sin).to(compute)
    query, key = rotated.transpose(1, 2).split([heads, kv_heads], dim=1)
    value = value.transpose(1, 2)
    if mask is None:
        attended = F.scaled_dot_product_attention(query, key, value, is_causal=tokens > 1,
                                                  scale=shape.scaling,
                                                  enable_gqa=heads != kv_heads)
    else:  # as transformers runs a masked SDPA: keys and values repeated per query head
        repeat = heads // kv_heads
        attended = F.scaled_dot_product_attention(
            query, key.repeat_interleave(repeat, dim=1), value.repeat_interleave(repeat, dim=1),
            attn_mask=mask, scale=shape.scaling)
    attended = attended.transpose(1, 2).reshape(rows, tokens, heads * head_dim)
    hidden = hidden + F.linear(attended, layer.o, layer.o_bias)
    normed = _rms_norm(hidden, layer.post_norm, shape.eps).to(compute)
    return hidden + _GatedMlpDown.apply(F.linear(normed, layer.gate_up), layer.down)


# Device types whose forwards run ``layer_forward`` through ``torch.compile`` (fused elementwise
# kernels, fewer launches): none until a GPU run shows it pays within a job, compile time included
# (benchmarks/gpu_suite.sh's compile step prints ``compile_pays``: add "cuda" if it says yes). On
# CPU it costs more than it saves.
COMPILE_DEVICES: frozenset[str] = frozenset()
_compiled: Any = None


def compiled_layer_forward() -> Any:
    """``layer_forward`` compiled once a process, its rows and tokens dynamic."""
    global _compiled
    if _compiled is None:
        _compiled = torch.compile(layer_forward)
    return _compiled


def decoder_rewards(model: Any, weights: DecoderWeights, ids: torch.Tensor, rows: Sequence[int],
                    positions: Sequence[int], tree: Tree | None = None) -> torch.Tensor:
    """The reward at token ``positions[i]`` of row ``rows[i]`` of right-padded ``ids``, through
    ``layer_forward``: what ``readout.read_rewards`` reads through the model's modules."""
    base = getattr(model, model.base_model_prefix)
    device = ids.device
    with torch.autocast(device.type, enabled=False):  # the precision is the copy's, explicitly
        hidden = base.embed_tokens(ids)
        position_ids = (tree.position_ids if tree is not None
                        else torch.arange(ids.shape[1], device=device).unsqueeze(0))
        cos, sin = base.rotary_emb(hidden, position_ids)
        half = cos.shape[-1] // 2
        sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
        mask = tree.allowed if tree is not None else None
        run = layer_forward
        if device.type in COMPILE_DEVICES:
            run = compiled_layer_forward()
            for tensor in (hidden, cos, sin, *(() if mask is None else (mask,))):
                torch._dynamo.maybe_mark_dynamic(tensor, 0)
                torch._dynamo.maybe_mark_dynamic(tensor, -2 if tensor is mask else 1)
        for layer in weights.layers:
            hidden = run(hidden, layer, weights.shape, cos, sin, mask)
        read = hidden[long_tensor(rows, device), long_tensor(positions, device)]
        return score_head(model, base.norm(read))
