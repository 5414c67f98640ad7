"""The decoder's layers as a few large operations over one compute copy of their weights.

On a GPU the worker's training step was launch-bound: the model's own modules issue about 350
kernels a layer for a forward and backward (each RMSNorm seven, each rotary seven, a weight cast
and its gradient's cast back at every use under autocast), most of them 4-13 us elementwise
kernels. Here a Llama-family layer (Llama, Qwen2, Qwen3: ``runs_fast``) is one autograd function
(``_FusedLayer``) whose forward (``_fused_forward``) and backward are written out:

- one matrix product for q, k and v, one for gate and up, one each for o and down, over a compute
  copy of the weights (``DecoderWeights``) in the precision autocast would cast them to (bf16),
  kept with the transposed views the products take, refreshed from the fp32 master weights once
  per optimizer step;
- RMSNorm as a norm, a reciprocal square root and the scaling; q and k normed and rotated
  together, the rotary tables made once per forward for every layer (once per copy for plain
  rows); SDPA on the causal kernel for plain rows, with the tree mask for shared-prompt rows,
  its backward SDPA's own;
- the backward by hand: each weight's gradient one product added straight into the fp32 master
  gradient (no bf16 gradient kept), each norm's a handful of operations. The readout (final
  norm and score head, ``_Readout``) is one function the same way.

The arithmetic is autocast's: matrix products in the compute precision, the residual stream,
norms and rotary in the master weights' precision (fp32), the score head in fp32. Rewards and
gradients equal the model's own forward (tested on all three architectures: in float64 to 1e-6
of each gradient, in fp32 to 1e-5, under bf16 against autocast). ``layer_forward`` is the same
layer through autograd's own formulas, for ``torch.compile`` (``COMPILE_DEVICES``).

Where the arithmetic bounds a step (``LAST_LAYER_AT_READS_DEVICES``: this CPU) the last layer
runs at the read tokens only (``_last_layer_at_reads``): a reward is the score head on one
token's final state, so that layer's other tokens only give it keys and values.

Training (``TrainingCopy``): the master weights of the layers' linear maps and norms become views
of one fp32 buffer (the linear maps laid out as the compute copy, so refreshing the copy is one
cast), their gradients views of another; the optimizer and clipping see the two buffers as one
tensor (``TrainingCopy.parameters``), the checkpoint the model's own parameters.
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
    # The products' right-hand sides as the forward's matrix products take them (views, no copy).
    qkv_t: torch.Tensor | None = None
    o_t: torch.Tensor | None = None
    gate_up_t: torch.Tensor | None = None
    down_t: torch.Tensor | None = None
    # Qwen3: q's and k's norm weights as rows 0 and 1 of one tensor (training: a view of the
    # master buffer, where they lie side by side), and each q and k head's row.
    qk_norm: torch.Tensor | None = None
    qk_heads: torch.Tensor | None = None
    # Training: fp32 views of the master gradients that ``_FusedLayer``'s backward adds into.
    grads: LayerGrads | None = None

    def __post_init__(self) -> None:
        self.qkv_t, self.o_t = self.qkv.detach().t(), self.o.detach().t()
        self.gate_up_t, self.down_t = self.gate_up.detach().t(), self.down.detach().t()


@dataclass
class LayerGrads:
    """One layer's master gradients (fp32 views of ``TrainingCopy.grad_flat``), in the layout of
    its compute tensors."""

    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    gate_up: torch.Tensor
    down: torch.Tensor
    input_norm: torch.Tensor
    post_norm: torch.Tensor
    qk_norm: torch.Tensor | None  # q's norm's, then k's, as [2, head_dim]


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
        heads = torch.tensor([0] * self.shape.heads + [1] * self.shape.kv_heads, device=device)
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
                k_norm=k_norm.weight if k_norm is not None else None,
                qk_heads=heads if q_norm is not None else None))
        self.master_flat: torch.Tensor | None = None
        # The norms' epsilon as a tensor: a Python number in an operation is a conversion more.
        self.eps = torch.tensor(self.shape.eps, dtype=self.masters[0].dtype, device=device)
        # Plain rows' rotary tables by row width (they depend on positions only).
        self.rotary: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
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


def _norm_parts(layer: Any) -> list[torch.nn.Parameter]:
    """A layer's norm weights, in order: input, post-attention, then q and k (Qwen3)."""
    attention = layer.self_attn
    return [layer.input_layernorm.weight, layer.post_attention_layernorm.weight,
            *(norm.weight for norm in (getattr(attention, "q_norm", None),
                                       getattr(attention, "k_norm", None)) if norm is not None)]


