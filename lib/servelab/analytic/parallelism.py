"""A model spread over GPUs, and a step launched as a CUDA graph: what each does to the ceilings and the step.

Tensor parallelism (TP, Megatron-LM's split): each of `tp` GPUs holds `model.shard(tp)`, its heads, MLP width and
vocabulary, and two ring all-reduces a layer join the halves (`tp_comm_s`); KV heads below the degree are copied
(`kv_tokens_per_degree`). Pipeline parallelism (PP): stages of layers, a batch's pass through all of them is each
sequence's token gap, `pp` batches in flight (`bubble_fraction` for a fixed set of micro-batches). Experts over GPUs
(EP) with data-parallel attention: a MoE layer's expert sees batch x k / E tokens, so its ridge needs E / k times
the dense batch (`expert_ridge_tokens`), reached by pooling many GPUs' batches over an all-to-all
(`all_to_all_bytes`); MLA's latent KV, whole on every TP GPU, is held once per GPU under DP attention
(`mla_group_kv_tokens`). CUDA graphs: a batch is padded up to the next captured size (`pad_to_graph`), a batch above
the largest runs eagerly and pays every kernel launch (`graph_step`). Every step is priced by `serving.check`.

>>> round(tp_comm_s(LLAMA31_70B, 64, 8, NVLINK_H100.bandwidth) * 1e3, 3)      # 160 all-reduces of 64 tokens
5.132
>>> kv_tokens_per_degree(LLAMA31_70B, H100_SXM, 4), kv_tokens_per_degree(LLAMA31_70B, H100_SXM, 8)
(518764, 1472617)
>>> pad_to_graph(257, [1, 2, 4, 8, 256, 272]), pad_to_graph(513, [8, 512])
(272, None)
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from servelab.analytic import capacity, costmodel, serving
from servelab.analytic.checks import count as _count
from servelab.analytic.checks import positive as _positive
from servelab.analytic.costmodel import DEFAULT_STEP_OVERHEAD_S, H100_SXM, GPUSpec, ModelSpec  # noqa: F401
from servelab.analytic.specs import DEFAULT_LINK_LATENCY_S, NVLINK_H100, RDMA_400G, LinkSpec

__all__ = [
    "GRAPH_MODES",
    "KERNELS_PER_LAYER",
    "LAUNCH_S",
    "LLAMA31_70B",
    "NVLINK_H100",
    "RDMA_400G",
    "GraphStep",
    "all_to_all_bytes",
    "all_to_all_s",
    "bubble_fraction",
    "expert_ridge_tokens",
    "graph_captures",
    "graph_step",
    "kv_tokens_per_degree",
    "launch_overhead_s",
    "mla_group_kv_tokens",
    "pad_to_graph",
    "tp_comm_s",
    "tp_decode",
    "tp_decode_tpot",
    "weights_per_gpu",
]

# Source: the Hugging Face config of meta-llama/Llama-3.1-70B (hidden_size 8192, intermediate_size 28672, 80 layers,
# 64 attention heads, num_key_value_heads 8, head_dim 128, vocab_size 128256, untied embeddings,
# max_position_embeddings 131072): 70.6B parameters, 141 GB in bf16, more than one H100 holds.
LLAMA31_70B = ModelSpec("Llama-3.1-70B", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8, head_dim=128,
                        intermediate_size=28672, vocab_size=128256, max_position_embeddings=131072)

# Kernels one Llama layer launches in an eager decode step, after vLLM's fusions: the input RMSNorm, the QKV GEMM,
# rotary embedding, the KV-cache write, attention, the output GEMM, the fused residual add and RMSNorm, the gate-up
# GEMM, SiLU-and-multiply, the down GEMM; tensor parallelism adds its two all-reduces. A count, not a profile.
KERNELS_PER_LAYER = 10
# The CPU time to issue one kernel (or one graph replay) from Python through PyTorch: an assumption of the order a
# profiler shows (some microseconds), not a measurement. It is what a CUDA graph saves: its replay issues them all.
LAUNCH_S = 10e-6
# vLLM 0.33.0's CUDAGraphMode (vllm/config/compilation.py): "full" captures the whole forward (attention included),
# "piecewise" captures the pieces between attention ops and runs attention eagerly, "eager" captures nothing.
GRAPH_MODES = ("full", "piecewise", "eager")


# --------------------------------------------------------------------------------------------------
# tensor parallelism


def tp_comm_s(model: ModelSpec, num_tokens: int, tp: int, link_bandwidth: float,
              latency_s: float = DEFAULT_LINK_LATENCY_S) -> float:
    """Seconds a step's all-reduces take under TP of degree `tp`: two a layer (after attention, after the MLP), each
    a ring over `num_tokens` x hidden_size bf16 activations: 2(p-1)/p of the bytes over one direction of the link
    and 2(p-1) hops of `latency_s` (`serving.all_reduce_s`, which `serving.check` adds to every step). 0 at tp = 1."""
    return _comm_s(model, num_tokens, tp, link_bandwidth, latency_s)


def _comm_s(model: ModelSpec, num_tokens: int, tp: int, link_bandwidth: float, latency_s: float) -> float:
    """`tp_comm_s`'s work, which the closed forms and the simulator call: the exercise's reference is not available
    while chapter 16 grades."""
    nbytes = _count("num_tokens", num_tokens, 0) * model.hidden_size * serving.ACTIVATION_BYTES
    link = LinkSpec("link", _positive("link_bandwidth", link_bandwidth), "given")
    return 2 * model.num_layers * serving.all_reduce_s(nbytes, _count("tp", tp), link,
                                                       _positive("latency_s", latency_s, allow_zero=True))


def kv_tokens_per_degree(model: ModelSpec, gpu: GPUSpec, tp: int) -> int:
    """Tokens of KV a TP group of `tp` GPUs holds: every GPU holds every token, for its own KV heads
    (max(1, kv_heads // tp): copied below the degree), in what its memory leaves after its share of the weights and
    the activation allowance (`costmodel.kv_capacity_tokens` of `model.shard(tp)`). Raises where nothing fits."""
    return costmodel.kv_capacity_tokens(model.shard(_count("tp", tp)), gpu)


def tp_decode(model: ModelSpec, gpu: GPUSpec, tp: int, batch: int, context: int,
              link: LinkSpec = NVLINK_H100, **settings) -> serving.Feasible:
    """`serving.check` of a decode step of `batch` sequences at `context` tokens on a TP group of `tp` GPUs."""
    return serving.check(serving.ServingPoint.decode(model, gpu, batch, context, tp=tp, link=link, **settings))


def tp_decode_tpot(model: ModelSpec, gpu: GPUSpec, tp: int, rate: float, prompt_len: int, output_len: int,
                   link: LinkSpec = NVLINK_H100, latency_s: float = DEFAULT_LINK_LATENCY_S) -> tuple[float, float]:
    """(mean TPOT, mean running sequences) of one TP group decoding `rate` requests/s, each output_len - 1 decode
    steps at a mean context of prompt_len + (output_len - 2) / 2: Little's law N = rate x steps x TPOT with
    TPOT = t(N + 1) on the shard's two roofline lines plus the all-reduces, themselves a line in N (chapter 14's
    `decode_tpot` with the comm added). (inf, inf) past the wall."""
    steps = _count("output_len", output_len, 2) - 1
    context = _count("prompt_len", prompt_len, 1) + (steps - 1) / 2
    shard = model.shard(_count("tp", tp))
    c0 = _comm_s(model, 0, tp, link.bandwidth, latency_s)
    c1 = _comm_s(model, 1, tp, link.bandwidth, latency_s) - c0
    lines = tuple((c + c0 + d + c1, d + c1) for c, d in (capacity.step_line(shard, gpu, context),
                                                         capacity.compute_line(shard, gpu, context)))
    n = capacity.resident_at(_positive("rate", rate, allow_zero=True), steps, lines)
    if math.isinf(n):
        return math.inf, math.inf
    return max(c + d * n for c, d in lines), n


# --------------------------------------------------------------------------------------------------
# pipeline parallelism


def bubble_fraction(stages: int, microbatches: int) -> float:
    """The idle share of a pipeline of `stages` stages that runs `microbatches` micro-batches and then drains
    (GPipe's schedule): (p - 1) / (m + p - 1). A server that keeps `stages` batches in flight without draining
    has none in steady state; it pays the bubble when the batches in flight run out.

    >>> bubble_fraction(4, 4), bubble_fraction(1, 8)
    (0.42857142857142855, 0.0)
    """
    p, m = _count("stages", stages), _count("microbatches", microbatches)
    return (p - 1) / (m + p - 1)


# --------------------------------------------------------------------------------------------------
# experts over GPUs, data-parallel attention


def expert_ridge_tokens(model: ModelSpec, gpu: GPUSpec) -> int:
    """The fewest tokens a step must compute (over all the GPUs whose batches meet at the experts) for a routed
    expert's matmuls to be compute-bound: each expert sees tokens x k / E of them on average (uniform routing), and
    its weights are compute-bound from ridge x bytes_per_param / 2 tokens on, so tokens >= that x E / k. A dense
    model's matmuls need only the ridge's share (k = E).

    >>> from servelab.analytic.costmodel import DEEPSEEK_V3
    >>> expert_ridge_tokens(DEEPSEEK_V3, H100_SXM)         # 256 experts, 8 a token: 32x the dense ridge
    9448
    """
    if not model.is_moe:
        raise ValueError(f"{model.name} has no experts")
    per_expert = gpu.ridge_flops_per_byte * model.bytes_per_param / 2
    return math.ceil(per_expert * model.num_experts / model.experts_per_token)


def all_to_all_bytes(num_tokens: int, hidden_size: int, experts_per_token: int, ep: int,
                     bytes_per_element: float = 2) -> float:
    """Bytes one GPU sends in one MoE layer's two all-to-alls under expert parallelism of degree `ep`: each of its
    `num_tokens` tokens goes to its k experts (dispatch) and comes back weighted (combine), a hidden_size activation
    each way, and with experts spread evenly over the `ep` GPUs (ep - 1) / ep of those copies leave the GPU.
    (DeepEP sends the dispatch in fp8 and merges copies bound for one node: both left out.)

    >>> all_to_all_bytes(1, 7168, 8, 8) == 2 * 8 * 7 / 8 * 7168 * 2
    True
    """
    tokens, k = _count("num_tokens", num_tokens, 0), _count("experts_per_token", experts_per_token)
    ep = _count("ep", ep)
    return 2 * tokens * k * (ep - 1) / ep * _count("hidden_size", hidden_size) * bytes_per_element


def all_to_all_s(model: ModelSpec, num_tokens: int, ep: int, link: LinkSpec = NVLINK_H100,
                 latency_s: float = DEFAULT_LINK_LATENCY_S) -> float:
    """Seconds a step's all-to-alls take on one GPU: every MoE layer's dispatch and combine, `all_to_all_bytes` over
    one direction of the link and a latency each (two a layer). 0 at ep = 1."""
    if _count("ep", ep) == 1:
        return 0.0
    nbytes = all_to_all_bytes(num_tokens, model.hidden_size, model.experts_per_token, ep)
    return model.num_moe_layers * (nbytes / link.bandwidth + 2 * latency_s)


def weights_per_gpu(model: ModelSpec, gpus: int, dp_attention: bool) -> float:
    """Weight bytes on each of `gpus` GPUs serving a MoE model. TP: every weight split `gpus` ways (`shard`).
    DP attention with the routed experts spread over the GPUs (EP): the routed experts split, everything else
    (attention, shared experts, dense layers, embeddings) whole on every GPU."""
    if not dp_attention:
        return model.shard(_count("gpus", gpus)).weight_bytes
    routed = model.num_moe_layers * model.num_experts * model.expert_params * model.bytes_per_param
    return model.weight_bytes - routed + routed / _count("gpus", gpus)


def mla_group_kv_tokens(model: ModelSpec, gpu: GPUSpec, gpus: int, dp_attention: bool) -> int:
    """Tokens of KV a group of `gpus` GPUs holds for an MLA model. Under TP the latent is whole on every GPU, so
    each holds every token of the group's batch: the group holds what one GPU does. Under DP attention each GPU
    holds its own sequences: `gpus` times one GPU's. One GPU's: 92% of its memory less `weights_per_gpu` and the
    activation allowance, over the latent's bytes per token."""
    gpus = _count("gpus", gpus)
    act = costmodel.activation_bytes(model if dp_attention else model.shard(gpus))
    free = gpu.memory_bytes * costmodel.GPU_MEMORY_UTILIZATION - (weights_per_gpu(model, gpus, dp_attention) + act)
    if free < model.kv_bytes_per_token:
        raise ValueError(f"{model.name} on {gpus} GPUs leaves no room for KV on a {gpu.name}")
    one = int(free // model.kv_bytes_per_token)
    return one * gpus if dp_attention else one


# --------------------------------------------------------------------------------------------------
# CUDA graphs


def pad_to_graph(num_tokens: int, capture_sizes) -> int | None:
    """The size a step of `num_tokens` tokens runs at: the smallest captured size at least as large (its graph,
    replayed with the extra rows as padding), or None above the largest (no graph: the step runs eagerly)."""
    return _pad(num_tokens, capture_sizes)


def _pad(num_tokens: int, capture_sizes) -> int | None:
    """`pad_to_graph`'s work, for `graph_step` and the simulator (the exercise's reference is not available while
    chapter 16 grades)."""
    sizes = sorted(capture_sizes)
    i = bisect.bisect_left(sizes, _count("num_tokens", num_tokens))
    return sizes[i] if i < len(sizes) else None


def launch_overhead_s(model: ModelSpec, mode: str, tp: int = 1, launch_s: float = LAUNCH_S) -> float:
    """The launch time a step adds to the course's fixed overhead (which is an engine with full graphs): none for a
    full graph (one replay); for piecewise graphs, attention run eagerly in each layer and a replay for each of the
    layers + 1 pieces between; eagerly, every kernel of every layer (`KERNELS_PER_LAYER`, two all-reduces more
    under TP)."""
    if mode not in GRAPH_MODES:
        raise ValueError(f"mode must be one of {GRAPH_MODES}, got {mode!r}")
    layers = model.num_layers
    if mode == "full":
        return 0.0
    if mode == "piecewise":
        return (2 * layers + 1) * launch_s
    return layers * (KERNELS_PER_LAYER + (2 if _count("tp", tp) > 1 else 0)) * launch_s


def graph_captures(capture_sizes, model: ModelSpec, mode: str = "full_and_piecewise") -> int:
    """CUDA graphs an engine captures: one a size for full graphs, layers + 1 pieces a size for piecewise ones, both
    sets for vLLM 0.33.0's default FULL_AND_PIECEWISE (full graphs for decode batches, piecewise for the rest)."""
    n = len(list(capture_sizes))
    pieces = {"full": 1, "piecewise": model.num_layers + 1, "full_and_piecewise": model.num_layers + 2}
    if mode not in pieces:
        raise ValueError(f"mode must be one of {sorted(pieces)}, got {mode!r}")
    return n * pieces[mode]


@dataclass(frozen=True)
class GraphStep:
    """A decode step launched through CUDA graphs: the size it ran at (None: eagerly), its time and the roofline
    part of it."""

    batch: int
    padded: int | None
    step_s: float
    roofline_s: float


def graph_step(model: ModelSpec, gpu: GPUSpec, batch: int, context: int, capture_sizes, mode: str = "full",
               tp: int = 1, link: LinkSpec = NVLINK_H100) -> GraphStep:
    """A decode step of `batch` sequences at `context` tokens with CUDA graphs captured at `capture_sizes`: padded
    up to the next size (the padding rows are decodes of an empty context: they run every matmul and all-reduce, and
    attend to nothing) with `mode`'s launch overhead; above the largest size, eagerly at `batch`. Priced by
    `serving.check`, with the fixed overhead plus `launch_overhead_s`."""
    batch, context = _count("batch", batch), _count("context", context, 0)
    padded = _pad(batch, capture_sizes)
    base = DEFAULT_STEP_OVERHEAD_S
    if padded is None:
        contexts, overhead = (context,) * batch, base + launch_overhead_s(model, "eager", tp)
    else:
        contexts = (context,) * batch + (0,) * (padded - batch)
        overhead = base + launch_overhead_s(model, mode, tp)
    f = serving.check(serving.ServingPoint(model, gpu, decode_contexts=contexts, overhead_s=overhead, tp=tp,
                                           link=link))
    return GraphStep(batch, padded, f.step_s, max(f.compute_s, f.memory_s))

