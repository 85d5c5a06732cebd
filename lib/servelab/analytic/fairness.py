"""Fairness between tenants and priority classes: what a token costs, a counter that shares the GPU by it, and the
KV a background class may hold.

Request-fair scheduling (every tenant's requests served in turn) shares requests, not the GPU: a tenant whose
requests are long documents gets the GPU time its documents take. Sharing the GPU needs a price per token, and the
roofline gives one: a prompt token costs its share of a compute-bound prefill step, an output token its share of a
memory-bound decode step (`token_weights`). A **virtual token counter** per tenant adds up the weighted tokens the
tenant was served; each step the scheduler serves the backlogged tenant with the smallest counter. One rule keeps
a tenant from banking credit while it sends nothing: when it comes back, its counter is **lifted** to the smallest
counter among the tenants that stayed backlogged (`VirtualTokenCounter.activate`), so idle time earns nothing.

A priority flag orders the queue, but a background (batch) class that is already running still reads its KV in
every decode step, slowing every interactive token. `batch_kv_quota` puts a number on the KV the batch class may
hold so that a step with all the interactive decodes still meets the interactive TPOT target.

>>> w = token_weights(LLAMA3_8B, H100_SXM, prompt_len=2000, batch=128, context_len=2000)
>>> round(w.prefill_s * 1e6, 1), round(w.decode_s * 1e6, 1), round(w.decode_s / w.prefill_s, 1)
(14.7, 119.7, 8.1)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servelab.analytic import capacity, costmodel
from servelab.analytic.costmodel import DEFAULT_STEP_OVERHEAD_S, H100_SXM, LLAMA3_8B, GPUSpec, ModelSpec  # noqa: F401 - examples

__all__ = ["ContextWeights", "TokenWeights", "VirtualTokenCounter", "batch_kv_quota", "document_len_for_share",
           "interactive_tpot", "next_tenant", "request_fair_shares", "token_weights"]


@dataclass(frozen=True)
class TokenWeights:
    """GPU-seconds per prompt token and per output token: the prices a token-fair scheduler charges."""

    prefill_s: float
    decode_s: float

    def cost(self, prefill_tokens: float, decode_tokens: float, context: float = 0) -> float:
        """Flat prices: the same at any `context`."""
        return self.prefill_s * prefill_tokens + self.decode_s * decode_tokens


@dataclass(frozen=True)
class ContextWeights:
    """Prices at a token's context, from the roofline (`cost(prefill_tokens, decode_tokens, context)`): a chunk of
    n prompt tokens on `context` cached ones costs its FLOPs at peak (matmuls, and attention over the prefix and
    causally within the chunk) plus its share of a `budget`-token step's overhead; an output token at `context`
    costs its share of a decode step of `batch` sequences (the weights' read and the overhead over the batch) plus
    the read of its own context's KV. At the flat prices' context (2,000) the two agree; an output token of a
    57,560-token document costs 14 times the flat price.

    >>> w = ContextWeights(LLAMA3_8B, H100_SXM, batch=64)
    >>> [round(x * 1e6, 1) for x in (w.cost(0, 1, 2000), w.cost(0, 1, 57560), w.cost(2000, 0, 0) / 2000)]
    [161.0, 2334.9, 14.7]
    """

    model: ModelSpec
    gpu: GPUSpec
    batch: int = 64
    budget: int = 8192
    overhead_s: float = DEFAULT_STEP_OVERHEAD_S

    def cost(self, prefill_tokens: float, decode_tokens: float, context: float = 0) -> float:
        m, n = self.model, prefill_tokens
        # the chunk's matmuls and attention at peak (no LM-head row: num_seqs 0)
        chunk = costmodel.cost_from_totals(m, self.gpu, num_tokens=n, num_seqs=0,
                                           attention_pairs=n * context + n * (n + 1) / 2, kv_read_tokens=context)
        prefill = chunk.compute_s + self.overhead_s * n / self.budget
        decode = decode_tokens * ((m.weight_bytes / self.batch + m.kv_bytes_per_token * (context + 1))
                                  / self.gpu.hbm_bandwidth + self.overhead_s / self.batch)
        return prefill + decode


def token_weights(model: ModelSpec, gpu: GPUSpec, prompt_len: int, batch: int, context_len: int,
                  budget: int = 8192, overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> TokenWeights:
    """The roofline's price of each kind of token: a prompt token's share of a full prefill step of `budget`
    tokens, an output token's share of a decode step of `batch` sequences at `context_len`
    (servelab.analytic.capacity)."""
    return TokenWeights(capacity.prefill_s_per_token(model, gpu, prompt_len, budget, overhead_s),
                        capacity.decode_s_per_token(model, gpu, batch, context_len, overhead_s))


def request_fair_shares(requests: dict[str, tuple[float, float]], weights: TokenWeights) -> dict[str, float]:
    """Each tenant's share of GPU time when requests are served fairly, one per tenant in turn: tenant ->
    (prompt tokens, output tokens) of its typical request. The shares are the requests' costs, normalised.

    >>> w = TokenWeights(prefill_s=15e-6, decode_s=120e-6)
    >>> {t: round(s, 3) for t, s in request_fair_shares({"docs": (30_000, 200), "chat": (300, 200)}, w).items()}
    {'docs': 0.943, 'chat': 0.057}
    """
    if not requests:
        raise ValueError("no tenants")
    cost = {t: weights.cost(p, d) for t, (p, d) in requests.items()}
    if any(c < 0 for c in cost.values()) or sum(cost.values()) == 0:
        raise ValueError(f"every request must cost something: {requests}")
    total = sum(cost.values())
    return {t: c / total for t, c in cost.items()}


@dataclass
class VirtualTokenCounter:
    """Per-tenant counters of weighted tokens served; the next tenant served is the backlogged one with the least.

    >>> vtc = VirtualTokenCounter(TokenWeights(prefill_s=1.0, decode_s=8.0))
    >>> vtc.activate("A", backlogged=set()); vtc.activate("B", backlogged={"A"})
    >>> vtc.charge("A", prefill_tokens=100, decode_tokens=5); vtc.pick({"A", "B"})
    'B'
    >>> vtc.charge("B", prefill_tokens=30, decode_tokens=5)
    >>> vtc.counters                 # C comes back after idling: lifted to the least backlogged counter, 70
    {'A': 140.0, 'B': 70.0}
    >>> vtc.activate("C", backlogged={"A", "B"}); vtc.counters["C"]
    70.0
    """

    weights: TokenWeights | ContextWeights
    counters: dict[str, float] = field(default_factory=dict)

    def activate(self, tenant: str, backlogged: set[str]) -> None:
        """`tenant` has work again after having none: lift its counter to the smallest among the tenants that stayed
        backlogged, so that the time it sent nothing is not credit it can spend now (the lift rule)."""
        others = [self.counters.get(t, 0.0) for t in backlogged if t != tenant]
        mine = self.counters.get(tenant, 0.0)
        self.counters[tenant] = max(mine, min(others)) if others else mine

    def charge(self, tenant: str, prefill_tokens: float = 0, decode_tokens: float = 0, context: float = 0) -> None:
        """What a step served for `tenant`, priced by the weights at `context` (flat weights ignore it)."""
        if prefill_tokens < 0 or decode_tokens < 0:
            raise ValueError(f"token counts are >= 0, got {prefill_tokens}, {decode_tokens}")
        self.counters[tenant] = self.counters.get(tenant, 0.0) + self.weights.cost(prefill_tokens, decode_tokens,
                                                                                   context)

    def pick(self, backlogged: set[str]) -> str:
        """The backlogged tenant with the smallest counter (ties: the first name in sorted order)."""
        if not backlogged:
            raise ValueError("no backlogged tenant to pick")
        return min(sorted(backlogged), key=lambda t: self.counters.get(t, 0.0))


def batch_kv_quota(model: ModelSpec, gpu: GPUSpec, tpot_target_s: float, interactive_decodes: int,
                   interactive_context: int, batch_context: int,
                   overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> int:
    """Tokens of KV the batch class may hold, as whole sequences of `batch_context` tokens: the fewer of two counts,
    the batch sequences whose decode step beside every interactive sequence (`interactive_decodes` at
    `interactive_context`) still takes at most `tpot_target_s`, and the batch sequences the KV cache
    (`costmodel.kv_capacity_tokens`) still holds next to the interactive sequences' KV. 0 when the interactive
    decodes alone miss the target or fill the cache.

    A 30 ms target beside 64 chats at 2K leaves time for 62 sequences of 8,000 tokens, but the cache only has
    468,102 - 128,000 tokens left, 42 of them:

    >>> batch_kv_quota(LLAMA3_8B, H100_SXM, 0.030, 64, 2000, 8000)
    336000
    """
    if not tpot_target_s > 0:
        raise ValueError(f"tpot_target_s must be > 0, got {tpot_target_s!r}")
    interactive = [interactive_context] * interactive_decodes

    def fits(n: int) -> bool:
        lens = interactive + [batch_context] * n
        if not lens:
            return True
        return costmodel.step_time(model, gpu, decode_context_lens=lens, overhead_s=overhead_s) <= tpot_target_s

    if not fits(0):
        return 0
    hi = 1
    while fits(hi):
        hi *= 2
    lo = hi // 2                       # fits(lo) holds, fits(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    left = costmodel.kv_capacity_tokens(model, gpu) - interactive_decodes * interactive_context
    return min(lo, max(0, left) // batch_context) * batch_context


def interactive_tpot(model: ModelSpec, gpu: GPUSpec, interactive_decodes: int, interactive_context: int,
                     batch_decodes: int, batch_context: int, overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> float:
    """Seconds between two tokens of an interactive sequence when a decode step holds `interactive_decodes`
    interactive sequences at `interactive_context` tokens and `batch_decodes` batch-class ones at `batch_context`:
    every sequence in the step waits for the whole step, and the step reads the KV of all of them.

    >>> round(interactive_tpot(LLAMA3_8B, H100_SXM, 64, 2000, 0, 0) * 1e3, 2)      # the chats alone
    10.3
    >>> round(interactive_tpot(LLAMA3_8B, H100_SXM, 64, 2000, 20, 16000) * 1e3, 2) # 20 documents beside them
    22.83
    """
    for name, v in (("interactive_decodes", interactive_decodes), ("batch_decodes", batch_decodes),
                    ("interactive_context", interactive_context), ("batch_context", batch_context)):
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v!r}")
    lens = [interactive_context] * interactive_decodes + [batch_context] * batch_decodes
    return costmodel.step_time(model, gpu, decode_context_lens=lens, overhead_s=overhead_s)


def document_len_for_share(share: float, chat: tuple[float, float], doc_output: float,
                           weights: TokenWeights) -> float:
    """The prompt length of the document tenant's request that gives it `share` of the GPU when requests are
    served one per tenant in turn beside a chat tenant's (`chat` = (prompt, output) tokens): its request must
    cost share / (1 - share) times the chat's, and what its output does not cost, its prompt does.

    >>> round(document_len_for_share(0.96, (300, 200), 200, TokenWeights(15e-6, 120e-6)))
    44000
    """
    if not 0 < share < 1:
        raise ValueError(f"share must be in (0, 1), got {share!r}")
    need = share / (1 - share) * weights.cost(*chat) - weights.decode_s * doc_output
    return max(need, 0.0) / weights.prefill_s


def next_tenant(counters: dict[str, float], served: dict[str, tuple[float, float]], weights: TokenWeights,
                backlogged: set[str], returning: set[str]) -> tuple[str, dict[str, float]]:
    """One step of the fair scheduler on plain counters: charge what the step `served` ({tenant: (prompt tokens,
    output tokens)}) at `weights`, lift each tenant in `returning` (backlogged again after having no work) to the
    smallest counter among the others that stayed backlogged, then pick the backlogged tenant with the smallest
    counter (ties: the first name). Returns (that tenant, the new counters); `counters` is not changed.

    >>> w = TokenWeights(prefill_s=1.0, decode_s=8.0)
    >>> next_tenant({"A": 100.0, "B": 90.0, "C": 5.0}, {"B": (20, 1)}, w, {"A", "B", "C"}, {"C"})
    ('A', {'A': 100.0, 'B': 118.0, 'C': 100.0})
    """
    vtc = VirtualTokenCounter(weights, dict(counters))
    for t, (p, d) in served.items():
        vtc.charge(t, p, d)
    stayed = set(backlogged) - set(returning)
    for t in sorted(returning):
        vtc.activate(t, stayed)
    return vtc.pick(set(backlogged)), vtc.counters
