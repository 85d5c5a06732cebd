"""Quantized weights, mixture-of-experts and latent KV on the roofline: the bytes a model holds and reads.

Three levers change the bytes of chapter 9's roofline, never the shape of it. Quantization: fp8 weights (W8A8) halve
the bytes and double the tensor cores' rate (`serving.priced`); int4 weights (W4A16, as AWQ and GPTQ ship them) quarter
the matmul weights' bytes and pay a 16-bit scale and a 4-bit zero per group of input rows (`int4_weight_bytes`: the
serving model's plain 0.5 B a parameter refined here), the embedding and the LM head left in 16-bit. Experts: a step
reads the shared weights once and, in each MoE layer, every routed expert some token of the batch picked
(`experts_touched`, uniform routing: E (1 - (1 - k/E)^n)); `step_weight_bytes`, `moe_ridge_batch`. Latent KV (MLA):
one vector of kv_lora_rank + qk_rope_head_dim elements a layer, whole on every tensor-parallel GPU
(`kv_bytes_per_gpu`), against GQA's K and V heads split over the GPUs. The simulator: servelab.simulator.moe.

>>> round(experts_touched(256, 8, 64), 1), round(experts_touched(8, 2, 1), 1)
(222.4, 2.0)
"""

from __future__ import annotations

import dataclasses
import math

from servelab.analytic import costmodel
from servelab.analytic.checks import count as _count
from servelab.analytic.costmodel import GPUSpec, ModelSpec

__all__ = [
    "AWQ_GROUP_SIZE",
    "attention_variant",
    "experts_touched",
    "int4_weight_bytes",
    "kv_bytes_per_gpu",
    "moe_ridge_batch",
    "sixteen_bit_params",
    "step_weight_bytes",
]

# AWQ's and GPTQ's usual group: one scale (and one zero) per 128 input rows of a weight matrix, the group size the
# AWQ paper uses by default and most published int4 checkpoints carry (`group_size` in their quantization config).
AWQ_GROUP_SIZE = 128
SCALE_BYTES = 2          # a group's scale, in the activations' 16-bit dtype (vLLM 0.33.0's AWQ `scales` parameter)
ZERO_BYTES = 0.5         # a group's 4-bit zero point, packed eight to an int32 (`qzeros`)


# --------------------------------------------------------------------------------------------------
# int4 weights: what stays in 16-bit, and the group scales


def sixteen_bit_params(model: ModelSpec) -> int:
    """Parameters an int4 (W4A16) checkpoint keeps in 16-bit: the embedding and the LM head (one matrix when tied;
    vLLM 0.33.0 quantizes the LM head only when the checkpoint says so), the norms' weights (MLA's latent and query
    norms too) and a MoE's routers (vLLM's `GateLinear` is built without a quantization config). Every other weight
    is a matmul weight, packed 4 bits."""
    embeddings = model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)
    norms = (2 * model.num_layers + 1) * model.hidden_size + model.num_layers * (model.kv_lora_rank + model.q_lora_rank)
    routers = model.num_moe_layers * model.hidden_size * model.num_experts
    return embeddings + norms + routers


def int4_weight_bytes(model: ModelSpec, group_size: int = AWQ_GROUP_SIZE) -> float:
    """Bytes of an int4 (W4A16) checkpoint: every matmul weight 0.5 B plus, per `group_size` of them, a 16-bit scale
    and a 4-bit zero (2.5 B / group_size a weight); the `sixteen_bit_params` at 2 B.

    Llama-3-8B at group 128: 6.98e9 matmul weights x (0.5 + 2.5 / 128) B + 1.05e9 x 2 B = 5.73 GB, where the serving
    model's plain 0.5 B a parameter says 4.02 GB.

    >>> from servelab.analytic.costmodel import LLAMA3_8B
    >>> round(int4_weight_bytes(LLAMA3_8B) / 1e9, 2)
    5.73
    """
    group_size = _count("group_size", group_size, 1)
    matmul = model.param_count - sixteen_bit_params(model)
    return matmul * (0.5 + (SCALE_BYTES + ZERO_BYTES) / group_size) + 2.0 * sixteen_bit_params(model)


# --------------------------------------------------------------------------------------------------
# experts


def experts_touched(num_experts: int, experts_per_token: int, num_tokens: int) -> float:
    """The expected number of distinct experts `num_tokens` tokens pick in one MoE layer when each picks
    `experts_per_token` distinct experts of `num_experts`, uniformly: an expert escapes one token with probability
    1 - k/E, all n with (1 - k/E)^n, so E (1 - (1 - k/E)^n). Not min(E, n k): tokens share experts.

    >>> round(experts_touched(256, 8, 32), 1), experts_touched(8, 2, 0)
    (163.3, 0.0)
    """
    e = _count("num_experts", num_experts, 1)
    k = _count("experts_per_token", experts_per_token, 1)
    n = _count("num_tokens", num_tokens, 0)
    if k > e:
        raise ValueError(f"experts_per_token ({k}) cannot exceed num_experts ({e})")
    return e * (1.0 - (1.0 - k / e) ** n)