class TrainingCopy:
    """``DecoderWeights`` for training: the master tensors (the linear maps, then the layers'
    norms) become views of one fp32 buffer (a refresh is one cast), their gradients views of
    another, into which ``_FusedLayer``'s backward adds each gradient as it completes (the bf16
    gradients never pile up). ``parameters``: the two buffers as one tensor for the optimizer
    and clipping (AdamW is elementwise: the same update, a few operations instead of a few per
    tensor), with the model's other parameters. ``release`` gives the master tensors their own
    storage back."""

    def __init__(self, model: Any, dtype: torch.dtype):
        self.weights = DecoderWeights(model, dtype, trainable=True)
        linear = self.weights.masters
        norms = [p for layer in _layers(model) for p in _norm_parts(layer)]
        self.masters = linear + norms
        count = self.weights.flat.numel()
        total = count + sum(p.numel() for p in norms)
        self.master_flat = torch.empty(total, dtype=linear[0].dtype, device=linear[0].device)
        self.grad_flat = torch.zeros_like(self.master_flat)
        views: dict[int, torch.Tensor] = {}  # a master tensor's id: its gradient's view
        at = 0
        for parameter in self.masters:
            size = parameter.numel()
            self.master_flat[at:at + size].copy_(parameter.detach().reshape(-1))
            parameter.data = self.master_flat[at:at + size].view(parameter.shape)
            parameter.grad = views[id(parameter)] = self.grad_flat[at:at + size].view(
                parameter.shape)
            at += size
        for layer, weights in zip(_layers(model), self.weights.layers):
            if weights.q_norm is not None:  # q's and k's norms lie side by side (_norm_parts)
                weights.qk_norm = _pair_view(weights.q_norm)
        self.hooks = []  # the compiled path (``layer_forward``) collects into the bf16 leaves
        for tensor, _, offset in self.weights.fused:
            into = self.grad_flat[offset:offset + tensor.numel()].view(tensor.shape)
            self.hooks.append(tensor.register_post_accumulate_grad_hook(_adding_into(into)))
        grads = [self.grad_flat[offset:offset + tensor.numel()].view(tensor.shape)
                 for tensor, _, offset in self.weights.fused]
        for layer, weights in zip(_layers(model), self.weights.layers):
            parts = len(_linear_parts(layer))
            weights.grads = _layer_grads(layer, grads[:parts], views)
            grads = grads[parts:]
        self.weights.master_flat = self.master_flat[:count]
        held = {id(p) for p in self.masters}
        self.others = [p for p in model.parameters() if id(p) not in held]
        self.flat_parameter = torch.nn.Parameter(self.master_flat, requires_grad=False)
        self.flat_parameter.grad = self.grad_flat

    def parameters(self) -> list[torch.Tensor]:
        """What the optimizer steps and clipping measures: the master buffer (its gradient the
        gradient buffer) and the model's other parameters."""
        return [self.flat_parameter, *self.others]

    def start_step(self) -> None:
        """Before a step's first backward: the copy from the updated masters, gradients zero."""
        self.weights.refresh()
        self.grad_flat.zero_()
        for parameter in self.others:
            parameter.grad = None

    def release(self) -> None:
        for hook in self.hooks:
            hook.remove()
        for layer in self.weights.layers:
            layer.grads = layer.qk_norm = None
        for parameter in self.masters:
            parameter.data = parameter.data.clone()
            parameter.grad = None


