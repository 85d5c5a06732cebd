"""A roofline model of one engine step: how many FLOPs and bytes it costs, and so how long it takes.

A serving step runs the model once over every token scheduled in it: the decode tokens of the running
sequences (one each) and the prefill chunks of the sequences being admitted. The step is bound by
whichever resource runs out first:

    step_time = max(FLOPs / peak FLOP/s, bytes / HBM bandwidth) + fixed overhead

What it counts (FLOPs of the matmuls, the LM head and attention; bytes of the weights and of the KV read and
written), what it leaves out on purpose, and a number to check it against: docs/costmodel.md. Its last section turns
latency targets into scheduler settings (`max_prefill_chunk`, `max_decode_batch`, `max_backlog_tokens`).

>>> cost = step_cost(LLAMA2_7B, H100_SXM, prefill_tokens=0, decode_context_lens=[0])
>>> round(cost.memory_s * 1e3, 2), cost.bound
(4.02, 'memory')
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from servelab.analytic.specs import (  # noqa: F401 - what the course imports from here
    A100_PCIE,
    DEEPSEEK_V3,
    H100_SXM,
    H200,
    LLAMA2_7B,
    LLAMA3_8B,
    LLAMA31_8B,
    MISTRAL_7B,
    MIXTRAL_8X7B,
    GPUSpec,
    KiB,
    MiB,
    ModelSpec,
)

__all__ = [
    "A100_PCIE",
    "DEEPSEEK_V3",
    "MIXTRAL_8X7B",
    "MISTRAL_7B",
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "DEFAULT_MAX_NUM_SEQS",
    "DEFAULT_STEP_OVERHEAD_S",
    "GPUSpec",
    "H100_SXM",
    "GPU_MEMORY_UTILIZATION",
    "H200",
    "LLAMA2_7B",
    "LLAMA31_8B",
    "LLAMA3_8B",
    "ModelSpec",
    "StepCost",
    "activation_bytes",
    "cost_from_totals",
    "kv_capacity_tokens",
    "max_backlog_tokens",
    "max_decode_batch",
    "max_prefill_chunk",
    "roofline_s",
    "shared_prefix_decode_traffic",
    "step_cost",
    "step_time",
]


# The part of a step the roofline does not see: scheduling, building the input tensors, launching the
# kernels, sampling, detokenising. An assumption, not a measurement; a round figure for an engine with
# CUDA graphs. Set it to what your engine's profiler shows between two steps' kernels.
DEFAULT_STEP_OVERHEAD_S = 0.5e-3


@dataclass(frozen=True)
class StepCost:
    """What one step costs. `compute_s` and `memory_s` are the two roofline times on the GPU it was
    priced for; the step takes the larger (`bound` names which), plus the fixed overhead."""

    matmul_flops: float
    lm_head_flops: float
    attention_flops: float
    weight_bytes: float
    kv_read_bytes: float
    kv_write_bytes: float
    compute_s: float
    memory_s: float

    @property
    def flops(self) -> float:
        return self.matmul_flops + self.lm_head_flops + self.attention_flops

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / self.bytes

    def seconds(self, overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> float:
        """The step's duration: the slower roof plus the fixed per-step overhead."""
        return max(self.compute_s, self.memory_s) + overhead_s


