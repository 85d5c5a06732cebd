"""The serving model: whether one step of an engine can run, and how long it takes.

`check` takes one `ServingPoint` (the model, the GPU and their dtypes, the engine's settings and the batch it runs)
and checks KV capacity, context, the caps (`max_num_seqs`, `max_num_batched_tokens`) and the step's time on the
roofline, all together; a number a learner states must also describe a step that fits on the GPU. A point may
spread the model over GPUs (`tp`, `pp`): the step then adds its all-reduces and stage-to-stage sends. What each
check counts, and the dtypes: docs/analytic.md. A point that breaks a limit raises `Infeasible`, whose message names
each limit broken with both numbers:

>>> from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B
>>> try:
...     check(ServingPoint.decode(LLAMA3_8B, H100_SXM, batch=320, context=2000))
... except Infeasible as e:
...     print(e.limits, e)
('kv',) the batch needs 640,320 KV tokens; an H100 SXM holds 468,102 at 92% of its memory
>>> ok = check(ServingPoint.decode(LLAMA3_8B, H100_SXM, batch=200, context=2000))
>>> ok.bound, round(ok.step_s * 1e3, 2), ok.kv_tokens, ok.kv_capacity
('memory', 20.95, 400200, 468102)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from servelab.analytic import costmodel
from servelab.analytic.costmodel import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    DEFAULT_STEP_OVERHEAD_S,
    GPU_MEMORY_UTILIZATION,
    GPUSpec,
    ModelSpec,
)
from servelab.analytic.specs import DEFAULT_LINK_LATENCY_S, NVLINK_H100, LinkSpec

__all__ = ["DTYPE_BYTES", "WEIGHT_DTYPE_BYTES", "Feasible", "Infeasible", "ServingPoint", "all_reduce_s", "check",
           "priced"]

# Bytes per element of the KV cache, and per weight. int4 is W4A16 (AWQ, GPTQ): 4-bit weights widened to 16 bits
# inside the matmul, so the tensor cores run at their bf16 rate; the per-group scales are left out here.
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
WEIGHT_DTYPE_BYTES = {**DTYPE_BYTES, "int4": 0.5}
ACTIVATION_BYTES = 2     # what the all-reduces and the stage-to-stage sends carry: bf16 activations


class Infeasible(ValueError):
    """A serving point that cannot run. `limits` names each limit it breaks ("kv", "context", "max_num_seqs",
    "token_budget"), or "weights" alone when the weights leave no room for any KV; the message states each with the
    number needed and the number allowed."""

    def __init__(self, limits: tuple[str, ...], message: str):
        super().__init__(message)
        self.limits = limits


@dataclass(frozen=True)
class ServingPoint:
    """One step of an engine: what runs it and what it runs.

    The batch is `decode_contexts` (each decoding sequence's tokens already in the KV cache; it computes one new
    token, or 1 + `draft_tokens` when it verifies drafts) and `prefill_chunks` (each chunk's tokens) over
    `prefill_prefix` (each chunk's tokens already cached; one int for all). `resident_tokens` is KV held by
    sequences not in this step (a chunked prompt waiting for its next chunk, a preempted one kept in the cache).

    `tp` GPUs split every layer (tensor parallelism: each holds `model.shard(tp)`, and two all-reduces per layer
    join their halves of the activations over `link`); `pp` groups of them each hold a run of the layers (pipeline
    stages, handing the activations on over `link`). A step is the batch's pass through every stage.
    """

    model: ModelSpec
    gpu: GPUSpec
    decode_contexts: tuple[int, ...] = ()
    prefill_chunks: tuple[int, ...] = ()
    prefill_prefix: tuple[int, ...] | int = 0
    draft_tokens: int = 0
    resident_tokens: int = 0
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    overhead_s: float = DEFAULT_STEP_OVERHEAD_S
    tp: int = 1
    pp: int = 1
    link: LinkSpec = NVLINK_H100
    link_latency_s: float = DEFAULT_LINK_LATENCY_S

    def __post_init__(self):
        for name, table in (("weight_dtype", WEIGHT_DTYPE_BYTES), ("kv_dtype", DTYPE_BYTES)):
            if getattr(self, name) not in table:
                raise ValueError(f"{name} must be one of {sorted(table)}, got {getattr(self, name)!r}")
        for name in ("tp", "pp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1 (GPUs), got {value!r}")
        if self.model.num_layers % self.pp:
            raise ValueError(f"pp={self.pp} stages do not split {self.model.name}'s {self.model.num_layers} layers "
                             f"evenly")
        self.model.shard(self.tp)      # raises if the model does not split tp ways
        if not self.link_latency_s >= 0:
            raise ValueError(f"link_latency_s must be >= 0, got {self.link_latency_s!r}")
        object.__setattr__(self, "decode_contexts", tuple(int(x) for x in self.decode_contexts))
        object.__setattr__(self, "prefill_chunks", tuple(int(x) for x in self.prefill_chunks))
        prefix = self.prefill_prefix
        prefix = (int(prefix),) * len(self.prefill_chunks) if isinstance(prefix, int) else tuple(int(x) for x in prefix)
        if len(prefix) != len(self.prefill_chunks):
            raise ValueError(f"prefill_prefix has {len(prefix)} entries but prefill_chunks has "
                             f"{len(self.prefill_chunks)}: give one cached length per chunk, or one int for all")
        object.__setattr__(self, "prefill_prefix", prefix)
        counts = [*self.decode_contexts, *self.prefill_chunks, *prefix, self.draft_tokens, self.resident_tokens]
        if any(x < 0 for x in counts):
            raise ValueError("token counts must be >= 0")
        if not self.decode_contexts and not any(self.prefill_chunks):
            raise ValueError("a step must compute at least one token: give decode_contexts or prefill_chunks")

    @classmethod
    def decode(cls, model: ModelSpec, gpu: GPUSpec, batch: int, context: int, **settings) -> ServingPoint:
        """`batch` sequences decoding at `context` tokens each."""
        return cls(model, gpu, decode_contexts=(context,) * batch, **settings)

    @property
    def priced_model(self) -> ModelSpec:
        """One GPU's part of the model (`shard(tp)`) with the point's weight and KV dtypes."""
        return priced(self.model, self.gpu, self.weight_dtype, self.kv_dtype)[0].shard(self.tp)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def priced_gpu(self) -> GPUSpec:
        """The GPU at the rate its tensor cores run the weights' dtype (fp8: twice bf16's)."""
        return priced(self.model, self.gpu, self.weight_dtype, self.kv_dtype)[1]


def priced(model: ModelSpec, gpu: GPUSpec, weight_dtype: str = "bf16", kv_dtype: str = "bf16"
           ) -> tuple[ModelSpec, GPUSpec]:
    """(model, gpu) as the cost model prices them with these dtypes: bytes per parameter from WEIGHT_DTYPE_BYTES and
    per KV element from DTYPE_BYTES, and fp8 weights (W8A8) at twice the tensor cores' bf16 rate. Names are kept.

    >>> from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B
    >>> m, g = priced(LLAMA3_8B, H100_SXM, weight_dtype="fp8")
    >>> m.bytes_per_param, m.bytes_per_kv_element, g.peak_flops / H100_SXM.peak_flops
    (1, 2, 2.0)
    """
    for name, dtype, table in (("weight_dtype", weight_dtype, WEIGHT_DTYPE_BYTES), ("kv_dtype", kv_dtype, DTYPE_BYTES)):
        if dtype not in table:
            raise ValueError(f"{name} must be one of {sorted(table)}, got {dtype!r}")
    model = dataclasses.replace(model, bytes_per_param=WEIGHT_DTYPE_BYTES[weight_dtype],
                                bytes_per_kv_element=DTYPE_BYTES[kv_dtype])
    scale = 2 if weight_dtype == "fp8" else 1
    return model, dataclasses.replace(gpu, peak_flops=gpu.peak_flops * scale)


@dataclass(frozen=True)
class Feasible:
    """A point that runs: its step time, which roof sets it, and each limit with its use."""

    step_s: float
    compute_s: float
    memory_s: float
    kv_tokens: int
    kv_capacity: int
    num_seqs: int
    num_tokens: int
    max_context: int
    comm_s: float = 0.0
    stages: int = 1

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"

    @property
    def stage_s(self) -> float:
        """One stage's share of the step: with `stages` batches in flight, the pipeline finishes a batch this often."""
        return self.step_s / self.stages


def all_reduce_s(nbytes: float, gpus: int, link: LinkSpec = NVLINK_H100,
                 latency_s: float = DEFAULT_LINK_LATENCY_S) -> float:
    """A ring all-reduce of `nbytes` over `gpus` GPUs: a reduce-scatter and an all-gather of gpus - 1 steps each, every
    step sending 1/gpus of the data one way over `link` and paying `latency_s`, so 2(p-1)/p x nbytes / bandwidth +
    2(p-1) x latency (Megatron-LM's tensor parallelism runs two a layer in the forward pass: after attention and
    after the MLP). One GPU: nothing to reduce.

    >>> round(all_reduce_s(8 * 4096 * 2, 8) * 1e6, 2)    # 8 tokens of a 4096-wide bf16 activation, TP8, NVLink 4
    28.25
    """
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"gpus must be an integer >= 1, got {gpus!r}")
    if not nbytes >= 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
    if gpus == 1:
        return 0.0
    return 2 * (gpus - 1) / gpus * nbytes / link.bandwidth + 2 * (gpus - 1) * latency_s