def _layer_grads(layer: Any, fused: list[torch.Tensor], views: dict[int, torch.Tensor]
                 ) -> LayerGrads:
    """A layer's gradient views: its fused tensors' (in ``_linear_parts``' order), its norms'."""
    attention = layer.self_attn
    fused = list(fused)
    qkv = fused.pop(0)
    qkv_bias = fused.pop(0) if attention.q_proj.bias is not None else None
    o = fused.pop(0)
    o_bias = fused.pop(0) if attention.o_proj.bias is not None else None
    q_norm = getattr(attention, "q_norm", None)
    return LayerGrads(qkv=qkv, qkv_bias=qkv_bias, o=o, o_bias=o_bias, gate_up=fused[0],
                      down=fused[1], input_norm=views[id(layer.input_layernorm.weight)],
                      post_norm=views[id(layer.post_attention_layernorm.weight)],
                      qk_norm=(_pair_view(views[id(q_norm.weight)]) if q_norm is not None
                               else None))


def _pair_view(first: torch.Tensor) -> torch.Tensor:
    """[2, n]: the vector ``first`` and the one stored right after it."""
    return first.as_strided((2, first.numel()), (first.numel(), 1))


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


def _cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` in ``dtype`` (itself when it already is): one copy into a new tensor, the fewest
    operations a conversion takes."""
    if x.dtype == dtype:
        return x
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    return out.copy_(x)


def _rstd(x: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """``1 / sqrt(mean(x^2) + eps)`` over the last dimension, in ``x``'s precision, at least fp32
    (as the models' norms compute it)."""
    wide = x.dtype in (torch.float32, torch.float64)
    norm = torch.linalg.vector_norm(x, 2, -1, True, dtype=None if wide else torch.float32)
    eps = eps if eps.dtype == norm.dtype else eps.to(norm.dtype)
    return torch.rsqrt(torch.addcmul(eps, norm, norm, value=1 / x.shape[-1]))


def _norm_backward(grad: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor,
                   weight: torch.Tensor | None, weight_grad: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The input's gradient of RMSNorm ``weight * x * rstd`` (fp32, over the last dimension)
    given its output's ``grad``, and the weight's gradient (added into ``weight_grad`` when
    given, which is then returned)."""
    grad = _cast(grad, x.dtype)
    normed = x * rstd
    grad_weight = None
    if weight is not None:
        grad_weight = (grad * normed).sum(tuple(range(grad.dim() - 1)))
        if weight_grad is not None:
            grad_weight = weight_grad.add_(grad_weight)
        grad = grad * weight
    dot = (grad * normed).sum(-1, keepdim=True)
    return torch.addcmul(grad, normed, dot, value=-1 / x.shape[-1]) * rstd, grad_weight


def _add_product(into: torch.Tensor, grad: torch.Tensor, inputs: torch.Tensor) -> None:
    """A linear map's weight gradient ``grad^T inputs`` (compute precision, as autocast's is)
    added into its fp32 master gradient."""
    into.add_(_cast(torch.mm(grad.transpose(0, 1), inputs), into.dtype))


def _fused_forward(hidden: torch.Tensor, layer: LayerWeights, shape: Shape, eps: torch.Tensor,
                   rotary: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor | None,
                   rows: int, saved: list[Any] | None) -> torch.Tensor:
    """One decoder layer on ``hidden`` [rows * tokens, width] (fp32): ``layer_forward``'s
    arithmetic, in fewer operations. ``rotary``: cos and signed sin [rows or 1, tokens, 1, 2,
    head_dim / 2]. ``saved``: None, or a list the backward's tensors are appended to (the
    attention's inputs as leaves of a local graph whose backward ``_FusedLayer`` runs)."""
    compute, f32 = layer.qkv.dtype, hidden.dtype  # f32: the master weights' precision
    heads, kv_heads, head_dim = shape.heads, shape.kv_heads, shape.head_dim
    tokens = hidden.shape[0] // rows
    rstd_in = _rstd(hidden, eps)
    normed = _cast(hidden * rstd_in * layer.input_norm, compute)
    qkv = (torch.mm(normed, layer.qkv_t) if layer.qkv_bias is None
           else torch.addmm(layer.qkv_bias, normed, layer.qkv_t))
    qk, value = qkv.view(rows, tokens, heads + 2 * kv_heads, head_dim).split(
        [heads + kv_heads, kv_heads], dim=2)
    qk = _cast(qk, f32)  # norms and rotary in fp32, as the models compute them
    rstd_qk = scale = None
    if layer.q_norm is not None and layer.k_norm is not None:  # Qwen3: q and k normed per head
        rstd_qk = _rstd(qk, eps)
        norms = (layer.qk_norm if layer.qk_norm is not None
                 else torch.stack([layer.q_norm, layer.k_norm]))
        scale = norms.index_select(0, layer.qk_heads)  # q's norm per q head, k's per k head
        qk = qk * rstd_qk * scale
    cos, sin = rotary
    halves = qk.view(rows, tokens, heads + kv_heads, 2, head_dim // 2)
    rotated = _cast(torch.addcmul(halves * cos, halves.flip(-2), sin), compute)
    rotated = rotated.view(rows, tokens, heads + kv_heads, head_dim).transpose(1, 2)
    value = value.transpose(1, 2)
    if saved is not None:
        rotated, value = rotated.detach().requires_grad_(), value.detach().requires_grad_()
    with torch.enable_grad() if saved is not None else torch.no_grad():
        query, key = rotated.split([heads, kv_heads], dim=1)
        if mask is None:
            attended = F.scaled_dot_product_attention(
                query, key, value, is_causal=tokens > 1, scale=shape.scaling,
                enable_gqa=heads != kv_heads)
        else:  # as transformers runs a masked SDPA: keys and values repeated per query head
            repeat = heads // kv_heads
            attended = F.scaled_dot_product_attention(
                query, key.repeat_interleave(repeat, dim=1),
                value.repeat_interleave(repeat, dim=1), attn_mask=mask, scale=shape.scaling)
    flat = attended.transpose(1, 2).reshape(hidden.shape[0], heads * head_dim)
    projected = (torch.mm(flat, layer.o_t) if layer.o_bias is None
                 else torch.addmm(layer.o_bias, flat, layer.o_t))
    middle = hidden + _cast(projected, f32)
    rstd_post = _rstd(middle, eps)
    normed_post = _cast(middle * rstd_post * layer.post_norm, compute)
    gate_up = torch.mm(normed_post, layer.gate_up_t)
    gate, up = gate_up.split([gate_up.shape[-1] // 2] * 2, dim=-1)
    out = middle + _cast(torch.mm(F.silu(gate) * up, layer.down_t), f32)
    if saved is not None:
        saved += [hidden, rstd_in, normed, qkv, rstd_qk, scale, rotated, value, attended, flat,
                  middle, rstd_post, normed_post, gate_up]
    return out


class _FusedLayer(torch.autograd.Function):
    """A decoder layer whose backward is written out (``_fused_forward``): the gradient of every
    step in a few large operations, the weights' gradients added straight into the fp32 master
    gradients (``LayerWeights.grads``), the attention's through its own kernel's backward."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, anchor: torch.Tensor, layer: LayerWeights,
                shape: Shape, eps: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                mask: torch.Tensor | None, rows: int) -> torch.Tensor:
        saved: list[Any] = []
        out = _fused_forward(hidden, layer, shape, eps, rotary, mask, rows, saved)
        ctx.layer, ctx.shape, ctx.rotary, ctx.rows, ctx.saved = layer, shape, rotary, rows, saved
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        layer, shape, rows, grads = ctx.layer, ctx.shape, ctx.rows, ctx.layer.grads
        (hidden, rstd_in, normed, qkv, rstd_qk, scale, rotated, value, attended, flat,
         middle, rstd_post, normed_post, gate_up) = ctx.saved
        ctx.saved = None
        compute, f32 = layer.qkv.dtype, hidden.dtype
        heads, kv_heads, head_dim = shape.heads, shape.kv_heads, shape.head_dim
        tokens = hidden.shape[0] // rows
        # MLP: down(silu(gate) * up), its input normed
        grad_down = _cast(grad, compute)
        gate, up = gate_up.split([gate_up.shape[-1] // 2] * 2, dim=-1)
        silu = F.silu(gate)
        _add_product(grads.down, grad_down, silu * up)
        grad_hidden = torch.mm(grad_down, layer.down)
        grad_gate_up = torch.cat([torch.ops.aten.silu_backward(grad_hidden * up, gate),
                                  grad_hidden * silu], dim=-1)
        _add_product(grads.gate_up, grad_gate_up, normed_post)
        grad = grad + _norm_backward(torch.mm(grad_gate_up, layer.gate_up), middle, rstd_post,
                                     layer.post_norm, grads.post_norm)[0]
        # Attention: o, then SDPA's own backward
        grad_o = _cast(grad, compute)
        _add_product(grads.o, grad_o, flat)
        if grads.o_bias is not None:
            grads.o_bias.add_(_cast(grad_o.sum(0), f32))
        grad_attended = torch.mm(grad_o, layer.o).view(rows, tokens, heads, head_dim)
        grad_rotated, grad_value = torch.autograd.grad(attended, (rotated, value),
                                                       grad_attended.transpose(1, 2))
        # Rotary (the transpose of rotate_half is a swap of halves with the sign on the product)
        cos, sin = ctx.rotary
        grad_halves = _cast(grad_rotated.transpose(1, 2), f32).view(
            rows, tokens, heads + kv_heads, 2, head_dim // 2)
        grad_qk = torch.addcmul((grad_halves * sin).flip(-2), grad_halves, cos).view(
            rows, tokens, heads + kv_heads, head_dim)
        if rstd_qk is not None:  # Qwen3's per-head norms of q and k
            qk, _ = qkv.view(rows, tokens, heads + 2 * kv_heads, head_dim).split(
                [heads + kv_heads, kv_heads], dim=2)
            qk = _cast(qk, f32)
            normed_qk = qk * rstd_qk
            grads.qk_norm.index_add_(0, layer.qk_heads, (grad_qk * normed_qk).sum((0, 1)))
            grad_qk = _norm_backward(grad_qk * scale, qk, rstd_qk, None)[0]
        grad_qkv = torch.cat([_cast(grad_qk, compute), grad_value.transpose(1, 2)], dim=2).view(
            hidden.shape[0], -1)
        _add_product(grads.qkv, grad_qkv, normed)
        if grads.qkv_bias is not None:
            grads.qkv_bias.add_(_cast(grad_qkv.sum(0), f32))
        grad = grad + _norm_backward(torch.mm(grad_qkv, layer.qkv), hidden, rstd_in,
                                     layer.input_norm, grads.input_norm)[0]
        return grad, None, None, None, None, None, None, None


# Device types whose forwards run ``layer_forward`` through ``torch.compile`` (fused elementwise
# kernels, fewer launches): none until a GPU run shows it pays within a job, compile time included
# (benchmarks/gpu_suite.sh's compile step prints ``compile_pays``: add "cuda" if it says yes). On
# CPU it costs more than it saves.
COMPILE_DEVICES: frozenset[str] = frozenset()
# Device types whose training runs each layer through ``layer_forward`` and autograd's own
# backward rather than ``_FusedLayer``'s written-out one, chosen per device by
# ``benchmarks/train_throughput.py --compare-layers`` (``fused_over_autograd``). None: the fused
# layer pays where launches bound a step (a GPU: 5.8x fewer operations a pair), and on this CPU,
# where the arithmetic bounds it, it measured no slower (docs/worker.md, "On this CPU").
AUTOGRAD_LAYER_DEVICES: frozenset[str] = frozenset()
# Device types whose forwards run the last layer at the read tokens only
# (``_last_layer_at_reads``): a reward is the score head on one token's final state, so the last
# layer's other tokens only give it keys and values. It saves that layer's arithmetic at every
# other token (about a quarter of a 4-layer model's, 1/28 of Qwen3-0.6B's) for a few more,
# smaller operations: it pays where the arithmetic bounds a step (this CPU: ``train_throughput.py
# --compare-last-layer``, docs/worker.md "On this CPU"), not where launches do (a GPU's step
# measured 0.87x with it when it ran through the modules; its choice waits for a GPU run of that
# command).
LAST_LAYER_AT_READS_DEVICES: frozenset[str] = frozenset({"cpu"})
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
    ``_fused_forward`` (``layer_forward`` where compiled): what ``readout.read_rewards`` reads
    through the model's modules."""
    base = getattr(model, model.base_model_prefix)
    device = ids.device
    if device.type in COMPILE_DEVICES:
        return _compiled_rewards(model, weights, ids, rows, positions, tree)
    count, width = ids.shape
    training = torch.is_grad_enabled()
    if training and (device.type in AUTOGRAD_LAYER_DEVICES
                     or any(layer.grads is None for layer in weights.layers)):
        return _compiled_rewards(model, weights, ids, rows, positions, tree, compiled=False)
    with torch.autocast(device.type, enabled=False):  # the precision is the copy's, explicitly
        hidden = base.embed_tokens(ids).view(count * width, -1)
        rotary = (_rotary(base, hidden, tree.position_ids, weights.shape.head_dim)
                  if tree is not None else weights.rotary.get(width))
        if rotary is None:
            rotary = weights.rotary[width] = _rotary(
                base, hidden, torch.arange(width, device=device).unsqueeze(0),
                weights.shape.head_dim)
        mask = tree.allowed if tree is not None else None
        at_reads = device.type in LAST_LAYER_AT_READS_DEVICES
        for layer in weights.layers[:-1] if at_reads else weights.layers:
            # The norm weight only ties the layer into the graph when the states need no
            # gradient (a frozen embedding): the weights' gradients are written, not returned.
            hidden = (_FusedLayer.apply(hidden, layer.input_norm, layer, weights.shape,
                                        weights.eps, rotary, mask, count) if training
                      else _fused_forward(hidden, layer, weights.shape, weights.eps, rotary,
                                          mask, count, None))
        if at_reads:
            hidden, index = _last_layer_at_reads(hidden, weights.layers[-1], weights.shape,
                                                 rotary, tree, count, rows, positions)
        else:
            index = long_tensor([row * width + position
                                 for row, position in zip(rows, positions)], device)
        norm, score = base.norm, model.score
        if (score.bias is not None or score.weight.dtype != hidden.dtype
                or getattr(norm, "variance_epsilon", None) != weights.shape.eps):
            return score_head(model, norm(hidden.index_select(0, index)))
        if training:
            return _Readout.apply(hidden, index, norm.weight, score.weight, weights.eps)
        return _read(hidden, index, norm.weight, score.weight, weights.eps)[0]


def _read(hidden: torch.Tensor, index: torch.Tensor, norm: torch.Tensor, score: torch.Tensor,
          eps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The score head on the final norm of ``hidden``'s rows at ``index`` (fp32): the rewards,
    and the read rows, their rstd and normed states for the backward."""
    read = hidden.index_select(0, index)
    rstd = _rstd(read, eps)
    normed = _cast(read * rstd * norm, read.dtype)
    return torch.mm(normed, score.transpose(0, 1)).view(-1), read, rstd, normed


class _Readout(torch.autograd.Function):
    """``_read`` with its backward written out: the final norm's and the score head's gradients,
    the hidden states' as one index addition."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, index: torch.Tensor, norm: torch.Tensor,
                score: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        rewards, read, rstd, normed = _read(hidden, index, norm, score, eps)
        ctx.save_for_backward(index, norm, score, read, rstd, normed)
        ctx.rows = hidden.shape
        return rewards

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        index, norm, score, read, rstd, normed = ctx.saved_tensors
        grad = grad.view(-1, 1)
        grad_score = torch.mm(grad.transpose(0, 1), normed)
        grad_read, grad_norm = _norm_backward(grad * score, read, rstd, norm)
        grad_hidden = torch.zeros(ctx.rows, dtype=grad_read.dtype, device=grad_read.device)
        grad_hidden.index_add_(0, index, grad_read)
        return grad_hidden, None, grad_norm, grad_score, None


def _rotary(base: Any, hidden: torch.Tensor, position_ids: torch.Tensor, head_dim: int
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin at ``position_ids`` as ``_fused_forward`` takes them: [rows or 1, tokens, 1,
    2, head_dim / 2], sin's first half negated (rotate_half's sign)."""
    with torch.no_grad():
        cos, sin = base.rotary_emb(hidden, position_ids)
        shape = (*cos.shape[:2], 1, 2, head_dim // 2)
        sin = sin.view(shape)  # made on the device: a small tensor from the host would wait on it
        return cos.view(shape), torch.cat([-sin[..., :1, :], sin[..., 1:, :]], dim=-2)


def _compiled_rewards(model: Any, weights: DecoderWeights, ids: torch.Tensor,
                      rows: Sequence[int], positions: Sequence[int], tree: Tree | None,
                      compiled: bool = True) -> torch.Tensor:
    """``decoder_rewards`` through ``layer_forward`` (compiled for ``COMPILE_DEVICES``), whose
    gradients autograd collects in the copy's leaves."""
    base = getattr(model, model.base_model_prefix)
    device = ids.device
    with torch.autocast(device.type, enabled=False):
        hidden = base.embed_tokens(ids)
        position_ids = (tree.position_ids if tree is not None
                        else torch.arange(ids.shape[1], device=device).unsqueeze(0))
        cos, sin = base.rotary_emb(hidden, position_ids)
        half = cos.shape[-1] // 2
        sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
        mask = tree.allowed if tree is not None else None
        run = layer_forward
        if compiled:
            run = compiled_layer_forward()
            for tensor in (hidden, cos, sin, *(() if mask is None else (mask,))):
                torch._dynamo.maybe_mark_dynamic(tensor, 0)
                torch._dynamo.maybe_mark_dynamic(tensor, -2 if tensor is mask else 1)
        at_reads = device.type in LAST_LAYER_AT_READS_DEVICES
        for layer in weights.layers[:-1] if at_reads else weights.layers:
            hidden = run(hidden, layer, weights.shape, cos, sin, mask)
        if at_reads:
            rotary = _rotary(base, hidden, position_ids, weights.shape.head_dim)
            hidden, index = _last_layer_at_reads(hidden.view(-1, hidden.shape[-1]),
                                                 weights.layers[-1], weights.shape, rotary, tree,
                                                 ids.shape[0], rows, positions)
            return score_head(model, base.norm(hidden.index_select(0, index)))
        read = hidden[long_tensor(rows, device), long_tensor(positions, device)]
        return score_head(model, base.norm(read))


def _last_layer_at_reads(hidden: torch.Tensor, layer: LayerWeights, shape: Shape,
                         rotary: tuple[torch.Tensor, torch.Tensor], tree: Tree | None,
                         count: int, rows: Sequence[int], positions: Sequence[int]
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """The last layer's output at the read tokens only, from its input ``hidden`` [count * width,
    width of the model] (fp32): every token's keys and values, then the queries, attention, o and
    the MLP at each row's distinct read tokens (its slots), each attending to its own row up to
    itself (for a tree row, the tree mask's row of that token). ``rotary`` as ``_fused_forward``
    takes it. Returns the outputs [count * slots, width] and the index of each read among them.
    Autograd's own backward (a few small operations, and the weights' gradients through the
    copy's leaves, as ``layer_forward``'s): the same arithmetic as the whole layer, rewards and
    gradients equal to float rounding (tested)."""
    device, compute = hidden.device, layer.qkv.dtype
    heads, kv_heads, head_dim = shape.heads, shape.kv_heads, shape.head_dim
    width = hidden.shape[0] // count
    # Each row's distinct read tokens, padded to the most a row has (a pad slot reads token 0).
    per_row: list[dict[int, int]] = [{} for _ in range(count)]
    for row, position in zip(rows, positions):
        per_row[row].setdefault(position, 0)
    for reads in per_row:
        reads.update((position, slot) for slot, position in enumerate(sorted(reads)))
    slots = max(len(reads) for reads in per_row)
    slot_positions = long_tensor([[*sorted(reads), *[0] * (slots - len(reads))]
                                  for reads in per_row], device)  # [count, slots]
    at = (slot_positions + torch.arange(count, device=device).unsqueeze(1) * width).view(-1)
    index = long_tensor([row * slots + per_row[row][position]
                         for row, position in zip(rows, positions)], device)

    normed = _rms_norm(hidden, layer.input_norm, shape.eps).to(compute)
    q_weight, kv_weight = layer.qkv.split([heads * head_dim, 2 * kv_heads * head_dim])
    q_bias, kv_bias = (layer.qkv_bias.split([heads * head_dim, 2 * kv_heads * head_dim])
                       if layer.qkv_bias is not None else (None, None))
    key, value = F.linear(normed, kv_weight, kv_bias).view(count, width, 2 * kv_heads,
                                                           head_dim).split(kv_heads, dim=2)
    query = F.linear(normed.index_select(0, at), q_weight, q_bias).view(count, slots, heads,
                                                                          head_dim)
    if layer.q_norm is not None and layer.k_norm is not None:  # Qwen3: q and k normed per head
        query = layer.q_norm * F.rms_norm(query, (head_dim,), None, shape.eps)
        key = layer.k_norm * F.rms_norm(key, (head_dim,), None, shape.eps)
    cos, sin = rotary  # [rows or 1, width, 1, 2, head_dim / 2]
    tables = cos.shape[0]
    by_token = (cos.view(tables * width, 1, 2, head_dim // 2),
                sin.view(tables * width, 1, 2, head_dim // 2))
    picked = at if tables > 1 else slot_positions.view(-1)
    read_cos, read_sin = (t.index_select(0, picked).view(count, slots, 1, 2, head_dim // 2)
                          for t in by_token)

    def rotated(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        halves = x.reshape(*x.shape[:-1], 2, head_dim // 2)
        return torch.addcmul(halves * cos, halves.flip(-2), sin).view(x.shape).to(compute)

    query = rotated(query, read_cos, read_sin).transpose(1, 2)  # [count, heads, slots, dim]
    key = rotated(key, cos, sin).transpose(1, 2)
    value = value.transpose(1, 2)
    if tree is None:  # a read attends to its row up to and including its own token
        allowed = torch.arange(width, device=device) <= slot_positions.unsqueeze(-1)
    else:  # the tree mask's rows of the read tokens
        allowed = tree.allowed[:, 0].gather(1, slot_positions.unsqueeze(-1).expand(-1, -1, width))
    repeat = heads // kv_heads
    attended = F.scaled_dot_product_attention(
        query, key.repeat_interleave(repeat, dim=1), value.repeat_interleave(repeat, dim=1),
        attn_mask=allowed.unsqueeze(1), scale=shape.scaling)
    attended = attended.transpose(1, 2).reshape(count * slots, heads * head_dim)
    middle = hidden.index_select(0, at) + F.linear(attended, layer.o, layer.o_bias)
    normed = _rms_norm(middle, layer.post_norm, shape.eps).to(compute)
    return middle + _GatedMlpDown.apply(F.linear(normed, layer.gate_up), layer.down), index
