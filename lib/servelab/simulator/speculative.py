"""Speculative decoding in the simulator: draft tokens in the budget, look-ahead KV, acceptance, rollback.

`simulate(..., speculation=Speculation(k, alpha, draft=None, seed=0))` turns every decode of a step into a
verification of d <= k drafts, which emits the a drafts accepted in a row and the target's bonus token. Drafts
take what is left of `max_num_batched_tokens` and one KV slot each, are accepted with probability `alpha`, and
the rejected ones roll back; a draft model (`draft`) adds its decode steps to the step's price. Step by step:
docs/simulator.md.

>>> from servelab.analytic.costmodel import LLAMA3_8B, H100_SXM
>>> from servelab.simulator import MixedBudget, Requests, simulate
>>> reqs = Requests([0.0] * 4, [64] * 4, [33] * 4)
>>> res = simulate(reqs, MixedBudget(), LLAMA3_8B, H100_SXM, speculation=Speculation(4, 1.0))
>>> res.speculation.verify_steps, res.speculation.tokens_per_verify   # 32 tokens after the prefill's: 5+5+..+2
(28, 4.571428571428571)
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np

from servelab._moved import moved_names
from servelab.analytic import costmodel
from servelab.analytic.costmodel import ModelSpec

__all__ = ["SpecRun", "SpecStats", "Speculation"]


@dataclass(frozen=True)
class Speculation:
    """k draft tokens per decoding sequence and step, each accepted with probability alpha given the ones
    before it; `draft` the draft model (None: prompt lookup, no cost); `seed` the acceptance draws'."""

    k: int
    alpha: float
    draft: ModelSpec | None = None
    seed: int = 0

    def __post_init__(self):
        if isinstance(self.k, bool) or not isinstance(self.k, numbers.Integral) or self.k < 1:
            raise ValueError(f"Speculation: k (draft tokens per step) must be an integer >= 1, got {self.k!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, numbers.Real) or not 0 <= self.alpha <= 1:
            raise ValueError(f"Speculation: alpha (the chance a draft is accepted) must be a number in [0, 1], "
                             f"got {self.alpha!r}")
        if self.draft is not None and not isinstance(self.draft, ModelSpec):
            raise ValueError(f"Speculation: draft must be a costmodel.ModelSpec or None, got {self.draft!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral):
            raise ValueError(f"Speculation: seed must be an integer, got {self.seed!r}")


@dataclass
class SpecStats:
    """A run's speculation counters (`SimResult.speculation`)."""

    verify_steps: int = 0        # (sequence, step) pairs that verified at least one draft
    draft_tokens: int = 0        # drafts computed (in the budget, with a KV slot)
    accepted_tokens: int = 0     # drafts accepted and emitted
    released_slots: int = 0      # look-ahead slots given back by rollbacks (= rejected drafts)
    cut_drafts: int = 0          # drafts wanted (k, or fewer near output_len) but cut for budget or KV
    draft_s: float = 0.0         # seconds of the draft model's steps, inside the steps' durations
    # counts[d, e]: verifications that computed d drafts and emitted e tokens (1 + accepted, so e <= d + 1)
    counts: np.ndarray = field(default=None, repr=False)

    def tokens_per_verify_at(self, drafts: int) -> float:
        """Mean tokens emitted by the verifications that computed exactly `drafts` drafts."""
        row = self.counts[drafts]
        return float(np.dot(row, np.arange(row.size)) / row.sum()) if row.sum() else float("nan")

    @property
    def tokens_per_verify(self) -> float:
        """Tokens emitted per verification (accepted drafts + the bonus), to set against
        speculation.expected_tokens_per_step(alpha, k)."""
        return (self.accepted_tokens + self.verify_steps) / self.verify_steps if self.verify_steps else float("nan")

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else float("nan")


class SpecRun:
    """One simulation's speculation: adds the drafts to a scheduled step, prices the draft model, verifies."""

    def __init__(self, spec: Speculation, budget: int, gpu, overhead_s: float):
        self.spec, self.budget, self.gpu, self.overhead_s = spec, int(budget), gpu, overhead_s
        self.rng = np.random.default_rng(spec.seed)
        self.stats = SpecStats(counts=np.zeros((spec.k + 1, spec.k + 2), dtype=np.int64))
        self.drafts = np.zeros(0, dtype=np.int64)   # this step's drafts, aligned with its ids

    def add_drafts(self, state, ids: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Give the step's decoding sequences their drafts from the budget left and the free KV; reserve a
        look-ahead slot per draft. Returns the step's tokens with the drafts added."""
        computed, seq_len = state.computed[ids], state.seq_len[ids]
        decoding = (tokens == 1) & (computed == seq_len - 1) & (seq_len > state.prompt_len[ids])
        want = np.where(decoding, np.minimum(self.spec.k, state.prompt_len[ids] + state.output_len[ids]
                                             - seq_len - 1), 0)
        left = min(self.budget - int(tokens.sum()), state.kv_free)
        # in running order: the first sequences keep theirs, as the token budget is handed out
        drafts = np.minimum(want, np.maximum(0, left - np.concatenate([[0], np.cumsum(want)[:-1]])))
        self.drafts = drafts
        total = int(drafts.sum())
        state.reserved[ids] += drafts
        state.kv_free -= total
        self.stats.cut_drafts += int(want.sum()) - total
        self.stats.draft_tokens += total
        return tokens + drafts

    def draft_seconds(self, context: np.ndarray) -> float:
        """The draft model's max(d) decode steps over the speculating sequences (0 for prompt lookup)."""
        if self.spec.draft is None or not self.drafts.any():
            return 0.0
        ctx = context[self.drafts > 0]
        one = costmodel.cost_from_totals(self.spec.draft, self.gpu, ctx.size, ctx.size,
                                         int(ctx.sum()) + ctx.size, int(ctx.sum())).seconds(self.overhead_s)
        seconds = int(self.drafts.max()) * one
        self.stats.draft_s += seconds
        return seconds

    def verify(self, state, ids: np.ndarray, new_computed: np.ndarray, token_step: np.ndarray,
               token_slot_base: np.ndarray, step: int) -> np.ndarray:
        """Accept each sequence's drafts in a row with probability alpha, emit the accepted ones, roll back past
        them (computed and reserved slots down by the rejected); returns the computed counts after the step.
        The loop then emits the bonus token as any decode's."""
        drafts = self.drafts
        spec = drafts > 0
        if not spec.any():
            return new_computed
        d = drafts[spec]
        ok = self.rng.random((d.size, int(d.max()))) < self.spec.alpha
        ok &= np.arange(ok.shape[1]) < d[:, None]
        accepted = np.cumprod(ok, axis=1).sum(axis=1)
        rejected = d - accepted
        sid = ids[spec]
        total = int(accepted.sum())
        if total:                                              # the accepted drafts are tokens now
            first = np.repeat(token_slot_base[sid] + state.seq_len[sid], accepted)
            offset = np.arange(total) - np.repeat(np.cumsum(accepted) - accepted, accepted)
            token_step[first + offset] = step
        state.seq_len[sid] += accepted
        new_computed = new_computed.copy()
        new_computed[spec] -= rejected                         # rollback: the rejected drafts' KV is past it
        state.reserved[sid] -= rejected
        state.kv_free += int(rejected.sum())
        st = self.stats
        st.verify_steps += int(sid.size)
        st.accepted_tokens += int(accepted.sum())
        st.released_slots += int(rejected.sum())
        np.add.at(st.counts, (d, accepted + 1), 1)
        return new_computed


def budget_of(policy) -> int:
    """The token budget a policy builds its steps under (through `Traced`)."""
    inner = getattr(policy, "policy", policy)
    from servelab.simulator.v1 import V1
    if isinstance(inner, V1):
        raise ValueError("speculation runs with PrefillFirst or MixedBudget; V1 allocates its KV in blocks "
                         "inside vllm_scheduler, which has no look-ahead slots here")
    budget = getattr(inner, "max_num_batched_tokens", None)
    if budget is None:
        raise ValueError(f"speculation needs a policy with max_num_batched_tokens, got {policy!r}")
    return budget


# simulated_speedup lived here before it moved above the loop it runs (it imported the loop, which imports this)
__getattr__ = moved_names(__name__)
