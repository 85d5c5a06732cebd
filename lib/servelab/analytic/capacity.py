"""How many sequences an engine can run at once, how many it does run, and what a throughput fleet costs.

Four questions, one cost model (`servelab.analytic.costmodel`'s roofline step): the ceilings on running sequences
(`running_ceilings`), Little's law with a step that grows with the batch (`resident_sequences`), a throughput-only
fleet (`fleet_size`) and the token budget as a point on the roofline (`budget_knee`); docs/analytic.md says what
each answers. Every function takes `ModelSpec` / `GPUSpec` values; a derated `GPUSpec`
(`dataclasses.replace(H100_SXM, peak_flops=0.7 * H100_SXM.peak_flops)`) models a kernel below the peaks.

>>> kv_ceiling(LLAMA3_8B, H100_SXM, 2048), compute_ridge_batch(LLAMA3_8B, H100_SXM, 256)
(228, 912)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servelab.analytic import costmodel
from servelab.analytic.checks import count as _count
from servelab.analytic.checks import positive as _positive
from servelab.analytic.costmodel import DEFAULT_STEP_OVERHEAD_S, H100_SXM, LLAMA3_8B, GPUSpec, ModelSpec  # noqa: F401

__all__ = [
    "Ceilings",
    "FleetPlan",
    "MixedStep",
    "budget_knee",
    "compute_ridge_batch",
    "cudagraph_capture_sizes",
    "decode_s_per_token",
    "fleet_size",
    "kv_ceiling",
    "mean_context",
    "mixed_fleet_size",
    "mixed_step",
    "prefill_s_per_token",
    "prefill_share_ratio",
    "resident_sequences",
    "running_ceilings",
    "slo_budget",
    "step_line",
    "time_weighted_running",
]

SECONDS_PER_DAY = 86_400


# --------------------------------------------------------------------------------------------------
# the ceilings on running sequences


def kv_ceiling(model: ModelSpec, gpu: GPUSpec, context_len: int,
               memory_fraction: float = costmodel.GPU_MEMORY_UTILIZATION) -> int:
    """How many sequences of `context_len` tokens each fit in the KV cache: the cache's tokens
    (`costmodel.kv_capacity_tokens`: `memory_fraction` of the GPU's memory less the weights and the activation
    allowance) // context_len.

    Llama-3-8B on an H100: 0.92 x 85.52 GB - 16.06 GB of weights - 1.26 GB of activations = 61.36 GB, 468,102
    tokens of 128 KiB; at 2048 tokens a sequence that is 228, at 256 tokens 1,828.

    >>> kv_ceiling(LLAMA3_8B, H100_SXM, 2048), kv_ceiling(LLAMA3_8B, H100_SXM, 256)
    (228, 1828)
    """
    context_len = _count("context_len", context_len)
    return costmodel.kv_capacity_tokens(model, gpu, memory_fraction) // context_len


def _decode_cost(model: ModelSpec, gpu: GPUSpec, batch: int, context_len) -> costmodel.StepCost:
    """A step of `batch` decodes, each over `context_len` cached tokens (a float is a mean context)."""
    return costmodel.cost_from_totals(model, gpu, num_tokens=batch, num_seqs=batch,
                                      attention_pairs=batch * (context_len + 1), kv_read_tokens=batch * context_len)


def compute_ridge_batch(model: ModelSpec, gpu: GPUSpec, context_len: int) -> int | float:
    """The smallest decode batch, every sequence at `context_len` tokens of context, whose step is compute-bound
    (compute time >= memory time, `StepCost.bound`); `math.inf` when no batch is.

    Both roofs grow linearly with the batch B: compute by f (one token's matmuls, LM head and attention over
    its context, at peak), memory by m (one sequence's KV read and write, at full bandwidth) on top of the
    weights' w. So the step is compute-bound from B = ceil(w / (f - m)) on, and never when m >= f: at long
    contexts each sequence's KV takes longer to read than its token takes to compute, and more sequences only
    make the step longer. (`math.inf` rather than an error, so that a sweep over contexts can plot it.)

    Llama-3-8B on an H100: at 256 tokens f = 15.3 us, m = 10.1 us and w = 4.79 ms give 912; at 2048 tokens
    m = 80 us > f = 16.3 us, no ridge.

    >>> compute_ridge_batch(LLAMA3_8B, H100_SXM, 256), compute_ridge_batch(LLAMA3_8B, H100_SXM, 2048)
    (912, inf)
    """
    context_len = _count("context_len", context_len, least=0)
    one, two = _decode_cost(model, gpu, 1, context_len), _decode_cost(model, gpu, 2, context_len)
    f, m = one.compute_s, two.memory_s - one.memory_s
    w = one.memory_s - m
    if f <= m:
        return math.inf
    b = max(1, math.ceil(w / (f - m)))
    # the closed form in floating point can land one off: settle it on the cost model itself
    while b > 1 and _decode_cost(model, gpu, b - 1, context_len).bound == "compute":
        b -= 1
    while _decode_cost(model, gpu, b, context_len).bound != "compute":
        b += 1
    return b


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, default_max: int = 512) -> list[int]:
    """The decode batch sizes vLLM 0.33.0 captures as CUDA graphs by default (no speculative decoding, no sizes
    given, the default performance mode), as `VllmConfig._set_cudagraph_sizes` in vllm/config/vllm.py computes
    them: up to min(2 x max_num_seqs, `default_max`, max_num_batched_tokens), the sizes 1, 2, 4, then every 8th
    below 256, then every 16th from 256; max_num_batched_tokens and max_num_seqs themselves are added when they
    fit. `default_max` is 512, or 1024 on data-center Blackwell GPUs. A batch above the largest size runs eagerly.

    >>> sizes = cudagraph_capture_sizes(1024, 8192)            # vLLM's defaults on an H100 or H200
    >>> len(sizes), sizes[:5], sizes[-3:]
    (51, [1, 2, 4, 8, 16], [480, 496, 512])
    """
    max_num_seqs = _count("max_num_seqs", max_num_seqs)
    max_num_batched_tokens = _count("max_num_batched_tokens", max_num_batched_tokens)
    default_max = _count("default_max", default_max)
    ceiling = min(2 * max_num_seqs, default_max)
    top = min(max_num_batched_tokens, ceiling)
    sizes = {s for s in (1, 2, 4) if s <= top} | set(range(8, min(top + 1, 256), 8)) | set(range(256, top + 1, 16))
    if max_num_batched_tokens <= top:
        sizes.add(max_num_batched_tokens)
    if max_num_seqs <= ceiling and max_num_seqs <= max_num_batched_tokens:
        sizes.add(max_num_seqs)
    return sorted(sizes)


@dataclass(frozen=True)
class Ceilings:
    """The limits on running sequences at one context, by name; `binding` is the lowest (ties: the first).

    `cudagraph` is the largest decode batch captured as a CUDA graph. It is not a ceiling: a bigger batch still
    runs, eagerly, each kernel launched from Python, so its step pays the launches the graph saved. It is a
    step-time cliff at that batch, and `as_dict` leaves it out of the ceilings."""

    context_len: int
    max_num_seqs: int
    kv: int
    compute_ridge: int | float
    token_budget: int
    cudagraph: int

    def as_dict(self) -> dict[str, int | float]:
        return {"max_num_seqs": self.max_num_seqs, "KV cache": self.kv, "compute ridge": self.compute_ridge,
                "token budget": self.token_budget}

    @property
    def binding(self) -> str:
        items = self.as_dict()
        return min(items, key=lambda k: items[k])

    @property
    def value(self) -> int:
        return int(min(self.as_dict().values()))


def running_ceilings(model: ModelSpec, gpu: GPUSpec, context_len: int, max_num_seqs: int = 1024,
                     max_num_batched_tokens: int = 8192, cudagraph_max: int = 512,
                     memory_fraction: float = costmodel.GPU_MEMORY_UTILIZATION) -> Ceilings:
    """Every ceiling on the number of running sequences at `context_len` tokens each: the scheduler's cap, the KV
    cache, the compute ridge (past it, more sequences add no tokens per second) and the token budget (a decode is
    one token of it); beside them the largest CUDA-graph batch, where the step time jumps (see `Ceilings`). The
    defaults are vLLM 0.33.0's for an H100 or H200 behind its OpenAI server (`EngineArgs.get_batch_defaults`,
    vllm/engine/arg_utils.py).

    >>> c = running_ceilings(LLAMA3_8B, H100_SXM, 2048)
    >>> c.binding, c.value
    ('KV cache', 228)
    >>> c = running_ceilings(LLAMA3_8B, H100_SXM, 256)
    >>> c.binding, c.value, c.cudagraph
    ('compute ridge', 912, 512)
    """
    sizes = cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens, cudagraph_max)
    return Ceilings(context_len=context_len, max_num_seqs=max_num_seqs,
                    kv=kv_ceiling(model, gpu, context_len, memory_fraction),
                    compute_ridge=compute_ridge_batch(model, gpu, context_len),
                    token_budget=max_num_batched_tokens, cudagraph=sizes[-1])


# --------------------------------------------------------------------------------------------------
# Little's law with a step time that depends on the answer


def step_line(model: ModelSpec, gpu: GPUSpec, context_len: float,
              overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> tuple[float, float]:
    """(a, b) of a memory-bound decode step's time t(N) = a + b N for N sequences at `context_len` tokens of
    context: a is the weights' read plus the fixed overhead, b one sequence's KV read and its new token's KV
    write, per step. Exact while the step is memory-bound (N below `compute_ridge_batch`).

    Llama-3-8B on an H100 at 2048 tokens: a = 16.06 GB / 3.35 TB/s + 0.5 ms = 5.29 ms, b = 2049 x 128 KiB /
    3.35 TB/s = 80.2 us.

    >>> a, b = step_line(LLAMA3_8B, H100_SXM, 2048)
    >>> round(a * 1e3, 2), round(b * 1e6, 1)
    (5.29, 80.2)
    """
    context_len = _positive("context_len", context_len, allow_zero=True)
    overhead_s = _positive("overhead_s", overhead_s, allow_zero=True)
    a = model.weight_bytes / gpu.hbm_bandwidth + overhead_s
    b = (context_len + 1) * model.kv_bytes_per_token / gpu.hbm_bandwidth
    return a, b


def compute_line(model: ModelSpec, gpu: GPUSpec, context_len: float,
                 overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> tuple[float, float]:
    """(o, f) of a compute-bound decode step's time t(N) = o + f N for N sequences at `context_len` tokens: o is the
    fixed overhead, f one sequence's FLOPs at peak (its token through every matmul, one LM-head row, attention over
    its context and itself). A step takes the larger of this line and `step_line`'s.

    Llama-3-8B on an H100 at 2048 tokens: f = (2 x 6.98e9 + 2 x 128256 x 4096 + 4 x 32 x 32 x 128 x 2049) FLOPs /
    989 TFLOP/s = 16.3 us.

    >>> o, f = compute_line(LLAMA3_8B, H100_SXM, 2048)
    >>> round(o * 1e3, 2), round(f * 1e6, 1)
    (0.5, 16.3)
    """
    context_len = _positive("context_len", context_len, allow_zero=True)
    overhead_s = _positive("overhead_s", overhead_s, allow_zero=True)
    return overhead_s, _decode_cost(model, gpu, 1, context_len).compute_s


@dataclass(frozen=True)
class SteadyStateLimits:
    """The arrival rates (requests/s) at which a decode workload stops having a steady state, by cause; `first`
    names the smallest. The memory and compute walls are where the fixed point of Little's law diverges on each
    line (rate L b = 1, rate L f = 1); the cap and the KV ceiling are the rates whose fixed point reaches
    max_num_seqs sequences, or the sequences whose KV fills the cache: past them requests queue without bound."""

    max_num_seqs: float
    kv: float
    memory_wall: float
    compute_wall: float

    def as_dict(self) -> dict[str, float]:
        return {"max_num_seqs": self.max_num_seqs, "KV cache": self.kv, "memory wall": self.memory_wall,
                "compute wall": self.compute_wall}

    @property
    def first(self) -> str:
        items = self.as_dict()
        return min(items, key=lambda k: items[k])


def resident_at(rate: float, output_len: float, lines: tuple[tuple[float, float], ...]) -> float:
    """The fixed point N = rate L t(N) when the step time is the larger of several lines t(N) = c + d N (`step_line`,
    `compute_line`): the largest of each line's own fixed point (rate L c / (1 - rate L d)), `math.inf` past any
    line's wall."""
    return max(resident_sequences(rate, output_len, c, d) for c, d in lines)


