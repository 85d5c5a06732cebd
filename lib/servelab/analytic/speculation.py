"""What speculation buys, from the roofline: tokens a verification step appends, its time and a draft model's,
the speedup over plain decoding, and the batch at which it stops paying (the scheduler that runs it is
servelab.schedulers.spec_decode; the simulator measures the same in servelab.simulator.speedup)."""

from __future__ import annotations

from servelab.analytic import costmodel, serving
from servelab.analytic.costmodel import DEFAULT_STEP_OVERHEAD_S, GPUSpec, ModelSpec

__all__ = ["DRAFT_1B", "crossover_batch", "draft_time", "expected_tokens_per_step", "fits", "speculative_speedup",
           "verify_step_time"]


# a draft model of 1B-parameter shape (16 layers, hidden 2048, GQA 32 / 8 heads of 64, tied embeddings): the
# drafting cost in the examples and the chapter's cases (about an eighth of Llama-3-8B's bytes a step)
DRAFT_1B = ModelSpec("draft-1B", num_layers=16, hidden_size=2048, num_heads=32, num_kv_heads=8, head_dim=64,
                     intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True)

def _check_rate(alpha) -> float:
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 <= alpha <= 1:
        raise ValueError(f"alpha (the chance a draft is accepted) must be a number in [0, 1], got {alpha!r}")
    return float(alpha)


def _check_count(name: str, value, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
    return value


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Tokens one verification step appends, on average, when each draft is accepted with probability alpha
    given the ones before it were: 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha); the last term is
    the bonus token's (it always comes). k + 1 at alpha = 1.

    >>> round(expected_tokens_per_step(0.8, 4), 4), expected_tokens_per_step(0.0, 4), expected_tokens_per_step(1.0, 4)
    (3.3616, 1.0, 5.0)
    """
    alpha, k = _check_rate(alpha), _check_count("k", k, 0)
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def verify_step_time(model: ModelSpec, gpu: GPUSpec, batch: int, context_len: int, k: int,
                     overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> float:
    """Seconds for one verification step: `batch` sequences each computing a chunk of k + 1 tokens (the last
    token and k drafts) on a cached context of `context_len`; at k = 0 it is the plain decode step. Verifying
    needs the target's logits at all k + 1 positions (the token each draft is checked against, and the bonus), so
    the LM head runs over (k + 1) x batch rows, not one a sequence as for a prefill chunk. The same as
    costmodel.step_time(prefill_tokens=[k + 1] * batch, prefill_context=context_len, logit_rows=(k + 1) * batch),
    from its four totals.

    >>> from servelab.analytic.costmodel import LLAMA3_8B, H100_SXM, step_time
    >>> verify_step_time(LLAMA3_8B, H100_SXM, 8, 512, 3) == step_time(LLAMA3_8B, H100_SXM, [4] * 8, (), 512,
    ...                                                                 logit_rows=32)
    True
    """
    batch, k = _check_count("batch", batch, 1), _check_count("k", k, 0)
    context_len = _check_count("context_len", context_len, 0)
    chunk = k + 1
    pairs = batch * (chunk * context_len + chunk * (chunk + 1) // 2)
    cost = costmodel.cost_from_totals(model, gpu, batch * chunk, batch * chunk, pairs, batch * context_len)
    return cost.seconds(costmodel._check_overhead(overhead_s))


def draft_time(draft: ModelSpec | None, gpu: GPUSpec, batch: int, context_len: int, k: int,
               overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> float:
    """Seconds to propose k drafts for the batch: k decode steps of the draft model (with its own KV), or
    nothing for prompt-lookup drafting (`draft=None`)."""
    if draft is None or k == 0:
        return 0.0
    return k * verify_step_time(draft, gpu, batch, context_len, 0, overhead_s)


def speculative_speedup(model: ModelSpec, gpu: GPUSpec, batch: int, context_len: int, k: int, alpha: float,
                        draft: ModelSpec | None = None, overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> float:
    """Tokens per second with speculation over tokens per second without, for a batch decoding at
    `context_len`: expected_tokens_per_step(alpha, k) tokens per (drafting + verify step) against one token per
    plain decode step. Above 1 speculation pays. The verify step's k + 1 tokens per sequence turn a memory-bound
    step compute-bound k + 1 times sooner, which is where it stops paying.

    >>> from servelab.analytic.costmodel import LLAMA3_8B, H100_SXM
    >>> round(speculative_speedup(LLAMA3_8B, H100_SXM, 1, 1024, 4, 0.8), 2)    # batch 1: E tokens for one step
    3.36
    """
    alpha = _check_rate(alpha)
    plain = verify_step_time(model, gpu, batch, context_len, 0, overhead_s)
    spec = verify_step_time(model, gpu, batch, context_len, k, overhead_s) + \
        draft_time(draft, gpu, batch, context_len, k, overhead_s)
    return expected_tokens_per_step(alpha, k) * plain / spec


def crossover_batch(model: ModelSpec, gpu: GPUSpec, context_len: int, k: int, alpha: float,
                    draft: ModelSpec | None = None, overhead_s: float = DEFAULT_STEP_OVERHEAD_S,
                    max_batch: int = 4096) -> int | None:
    """The smallest batch at which speculation stops paying (speedup <= 1), or None up to `max_batch`. At long
    contexts there may be none: every sequence's KV is read by the plain step and the verify step alike, so
    both stay memory-bound together. The roofline alone does not ask whether the batch fits: `fits` does.

    >>> from servelab.analytic.costmodel import LLAMA3_8B, H100_SXM
    >>> crossover_batch(LLAMA3_8B, H100_SXM, 256, 4, 0.7), crossover_batch(LLAMA3_8B, H100_SXM, 1024, 4, 0.7)
    (292, None)
    """
    _check_count("max_batch", max_batch, 1)
    for batch in range(1, max_batch + 1):
        if speculative_speedup(model, gpu, batch, context_len, k, alpha, draft, overhead_s) <= 1:
            return batch
    return None


def fits(model: ModelSpec, gpu: GPUSpec, batch: int, context_len: int, k: int, **settings) -> bool:
    """Whether a verification step of `batch` sequences holding `context_len` tokens, k drafts each, can run at all:
    servelab.analytic.serving.check (the KV cache after the weights, max_num_seqs, the token budget; `settings` as
    ServingPoint's). The target model's KV only: a draft model's weights and KV would take more.

    >>> from servelab.analytic.costmodel import LLAMA3_8B, H100_SXM
    >>> fits(LLAMA3_8B, H100_SXM, 512, 512, 4), fits(LLAMA3_8B, H100_SXM, 512, 1024, 4)
    (True, False)
    """
    point = serving.ServingPoint.decode(model, gpu, _check_count("batch", batch, 1), context_len, draft_tokens=k,
                                        **settings)
    try:
        serving.check(point)
    except serving.Infeasible:
        return False
    return True