def check(point: ServingPoint) -> Feasible:
    """Whether `point` can run, and its step; raises `Infeasible` naming every limit it breaks."""
    model, gpu = point.priced_model, point.priced_gpu
    per_decode = 1 + point.draft_tokens
    decodes, chunks, prefix = point.decode_contexts, point.prefill_chunks, point.prefill_prefix
    num_seqs = len(decodes) + sum(1 for c in chunks if c)
    num_tokens = per_decode * len(decodes) + sum(chunks)
    contexts = [L + per_decode for L in decodes] + [p + c for p, c in zip(prefix, chunks) if c]
    kv_tokens = sum(contexts) + point.resident_tokens
    if not 0 < point.gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {point.gpu_memory_utilization!r}")
    try:
        kv_capacity = costmodel.kv_capacity_tokens(model, point.gpu, point.gpu_memory_utilization,
                                                   point.max_num_batched_tokens, point.max_num_seqs, point.pp)
    except ValueError as e:       # the weights alone fill the GPU: no batch runs, whatever its size
        raise Infeasible(("weights",), f"{e}: spread the model over more GPUs (tp, pp) or store it in fewer "
                                       f"bits") from None
    broken: list[tuple[str, str]] = []
    if kv_tokens > kv_capacity:
        where, whose = ((f"an {point.gpu.name} holds", "its") if point.gpus == 1 else
                        (f"{point.gpus} {point.gpu.name} GPUs (TP{point.tp} x PP{point.pp}) hold", "their"))
        broken.append(("kv", f"the batch needs {kv_tokens:,} KV tokens; {where} {kv_capacity:,} "
                             f"at {point.gpu_memory_utilization:.0%} of {whose} memory"))
    limit = model.max_position_embeddings
    if limit is not None and max(contexts) > limit:
        broken.append(("context", f"a sequence needs a context of {max(contexts):,} tokens; {model.name} takes at "
                                  f"most {limit:,}"))
    if num_seqs > point.max_num_seqs:
        broken.append(("max_num_seqs", f"the step runs {num_seqs:,} sequences; max_num_seqs is "
                                       f"{point.max_num_seqs:,}"))
    if num_tokens > point.max_num_batched_tokens:
        broken.append(("token_budget", f"the step computes {num_tokens:,} tokens; the token budget "
                                       f"(max_num_batched_tokens) is {point.max_num_batched_tokens:,}"))
    if broken:
        raise Infeasible(tuple(name for name, _ in broken), "; and ".join(text for _, text in broken))
    # attention (query, key) pairs: a run of n new tokens over p cached ones sees n*p + n*(n+1)/2 keys
    pairs = sum(per_decode * L + per_decode * (per_decode + 1) // 2 for L in decodes)
    pairs += sum(c * p + c * (c + 1) // 2 for p, c in zip(prefix, chunks))
    logit_rows = per_decode * len(decodes) + sum(1 for c in chunks if c)
    cost = costmodel.cost_from_totals(model, gpu, num_tokens=num_tokens, num_seqs=logit_rows,
                                      attention_pairs=pairs,
                                      kv_read_tokens=sum(decodes) + sum(p for p, c in zip(prefix, chunks) if c))
    activations = num_tokens * point.model.hidden_size * ACTIVATION_BYTES
    comm_s = 2 * point.model.num_layers * all_reduce_s(activations, point.tp, point.link, point.link_latency_s)
    if point.pp > 1:     # each stage hands the activations to the next
        comm_s += (point.pp - 1) * (activations / point.link.bandwidth + point.link_latency_s)
    return Feasible(step_s=max(cost.compute_s, cost.memory_s) + comm_s + point.overhead_s, compute_s=cost.compute_s,
                    memory_s=cost.memory_s, kv_tokens=kv_tokens, kv_capacity=kv_capacity, num_seqs=num_seqs,
                    num_tokens=num_tokens, max_context=max(contexts), comm_s=comm_s, stages=point.pp)