def steady_state_limits(model: ModelSpec, gpu: GPUSpec, prompt_len: int, output_len: int,
                        max_num_seqs: int = 1024, overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> SteadyStateLimits:
    """Where the steady state of `resident_sequences` ends, with the step time max(a + b N, o + f N) at the workload's
    mean context: the rate at which the fixed point reaches `max_num_seqs`, the rate at which it fills the KV cache
    (N sequences at the mean context, `costmodel.kv_capacity_tokens`), the memory wall 1 / (L b) and the compute
    wall 1 / (L f). The smallest is where requests start to queue for ever.

    Chapter 9's workload, 64-token prompts and 512 output tokens on an H100: the memory line alone says 156
    requests/s, but the compute line is steeper (f > b at 319 tokens of context) and walls off at 127, the KV cache
    fills at 121, and the cap of 1,024 sequences is reached first, at 111.

    >>> lim = steady_state_limits(LLAMA3_8B, H100_SXM, 64, 512)
    >>> lim.first, round(lim.max_num_seqs), round(lim.kv), round(lim.compute_wall), round(lim.memory_wall)
    ('max_num_seqs', 111, 121, 127, 156)
    """
    context = mean_context(prompt_len, output_len)
    (a, b), (o, f) = step_line(model, gpu, context, overhead_s), compute_line(model, gpu, context, overhead_s)
    L = _positive("output_len", output_len)

    def rate_for(n: float) -> float:          # the rate whose fixed point is n residents: n = rate L t(n)
        return n / (L * max(a + b * n, o + f * n))

    kv_seqs = costmodel.kv_capacity_tokens(model, gpu) / context
    return SteadyStateLimits(max_num_seqs=rate_for(_count("max_num_seqs", max_num_seqs)), kv=rate_for(kv_seqs),
                             memory_wall=1 / (L * b), compute_wall=1 / (L * f))


def mean_context(prompt_len: int, output_len: int) -> float:
    """The context a resident sequence's step reads, on average over the `output_len` steps it runs: its first
    step prefills the prompt (writing `prompt_len` tokens of KV, reading none), the k-th after it reads
    prompt_len + k - 1 and writes one. Per step it moves prompt_len + (output_len - 1) / 2 tokens of KV, which
    `step_line` prices as this context plus the one token written.

    >>> mean_context(64, 513)
    319.0
    """
    prompt_len, output_len = _count("prompt_len", prompt_len), _count("output_len", output_len)
    return prompt_len + (output_len - 1) / 2 - 1


def resident_sequences(rate: float, output_len: float, a: float, b: float) -> float:
    """The steady-state number of running sequences: the fixed point of Little's law N = rate x L x t(N), where
    each request stays for L = `output_len` steps and a step of N sequences takes t(N) = a + b N seconds.

        N = rate L (a + b N)  =>  N = rate L a / (1 - rate L b)

    The naive answer takes the batch-1 step, rate L (a + b): too low, since every sequence admitted makes every
    step longer, which keeps every sequence resident longer. Once rate L b >= 1 there is no fixed point: each
    resident adds more than its own share of a step, the batch (and the queue behind it) grows without bound.
    That case returns `math.inf` (a sweep over rates can then plot up to the wall); bad parameters raise
    ValueError.

    Llama-3-8B on an H100, 50 requests a second of 512 output tokens at a mean context of 319 tokens:
    a = 5.29 ms, b = 12.5 us, rate L b = 0.32, so N = 135.5 / 0.68 = 199 (the naive 136 is a third too low).

    >>> a, b = step_line(LLAMA3_8B, H100_SXM, 319)
    >>> round(resident_sequences(50, 512, a, b), 1), resident_sequences(200, 512, a, b)
    (199.5, inf)
    """
    rate = _positive("rate", rate, allow_zero=True)
    output_len = _positive("output_len", output_len)
    a = _positive("a", a, allow_zero=True)
    b = _positive("b", b, allow_zero=True)
    load = rate * output_len * b
    if load >= 1:
        return math.inf
    return rate * output_len * a / (1 - load)


def time_weighted_running(result, t_from: float, t_to: float) -> float:
    """The mean number of running sequences over the steps of a simulator run (`SimResult`) that start in
    [t_from, t_to): each step's `step_seqs` weighted by its duration, idle time between them counting as zero.

    >>> from servelab.simulator import MixedBudget, Requests, simulate
    >>> res = simulate(Requests([0.0, 0.0], [8, 8], [3, 3]), MixedBudget(), LLAMA3_8B, H100_SXM)
    >>> time_weighted_running(res, 0.0, 1.0)
    2.0
    """
    t_from, t_to = float(t_from), float(t_to)
    if not t_to > t_from:
        raise ValueError(f"the window must have t_to > t_from, got [{t_from}, {t_to})")
    start, end = np.asarray(result.step_start_s), np.asarray(result.step_end_s)
    keep = (start >= t_from) & (start < t_to)
    if not keep.any():
        raise ValueError(f"no step starts in [{t_from}, {t_to}): the run covers {start[0]:.3f}..{end[-1]:.3f} s")
    span = end[keep].max() - start[keep].min()
    return float(np.sum(np.asarray(result.step_seqs)[keep] * (end[keep] - start[keep])) / span)


# --------------------------------------------------------------------------------------------------
# a fleet sized for throughput only


def _computed_of(prompt_len: int, cached_prefix: int) -> tuple[int, int]:
    """(cached_prefix, the prompt tokens computed): a prefix-cache hit must leave at least one token to compute."""
    cached_prefix = _count("cached_prefix", cached_prefix, least=0)
    if cached_prefix >= prompt_len:
        raise ValueError(f"cached_prefix ({cached_prefix}) must leave at least one prompt token to compute "
                         f"(prompt_len {prompt_len})")
    return cached_prefix, prompt_len - cached_prefix


def prefill_s_per_token(model: ModelSpec, gpu: GPUSpec, prompt_len: int, budget: int = 8192,
                        overhead_s: float = DEFAULT_STEP_OVERHEAD_S, cached_prefix: int = 0) -> float:
    """GPU-seconds per prompt token computed, prefilling prompts of `prompt_len` tokens in steps of `budget`
    tokens with nothing else in them: budget // prompt_len whole prompts a step, or, for a prompt longer than the
    budget, its chunks one a step, each on the prompt before it. `cached_prefix` tokens of every prompt are a
    prefix-cache hit: not computed, but attended to. Per token computed (prompt_len - cached_prefix of each).

    Llama-3-8B on an H100, 2000-token prompts, 8192-token steps: four prompts a step, 117.7 ms, 14.7 us a token.

    >>> round(prefill_s_per_token(LLAMA3_8B, H100_SXM, 2000) * 1e6, 2)
    14.71
    """
    prompt_len, budget = _count("prompt_len", prompt_len), _count("budget", budget)
    cached_prefix, todo = _computed_of(prompt_len, cached_prefix)
    if todo <= budget:
        k = budget // todo
        return costmodel.step_time(model, gpu, [todo] * k, prefill_context=cached_prefix,
                                   overhead_s=overhead_s) / (k * todo)
    total = sum(costmodel.step_time(model, gpu, min(budget, prompt_len - p), prefill_context=p, overhead_s=overhead_s)
                for p in range(cached_prefix, prompt_len, budget))
    return total / todo


def decode_s_per_token(model: ModelSpec, gpu: GPUSpec, batch: int, context_len: int,
                       overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> float:
    """GPU-seconds per output token in decode-only steps of `batch` sequences at `context_len` tokens each.

    >>> round(decode_s_per_token(LLAMA3_8B, H100_SXM, 256, 2050) * 1e6, 1)
    100.9
    """
    batch, context_len = _count("batch", batch), _count("context_len", context_len, least=0)
    return costmodel.step_time(model, gpu, decode_context_lens=[context_len] * batch, overhead_s=overhead_s) / batch


@dataclass(frozen=True)
class FleetPlan:
    """GPU-hours a day, split by phase, and the whole GPUs that provide them."""

    prefill_gpu_hours: float
    decode_gpu_hours: float
    input_tokens_per_day: float
    output_tokens_per_day: float

    @property
    def gpu_hours(self) -> float:
        return self.prefill_gpu_hours + self.decode_gpu_hours

    @property
    def gpus(self) -> int:
        # whole GPUs, each busy 24 hours a day (no headroom: a throughput-only fleet can run flat out)
        return math.ceil(self.gpu_hours / 24)

    @property
    def prefill_share(self) -> float:
        return self.prefill_gpu_hours / self.gpu_hours

    def usd_per_day(self, usd_per_gpu_hour: float) -> float:
        """What the whole GPUs cost a day."""
        return self.gpus * 24 * _positive("usd_per_gpu_hour", usd_per_gpu_hour)

    def usd_per_million_tokens(self, usd_per_gpu_hour: float) -> float:
        """The GPU-hours' cost (a fleet billed by the hour) per million tokens, input and output together."""
        return self.gpu_hours * _positive("usd_per_gpu_hour", usd_per_gpu_hour) / (
            (self.input_tokens_per_day + self.output_tokens_per_day) / 1e6)


def fleet_size(model: ModelSpec, gpu: GPUSpec, input_tokens_per_day: float, output_tokens_per_day: float,
               prompt_len: int, batch: int, budget: int = 8192, overhead_s: float = DEFAULT_STEP_OVERHEAD_S,
               cached_prefix: int = 0) -> FleetPlan:
    """The GPUs a throughput-only workload needs, from the roofline: every input token prefilled in full
    `budget`-token steps (`prefill_s_per_token`), every output token decoded at `batch` sequences a step
    (`decode_s_per_token`) at the requests' mean context, prompt_len + output_len / 2 (rounded), where
    output_len = output_tokens_per_day / (input_tokens_per_day / prompt_len) is the output per request.
    The two phases are priced apart (no latency target couples them); the first output token of each request
    is priced as a decode (it comes out of the prefill step: an overestimate of one token in output_len).
    The batch is taken as given: keep it within kv_ceiling(model, gpu, prompt_len + output_len), or the
    sequences it assumes do not fit.

    10 billion input and 0.5 billion output tokens a day, 2000-token prompts (so 100 output tokens each),
    Llama-3-8B on H100s, batch 203 at 2050 tokens, 8192-token steps:
    40.9 GPU-hours of prefill, 14.8 of decode, 3 GPUs; prefill is 73% of the bill.

    >>> plan = fleet_size(LLAMA3_8B, H100_SXM, 10e9, 0.5e9, prompt_len=2000, batch=203)
    >>> round(plan.prefill_gpu_hours, 1), round(plan.decode_gpu_hours, 1), plan.gpus, round(plan.prefill_share, 2)
    (40.9, 14.8, 3, 0.73)
    """
    input_tokens_per_day = _positive("input_tokens_per_day", input_tokens_per_day)
    output_tokens_per_day = _positive("output_tokens_per_day", output_tokens_per_day)
    prompt_len = _count("prompt_len", prompt_len)
    output_len = output_tokens_per_day * prompt_len / input_tokens_per_day
    context = round(prompt_len + output_len / 2)
    per_token = prefill_s_per_token(model, gpu, prompt_len, budget, overhead_s, cached_prefix)
    prefill = input_tokens_per_day * (prompt_len - cached_prefix) / prompt_len * per_token
    decode = output_tokens_per_day * decode_s_per_token(model, gpu, batch, context, overhead_s)
    return FleetPlan(prefill / 3600, decode / 3600, input_tokens_per_day, output_tokens_per_day)


@dataclass(frozen=True)
class MixedStep:
    """One decode step of `mixed_fleet_size`: its cost, the prompt tokens it carries and those the day supplies
    per step (the rest, supplied - carried, is prefilled in steps of its own)."""

    cost: costmodel.StepCost
    decode_flops: float
    carried: float
    supplied: float


def mixed_step(model: ModelSpec, gpu: GPUSpec, input_tokens_per_day: float, output_tokens_per_day: float,
               prompt_len: int, batch: int, budget: int = 8192, cached_prefix: int = 0) -> MixedStep:
    """The decode step `mixed_fleet_size` prices: `batch` decodes at the mean context and the prompt tokens the
    day's ratio supplies per step, batch x input/output (prompt_len - cached_prefix computed per prompt), up to
    the budget. A prompt's attention pairs and cached prefix are spread over its tokens (a chunk's reads of its
    own prompt's earlier chunks are left out: KV reads, free in a compute-bound step).

    >>> m = mixed_step(LLAMA3_8B, H100_SXM, 10e9, 0.5e9, prompt_len=2000, batch=203)
    >>> m.cost.bound, round(m.carried), round(m.supplied)
    ('compute', 4060, 4060)
    """
    input_tokens_per_day = _positive("input_tokens_per_day", input_tokens_per_day)
    output_tokens_per_day = _positive("output_tokens_per_day", output_tokens_per_day)
    prompt_len, batch, budget = _count("prompt_len", prompt_len), _count("batch", batch), _count("budget", budget)
    cached_prefix, todo = _computed_of(prompt_len, cached_prefix)
    if batch >= budget:
        raise ValueError(f"a budget of {budget} tokens leaves no room for prompt tokens beside {batch} decodes")
    context = round(prompt_len + output_tokens_per_day * prompt_len / input_tokens_per_day / 2)
    supplied = batch * input_tokens_per_day / output_tokens_per_day * todo / prompt_len
    carried = min(supplied, budget - batch)
    pairs_per_token = (todo * cached_prefix + todo * (todo + 1) / 2) / todo
    cost = costmodel.cost_from_totals(model, gpu, num_tokens=batch + carried, num_seqs=batch + carried / todo,
                                      attention_pairs=batch * (context + 1) + carried * pairs_per_token,
                                      kv_read_tokens=batch * context + carried * cached_prefix / todo)
    return MixedStep(cost, _decode_cost(model, gpu, batch, context).flops, carried, supplied)


def mixed_fleet_size(model: ModelSpec, gpu: GPUSpec, input_tokens_per_day: float, output_tokens_per_day: float,
                     prompt_len: int, batch: int, budget: int = 8192, overhead_s: float = DEFAULT_STEP_OVERHEAD_S,
                     cached_prefix: int = 0) -> FleetPlan:
    """`fleet_size` for an engine that mixes the phases, as vLLM's does: every decode step of `batch` sequences
    (at the mean context, as in `fleet_size`) also carries the prompt tokens the day's ratio supplies, up to the
    `budget` (`mixed_step`); what does not fit is prefilled in steps of its own (`prefill_s_per_token`). Decode's
    weight and KV reads then overlap the prompts' matmuls: when the mixed step is compute-bound, decoding costs
    only its FLOPs. The plan splits each mixed step between the phases by their shares of its FLOPs.

    The docstring workload of `fleet_size`, batch 203: 4,263-token steps, compute-bound, 43.3 GPU-hours a day in
    all (55.6 priced apart), 2 GPUs instead of 3.

    >>> plan = mixed_fleet_size(LLAMA3_8B, H100_SXM, 10e9, 0.5e9, prompt_len=2000, batch=203)
    >>> round(plan.gpu_hours, 1), plan.gpus, round(plan.prefill_share, 2)
    (43.3, 2, 0.95)
    """
    step = mixed_step(model, gpu, input_tokens_per_day, output_tokens_per_day, prompt_len, batch, budget,
                      cached_prefix)
    steps = output_tokens_per_day / batch
    mixed = steps * step.cost.seconds(overhead_s)
    decode = mixed * step.decode_flops / step.cost.flops
    rest = 0.0
    if step.supplied > step.carried:
        rest = (step.supplied - step.carried) * steps * prefill_s_per_token(model, gpu, prompt_len, budget,
                                                                          overhead_s, cached_prefix)
    return FleetPlan((mixed - decode + rest) / 3600, decode / 3600, input_tokens_per_day, output_tokens_per_day)


def prefill_share_ratio(share: float, prefill_s: float, decode_s: float) -> float:
    """The input:output token ratio r at which prefill is `share` of the GPU time, when a prompt token costs
    `prefill_s` and an output token `decode_s` GPU-seconds: share = r p / (r p + d), so
    r = share / (1 - share) x d / p. Prefill is three quarters of the bill at r = 3 d / p.

    >>> prefill_share_ratio(0.75, prefill_s=15e-6, decode_s=100e-6)
    20.0
    """
    if not 0 < share < 1:
        raise ValueError(f"share must be in (0, 1), got {share!r}")
    prefill_s, decode_s = _positive("prefill_s", prefill_s), _positive("decode_s", decode_s)
    return share / (1 - share) * decode_s / prefill_s


# --------------------------------------------------------------------------------------------------
# the token budget as a point on the roofline


def budget_knee(model: ModelSpec, gpu: GPUSpec, num_decodes: int, context_len: int) -> int:
    """The smallest token budget at which a mixed step, `num_decodes` decodes at `context_len` tokens of
    context plus one prefill chunk (no cached prefix) filling the rest, is compute-bound: num_decodes + the
    fewest chunk tokens c for which compute time >= memory time. Below it the step is memory-bound and more
    budget is nearly free (the weights and the decodes' KV are read anyway); above it every token adds its
    FLOPs to the step time. If the decodes alone are compute-bound the knee is num_decodes.

    Each chunk token adds 14 us of compute on an H100 (2 x 7.0 G matmul FLOPs at 989 TFLOP/s) and 39 ns of KV
    write, so c grows until the compute catches up with the weights' 4.8 ms and the decodes' KV reads.

    >>> budget_knee(LLAMA3_8B, H100_SXM, 0, 0), budget_knee(LLAMA3_8B, H100_SXM, 64, 2048)
    (339, 688)
    """
    num_decodes = _count("num_decodes", num_decodes, least=0)
    context_len = _count("context_len", context_len, least=0)
    contexts = [context_len] * num_decodes

    def compute_bound(c: int) -> bool:
        return costmodel.step_cost(model, gpu, prefill_tokens=c, decode_context_lens=contexts).bound == "compute"

    if num_decodes and compute_bound(0):
        return num_decodes
    lo, hi = 0, 1               # not compute_bound(lo); find hi that is, then bisect
    while not compute_bound(hi):
        lo, hi = hi, 2 * hi
        if hi > 1 << 40:
            raise ValueError("no chunk makes this step compute-bound")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if compute_bound(mid) else (mid, hi)
    return num_decodes + hi


def slo_budget(model: ModelSpec, gpu: GPUSpec, tbt_target_s: float, num_decodes: int, context_len: int,
               prefill_context: int = 0) -> int:
    """The largest token budget whose mixed step (`num_decodes` decodes at `context_len` plus one chunk on top of
    `prefill_context` cached tokens of its prompt) takes at most `tbt_target_s`: under stall-free batching every
    decode's gap between tokens is the step, so a TBT target caps the budget (num_decodes if no chunk fits).
    The knee is where the budget stops buying throughput; this is where it starts costing the target.

    >>> slo_budget(LLAMA3_8B, H100_SXM, 0.030, 32, 1024)
    2012
    """
    num_decodes = _count("num_decodes", num_decodes, least=0)
    context_len = _count("context_len", context_len, least=0)
    return num_decodes + costmodel.max_prefill_chunk(model, gpu, tbt_target_s, [context_len] * num_decodes,
                                                     prefill_context=prefill_context)