def _counts(name: str, values) -> np.ndarray:
    """A non-negative integer count or a 1-D sequence of them, as an int64 array."""
    arr = np.atleast_1d(np.asarray(values))
    if arr.ndim != 1:
        raise ValueError(f"{name} must be an integer or a 1-D sequence of integers, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not (np.issubdtype(arr.dtype, np.floating) and np.all(np.mod(arr, 1) == 0)):
            raise ValueError(f"{name} must hold whole token counts, got {values!r}")
    arr = arr.astype(np.int64)
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be >= 0 (token counts), got {int(arr.min())}")
    return arr


def step_cost(model: ModelSpec, gpu: GPUSpec, prefill_tokens=0, decode_context_lens=(),
              prefill_context=0, *, logit_rows: int | None = None) -> StepCost:
    """Price one step: prefill chunks plus decoding sequences.

    - `prefill_tokens`: the chunk sizes of the sequences being prefilled this step, one entry per
      sequence (an int is one chunk; 0 or an empty sequence means no prefill).
    - `prefill_context`: for each chunk, how many of that sequence's tokens are already in the KV cache
      (a later chunk of a long prompt, or a prefix-cache hit). An int applies to every chunk.
    - `decode_context_lens`: for each decoding sequence, the number of tokens in its KV cache; it
      computes one new token that attends to all of them and to itself.
    - `logit_rows`: the positions whose logits the LM head computes. By default one per chunk and one per decode
      (a step samples at each sequence's last position). A speculative verification samples at every position of
      its chunk of k + 1 tokens: give (k + 1) x the sequences.

    Worked example, LLaMA-2-7B: one decode over a 1000-token context reads the weights (13,476,831,232 B),
    1000 tokens of KV (1000 x 524,288 B) and writes one (524,288 B).

    >>> c = step_cost(LLAMA2_7B, H100_SXM, decode_context_lens=[1000])
    >>> c.bytes == LLAMA2_7B.weight_bytes + 1001 * 524288
    True
    >>> c.attention_flops == 4 * 32 * 32 * 128 * 1001      # 4 x layers x heads x head_dim x keys
    True
    """
    chunks = _counts("prefill_tokens", prefill_tokens)
    prefix = _counts("prefill_context", prefill_context)
    contexts = _counts("decode_context_lens", decode_context_lens)
    if prefix.size == 1 and chunks.size != 1:
        prefix = np.full(chunks.size, prefix[0], dtype=np.int64)
    if prefix.size != chunks.size:
        raise ValueError(f"prefill_context has {prefix.size} entries but prefill_tokens has {chunks.size}: "
                         f"give one prefix length per chunk, or a single int for all of them")
    keep = chunks > 0            # a zero-token chunk is no chunk at all
    chunks, prefix = chunks[keep], prefix[keep]
    num_tokens = int(chunks.sum()) + contexts.size
    if num_tokens == 0:
        raise ValueError("a step must compute at least one token: give prefill_tokens or decode_context_lens")
    # (query, key) pairs: causal within a chunk, full over the cached prefix; a decode sees L + 1 keys. In Python
    # ints: c * (c + 1) passes int64 past a chunk of 3e9 tokens, and max_prefill_chunk's search goes that far
    pairs = (sum(c * p + c * (c + 1) // 2 for c, p in zip(chunks.tolist(), prefix.tolist()))
             + int(contexts.sum()) + contexts.size)
    rows = chunks.size + contexts.size if logit_rows is None else _one_count("logit_rows", logit_rows, "positions")
    if rows > num_tokens:
        raise ValueError(f"logit_rows ({rows}) cannot exceed the tokens the step computes ({num_tokens})")
    return cost_from_totals(model, gpu, num_tokens=num_tokens, num_seqs=rows,
                            attention_pairs=pairs, kv_read_tokens=int(prefix.sum()) + int(contexts.sum()))


def cost_from_totals(model: ModelSpec, gpu: GPUSpec, num_tokens: int, num_seqs: int, attention_pairs: int,
                     kv_read_tokens: int) -> StepCost:
    """The same model from the four totals `step_cost` reduces its arguments to.

    A step's cost depends on its batch only through: the tokens computed (matmuls, KV written), the
    LM-head rows (`num_seqs`: one a sequence, or every position a verification samples at), the (query, key)
    pairs of attention, and the cached tokens whose KV is read. The simulator computes these four with numpy and
    calls this directly; no checks here.

    >>> cost_from_totals(LLAMA2_7B, H100_SXM, 1, 1, 1001, 1000) == step_cost(LLAMA2_7B, H100_SXM,
    ...                                                                       decode_context_lens=[1000])
    True
    """
    matmul_flops = 2.0 * model.matmul_params * num_tokens
    lm_head_flops = 2.0 * model.vocab_size * model.hidden_size * num_seqs
    attention_flops = model.attention_flops_per_pair * attention_pairs  # QK^T, AV
    kv_read = kv_read_tokens * model.kv_bytes_per_token
    kv_write = num_tokens * model.kv_bytes_per_token
    weights = model.weight_bytes_read(num_tokens) if model.num_experts else model.weight_bytes
    flops = matmul_flops + lm_head_flops + attention_flops
    nbytes = weights + kv_read + kv_write
    return StepCost(matmul_flops=matmul_flops, lm_head_flops=lm_head_flops, attention_flops=attention_flops,
                    weight_bytes=weights, kv_read_bytes=kv_read, kv_write_bytes=kv_write,
                    compute_s=flops / gpu.peak_flops, memory_s=nbytes / gpu.hbm_bandwidth)


def roofline_s(model: ModelSpec, gpu: GPUSpec, num_tokens: int, num_seqs: int, attention_pairs: int,
               kv_read_tokens: int) -> float:
    """max(compute_s, memory_s) of `cost_from_totals(...)` without building its `StepCost`: the same products
    and sums in the same order, so the very same float. The simulator prices every step with it.

    >>> cost = step_cost(LLAMA2_7B, H100_SXM, decode_context_lens=[1000])          # memory-bound
    >>> roofline_s(LLAMA2_7B, H100_SXM, 1, 1, 1001, 1000) == cost.memory_s
    True
    """
    kv_bytes = model.kv_bytes_per_token
    flops = (2.0 * model.matmul_params * num_tokens + 2.0 * model.vocab_size * model.hidden_size * num_seqs
             + model.attention_flops_per_pair * attention_pairs)
    weights = model.weight_bytes_read(num_tokens) if model.num_experts else model.weight_bytes
    nbytes = weights + kv_read_tokens * kv_bytes + num_tokens * kv_bytes
    return max(flops / gpu.peak_flops, nbytes / gpu.hbm_bandwidth)


def _check_overhead(overhead_s) -> float:
    if not isinstance(overhead_s, numbers.Real) or not overhead_s >= 0:
        raise ValueError(f"overhead_s must be a number >= 0 (seconds per step), got {overhead_s!r}")
    return float(overhead_s)


def step_time(model: ModelSpec, gpu: GPUSpec, prefill_tokens=0, decode_context_lens=(), prefill_context=0,
              overhead_s: float = DEFAULT_STEP_OVERHEAD_S, *, logit_rows: int | None = None) -> float:
    """Seconds for one step: max(compute time, memory time) + `overhead_s` (see DEFAULT_STEP_OVERHEAD_S).

    Arguments as `step_cost`. A 4096-token prefill of LLaMA-2-7B is compute-bound: 53.1 TFLOPs of
    matmuls (2 x 6.48e9 x 4096) and 4.4 of attention at 989 TFLOP/s is 58.1 ms, plus 0.5 ms overhead.

    >>> round(step_time(LLAMA2_7B, H100_SXM, prefill_tokens=4096) * 1e3, 1)
    58.6
    """
    overhead_s = _check_overhead(overhead_s)
    return step_cost(model, gpu, prefill_tokens, decode_context_lens, prefill_context,
                     logit_rows=logit_rows).seconds(overhead_s)


def shared_prefix_decode_traffic(prefix_len: int, suffix_lens, num_q_heads: int, num_kv_heads: int,
                                 head_dim: int, bytes_per_element: float, prefix_once: bool = True):
    """`(bytes, flops)` of one layer's decode attention for sequences that share their first `prefix_len`
    cached tokens: sequence i holds `prefix_len + suffix_lens[i]` cached tokens and decodes one new token.

    A plain paged kernel reads every sequence's keys, so the shared prefix's K and V once per sequence
    (`prefix_once=False`). A shared-prefix ("cascade") kernel runs all the batch's queries over the prefix
    together, as one block of queries, and reads its K and V once per step (`prefix_once=True`); each sequence
    then attends to its own suffix, and the two partial softmaxes are merged by their maxima and sums. The
    FLOPs are the same either way: every query head still meets every key of its sequence.

    Bytes: K and V of every token read (num_kv_heads x head_dim elements each), plus each sequence's query read
    and output written (num_q_heads x head_dim elements each); bytes_per_element bytes per element; the block
    table left out. FLOPs: 2 per multiply-add, head_dim of them for q.k and head_dim for p.v, per query head
    and key: 4 x num_q_heads x head_dim x (keys of all sequences).

    Two sequences on a 4-token prefix with 2 tokens each of their own (4 query / 2 KV heads of 8, 2 bytes):
    read once, 4 + 2 + 2 = 8 tokens of K and V (512 bytes); per sequence, 12 (768 bytes); 256 bytes of q
    and out; 12 keys met by 4 heads.

    >>> shared_prefix_decode_traffic(4, [2, 2], 4, 2, 8, 2)
    (768, 1536)
    >>> shared_prefix_decode_traffic(4, [2, 2], 4, 2, 8, 2, prefix_once=False)
    (1024, 1536)
    """
    prefix = _one_count("prefix_len", prefix_len, "the tokens every sequence shares")
    suffixes = _counts("suffix_lens", suffix_lens)
    if suffixes.size == 0:
        raise ValueError("suffix_lens must hold one entry per sequence (0 for a sequence that is all prefix)")
    for name, value in (("num_q_heads", num_q_heads), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)):
        if not _is_count(value) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if num_q_heads % num_kv_heads:
        raise ValueError(f"num_q_heads ({num_q_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    if not isinstance(bytes_per_element, numbers.Real) or isinstance(bytes_per_element, bool) \
            or not bytes_per_element > 0:
        raise ValueError(f"bytes_per_element must be a number > 0, got {bytes_per_element!r}")
    num_seqs, suffix_tokens = int(suffixes.size), int(suffixes.sum())
    read_tokens = (prefix if prefix_once else num_seqs * prefix) + suffix_tokens
    kv_bytes = 2 * read_tokens * num_kv_heads * head_dim * bytes_per_element
    q_and_out_bytes = 2 * num_seqs * num_q_heads * head_dim * bytes_per_element
    flops = 4 * num_q_heads * head_dim * (num_seqs * prefix + suffix_tokens)
    return kv_bytes + q_and_out_bytes, flops


# The share of GPU memory the engine takes, one figure for the whole course: vLLM 0.33.0's default
# `gpu_memory_utilization` (`CacheConfig` in vllm/config/cache.py).
GPU_MEMORY_UTILIZATION = 0.92

# The token budget and the cap on running sequences the activation allowance is sized at: vLLM 0.33.0's
# defaults for an online server on an H100 or H200 (`max_num_batched_tokens` 8192, `max_num_seqs` 1024;
# chapter 9 shows where they come from).
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
DEFAULT_MAX_NUM_SEQS = 1024


def activation_bytes(model: ModelSpec, max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
                     max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> float:
    """The memory an engine keeps free for activations: what its profiling run, a forward pass over a full token
    budget, peaks at. Modelled as one layer's largest live tensors at the budget T (the MLP's gate and up outputs,
    2 x intermediate_size, beside the residual stream, its norm, the attention output and the query, about
    4 x hidden_size, all bf16) plus the fp32 logits of the rows the sampler sees (min(T, max_num_seqs)):

        T x (2 x intermediate_size + 4 x hidden_size) x 2 B  +  min(T, max_num_seqs) x vocab_size x 4 B

    An allowance, not a measurement: a real profile adds the CUDA context, NCCL buffers and the allocator's
    fragmentation, which `gpu_memory_utilization` < 1 leaves room for.

    >>> round(activation_bytes(LLAMA3_8B) / 1e9, 2)      # 0.74 GB of activations + 0.53 GB of logits
    1.26
    """
    tokens = _one_count("max_num_batched_tokens", max_num_batched_tokens, "tokens")
    rows = min(tokens, _one_count("max_num_seqs", max_num_seqs, "sequences"))
    return tokens * (2 * model.intermediate_size + 4 * model.hidden_size) * 2.0 + rows * model.vocab_size * 4.0


def kv_capacity_tokens(model: ModelSpec, gpu: GPUSpec, memory_fraction: float = GPU_MEMORY_UTILIZATION,
                       max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
                       max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, pipeline_stages: int = 1) -> int:
    """How many tokens of KV fit in `memory_fraction` of the GPU's memory once the weights and the activation
    allowance (`activation_bytes` at the token budget) are taken out: what an engine's KV cache holds. With
    `pipeline_stages` > 1 each GPU holds 1/stages of the layers: of the weights and of every token's KV (the
    embedding and the LM head counted evenly across the stages).

    Llama-3-8B on an H100 SXM: 0.92 x 85.52e9 B - 16.06e9 B of weights - 1.26e9 B of activations = 61.36e9 B,
    468,102 tokens of 128 KiB.

    >>> kv_capacity_tokens(LLAMA3_8B, H100_SXM), kv_capacity_tokens(LLAMA2_7B, H100_SXM)
    (468102, 122913)
    """
    if not 0 < memory_fraction <= 1:
        raise ValueError(f"memory_fraction must be in (0, 1], got {memory_fraction!r}")
    stages = _one_count("pipeline_stages", pipeline_stages, "GPUs in a row, each holding some layers")
    if stages < 1:
        raise ValueError("pipeline_stages must be >= 1")
    weights, per_token = model.weight_bytes / stages, model.kv_bytes_per_token / stages   # x / 1 is x exactly
    reserved = weights + activation_bytes(model, max_num_batched_tokens, max_num_seqs)
    free = gpu.memory_bytes * memory_fraction - reserved
    if free < per_token:
        raise ValueError(f"{model.name} ({weights / 1e9:.1f} GB of weights and "
                         f"{reserved / 1e9 - weights / 1e9:.1f} GB of activations) leaves no room for KV "
                         f"in {memory_fraction:.0%} of {gpu.name}'s {gpu.memory_bytes / 1e9:.1f} GB")
    return int(free // per_token)


# --------------------------------------------------------------------------------------------------
# SLO arithmetic: what a TPOT target allows a step to hold, and what a TTFT target allows to queue
# --------------------------------------------------------------------------------------------------

def _one_count(name: str, value, meaning: str) -> int:
    """A single non-negative whole token count (checked as `_counts` does)."""
    if np.ndim(value) != 0:
        raise ValueError(f"{name} must be one integer ({meaning}), got {value!r}")
    return int(_counts(name, value)[0])


def _check_target(name: str, value) -> float:
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not value > 0 or not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def _largest_fitting(fits, start: int = 1) -> int:
    """The largest n >= start with fits(n) True, for a predicate that is True up to some n and False after
    it; start - 1 if fits(start) is already False. Doubling, then bisection: O(log n) calls."""
    if not fits(start):
        return start - 1
    lo, hi = start, 2 * start
    while fits(hi):
        lo, hi = hi, 2 * hi
        if hi > 1 << 40:
            raise ValueError("no upper limit found: the target is never exceeded")
    while hi - lo > 1:               # fits(lo) and not fits(hi)
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def max_prefill_chunk(model: ModelSpec, gpu: GPUSpec, step_target_s: float, decode_context_lens=(),
                      prefill_context: int = 0, overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> int:
    """The largest prefill chunk (tokens) that one step can carry next to the given decodes and still
    take at most `step_target_s`: 0 if even a 1-token chunk makes the step miss it.

    Under a mixed budgeted schedule every running sequence decodes in every step, so each decoder's
    inter-token gap *is* the step time, and a TPOT target is a step-time target. The step holds the
    decodes (one token over each context in `decode_context_lens`) and one chunk of c tokens on top of
    `prefill_context` cached tokens of its prompt. Its time only grows with c, so the answer is found by
    bisection on `step_time`. The decodes' share is not free: each adds a token of matmuls and its whole
    context of KV reads, so the chunk that fits shrinks as the decode batch and its contexts grow, and
    so it does as the prefix under the chunk grows (attention over the prefix).

    The token budget that keeps this step on target is `len(decode_context_lens) + max_prefill_chunk(...)`.

    >>> max_prefill_chunk(LLAMA3_8B, H100_SXM, 0.030, decode_context_lens=[1024] * 32)
    1980
    >>> max_prefill_chunk(LLAMA3_8B, H100_SXM, 0.030)                      # the decodes' share: 33 tokens
    2013
    >>> max_prefill_chunk(LLAMA3_8B, H100_SXM, 0.030, [1024] * 32, prefill_context=30_000)   # deep in a prompt
    957
    """
    step_target_s = _check_target("step_target_s", step_target_s)
    overhead_s = _check_overhead(overhead_s)
    contexts = _counts("decode_context_lens", decode_context_lens)
    prefix = _one_count("prefill_context", prefill_context, "the chunk's cached prefix")
    d, ctx_sum = contexts.size, int(contexts.sum())

    def fits(c: int) -> bool:
        pairs = c * prefix + c * (c + 1) // 2 + ctx_sum + d
        cost = cost_from_totals(model, gpu, num_tokens=c + d, num_seqs=1 + d, attention_pairs=pairs,
                                kv_read_tokens=prefix + ctx_sum)
        return cost.seconds(overhead_s) <= step_target_s

    return _largest_fitting(fits)


def max_decode_batch(model: ModelSpec, gpu: GPUSpec, step_target_s: float, context_len: int,
                     overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> int:
    """The largest number of sequences, all at `context_len` tokens of context, that decode together in
    one step of at most `step_target_s` seconds (0 if a single one misses it).

    Every sequence in the batch waits for the same step, so its time per output token is the step time
    of the whole batch: this is the largest batch whose every member meets a TPOT target of
    `step_target_s`. Decode steps are memory-bound here, and each sequence adds its whole context of KV
    to the bytes read, so the step time grows linearly with the batch.

    >>> max_decode_batch(LLAMA2_7B, H100_SXM, 0.012, context_len=2048)   # 512 KiB of KV per token
    23
    >>> max_decode_batch(LLAMA3_8B, H100_SXM, 0.012, context_len=2048)   # GQA: 128 KiB
    83
    """
    step_target_s = _check_target("step_target_s", step_target_s)
    overhead_s = _check_overhead(overhead_s)
    context_len = _one_count("context_len", context_len, "every sequence in the batch has that context")

    def fits(b: int) -> bool:
        cost = cost_from_totals(model, gpu, num_tokens=b, num_seqs=b, attention_pairs=b * (context_len + 1),
                                kv_read_tokens=b * context_len)
        return cost.seconds(overhead_s) <= step_target_s

    return _largest_fitting(fits)


def max_backlog_tokens(budget: int, num_decodes: int, step_s: float, ttft_target_s: float) -> int:
    """The admission rule: the most prefill work (tokens) a new request may find queued, its own prompt
    included, and still get its first token within `ttft_target_s`. 0 if none can.

    The coupling, one link at a time:
      * the TPOT target fixes the step: every step lasts at most `step_s` and carries `budget` tokens;
      * the decodes take `num_decodes` of them, so prefill works the backlog off at
        chunk = budget - num_decodes tokens a step (the decodes' tokens are not prefill throughput);
      * a request arriving now first waits for the step in flight (at most one step), then the Q tokens
        queued ahead of it and its own prompt P go through at `chunk` a step, and its first token comes
        at the end of the step that computes its last prompt token:
            TTFT <= (1 + ceil((Q + P) / chunk)) * step_s;
      * so TTFT <= target exactly when Q + P <= chunk * (floor(ttft_target_s / step_s) - 1).
    Admit the request iff its Q + P is at most this; a request that fails cannot meet its TTFT target,
    and queueing it anyway only delays every request behind it (reject it, or send it to a tier
    without a TTFT promise).

    >>> max_backlog_tokens(budget=2048, num_decodes=48, step_s=0.030, ttft_target_s=1.0)   # 2000 x (33 - 1)
    64000
    """
    if not _is_count(budget) or budget < 1:
        raise ValueError(f"budget must be an integer >= 1 (tokens per step), got {budget!r}")
    if not _is_count(num_decodes) or num_decodes < 0:
        raise ValueError(f"num_decodes must be an integer >= 0, got {num_decodes!r}")
    if num_decodes > budget:
        raise ValueError(f"the decodes alone ({num_decodes} tokens) do not fit in the budget ({budget} tokens)")
    step_s = _check_target("step_s", step_s)
    ttft_target_s = _check_target("ttft_target_s", ttft_target_s)
    # the steps that end by the target; the tiny factor keeps 0.3 / 0.1 = 2.9999999999999996 from
    # rounding down to 2
    steps = math.floor(ttft_target_s / step_s * (1 + 1e-12))
    return max(0, (budget - num_decodes) * (steps - 1))


def _is_count(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)