def step_weight_bytes(model: ModelSpec, num_tokens: int) -> float:
    """Bytes of weights one step over `num_tokens` tokens reads: everything but the routed experts once (attention,
    the dense layers, the shared experts, embeddings, LM head), and in each MoE layer the experts the batch touches
    (`experts_touched`), each `model.expert_params` weights. A dense model reads all its weights. The same bytes as
    `ModelSpec.weight_bytes_read`, written out from the fields.

    >>> from servelab.analytic.specs import MIXTRAL_8X7B
    >>> round(step_weight_bytes(MIXTRAL_8X7B, 1) / 1e9, 2), round(step_weight_bytes(MIXTRAL_8X7B, 8) / 1e9, 2)
    (25.76, 84.38)
    """
    num_tokens = _count("num_tokens", num_tokens, 1)
    if not model.num_experts:
        return model.weight_bytes
    layers, one = model.num_moe_layers, model.expert_params * model.bytes_per_param
    touched = experts_touched(model.num_experts, model.experts_per_token, num_tokens)
    return model.weight_bytes - layers * model.num_experts * one + layers * touched * one


def moe_ridge_batch(model: ModelSpec, gpu: GPUSpec, context_len: int, limit: int = 1 << 20) -> int | float:
    """The smallest decode batch at `context_len` whose step (`costmodel.step_cost`, which reads
    `model.weight_bytes_read`) is compute-bound; `math.inf` if none up to `limit`. A MoE's bytes grow with the batch
    until every expert is touched, so the ridge is found by search, not chapter 9's closed form w / (f - m)."""
    context_len = _count("context_len", context_len, 0)

    def bound(b: int) -> bool:          # `costmodel.step_cost` of b decodes at context_len, from its totals
        cost = costmodel.cost_from_totals(model, gpu, num_tokens=b, num_seqs=b, attention_pairs=b * (context_len + 1),
                                          kv_read_tokens=b * context_len)
        return cost.bound == "compute"

    if not bound(limit):
        return math.inf
    lo, hi = 0, limit                       # not bound(lo) (or lo = 0), bound(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if bound(mid) else (mid, hi)
    return hi


# --------------------------------------------------------------------------------------------------
# latent KV (MLA) against GQA and MHA


def kv_bytes_per_gpu(model: ModelSpec, tp: int = 1) -> float:
    """KV bytes one token costs on each of `tp` tensor-parallel GPUs. MLA (kv_lora_rank > 0): one latent of
    kv_lora_rank + qk_rope_head_dim elements a layer, no separate K and V, whole on every GPU (vLLM 0.33.0's MLA
    cache is one KV head that TP does not split). Otherwise K and V of max(1, kv_heads // tp) heads a layer: split
    over the GPUs, replicated once there are fewer heads than GPUs.

    >>> from servelab.analytic.costmodel import LLAMA3_8B
    >>> kv_bytes_per_gpu(LLAMA3_8B, 1) // 1024, kv_bytes_per_gpu(LLAMA3_8B, 16) // 1024
    (128, 16)
    """
    tp = _count("tp", tp, 1)
    if model.kv_lora_rank:
        return model.num_layers * (model.kv_lora_rank + model.qk_rope_head_dim) * model.bytes_per_kv_element
    heads = max(1, model.num_kv_heads // tp)
    return 2 * model.num_layers * heads * model.head_dim * model.bytes_per_kv_element


def attention_variant(model: ModelSpec, num_kv_heads: int, head_dim: int = 128) -> ModelSpec:
    """`model` with MLA replaced by plain attention of `num_kv_heads` KV heads of `head_dim` (its query heads kept):
    num_kv_heads = num_heads is MHA, fewer is GQA. The rest of the model (experts, layers, vocabulary) is unchanged,
    so the weights differ only by the attention projections."""
    return dataclasses.replace(model, name=f"{model.name}, {'MHA' if num_kv_heads == model.num_heads else 'GQA'}-"
                                           f"{num_kv_heads}", num_kv_heads=_count("num_kv_heads", num_kv_heads, 1),
                               head_dim=_count("head_dim", head_dim, 1), kv_lora_rank=0, q_lora_rank=0,
                               qk_rope_head_dim=0, v_head_dim=0)
