"""Tenants and priority classes in the step loop: a token-fair scheduler and a priority policy with a KV quota.

Both build `MixedBudget`'s step and differ in who gets the budget left after the decodes and who is admitted:
`TokenFair(tenant, weights)` grants it to the backlogged tenant with the smallest virtual token counter;
`Priority(priority, batch_kv_quota)` admits by (class, arrival), caps the KV of the classes above 0 and preempts
with vLLM 0.33.0's victim key. The rules, and where vLLM differs: docs/simulator.md.

>>> from servelab.analytic.costmodel import LLAMA3_8B, H100_SXM
>>> from servelab.analytic.fairness import token_weights
>>> from servelab.simulator import Requests, simulate
>>> reqs = Requests([0.0] * 8, [4000, 300] * 4, [50, 50] * 4)
>>> w = token_weights(LLAMA3_8B, H100_SXM, 2000, 64, 2000)
>>> res = simulate(reqs, TokenFair([0, 1] * 4, w, max_num_batched_tokens=1024), LLAMA3_8B, H100_SXM)
>>> bool(res.ttft[1::2].max() < res.ttft[0::2].min())     # the short prompts' tenant is not stuck behind
True
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from servelab.analytic.costmodel import GPUSpec, ModelSpec, cost_from_totals
from servelab.analytic.fairness import ContextWeights, TokenWeights, VirtualTokenCounter
from servelab.simulator.policies import _check_limits, _with_admitted
from servelab.simulator.state import ServingState

__all__ = ["Priority", "TokenFair", "measured_service", "tenant_service"]


def _decode_all(state: ServingState, victim) -> tuple[np.ndarray, np.ndarray]:
    """Give every running sequence that is decoding its KV slot, preempting `victim(state)` while short. Returns
    (running, tokens to compute left for each) with the decode slots reserved."""
    while True:
        running = state.running
        decoding = running[state.reserved[running] < state.seq_len[running]]
        if state.kv_free >= decoding.size:
            break
        state.preempt(victim(state))
    state.reserved[decoding] += 1
    state.kv_free -= decoding.size
    return running, state.seq_len[running] - state.computed[running]


@dataclass
class TokenFair:
    """Token-fair sharing between tenants: the backlogged tenant with the smallest virtual counter gets the next
    `quantum` tokens of the step's leftover budget (docs/simulator.md). `counters` holds the counters after
    the run; `served_s[t]` the GPU-seconds tenant t was charged."""

    tenant: np.ndarray
    weights: TokenWeights | ContextWeights
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    quantum: int = 256
    lift: bool = True
    name: str = field(default="token-fair", compare=False)

    def __post_init__(self):
        _check_limits("TokenFair", self.max_num_batched_tokens, self.max_num_seqs)
        if not isinstance(self.quantum, int) or self.quantum < 1:
            raise ValueError(f"TokenFair: quantum must be an integer >= 1 (tokens), got {self.quantum!r}")
        self.tenant = np.asarray(self.tenant).ravel()
        self._vtc = VirtualTokenCounter(self.weights)
        self._backlogged: set = set()

    @property
    def counters(self) -> dict:
        return dict(self._vtc.counters)

    def schedule(self, state: ServingState) -> tuple[np.ndarray, np.ndarray]:
        running, remaining = _decode_all(state, lambda s: int(s.running[-1]))
        tenant, vtc = self.tenant, self._vtc
        waiting = np.fromiter(state.waiting, dtype=np.int64, count=len(state.waiting))
        waiting_of = {int(t): list(waiting[tenant[waiting] == t]) for t in np.unique(tenant[waiting])}
        backlogged = {int(t) for t in tenant[running]} | set(waiting_of)
        for t in sorted(backlogged - self._backlogged):   # work again after none: no credit for the idle time
            if self.lift:
                vtc.activate(t, backlogged & self._backlogged)
            else:
                vtc.counters.setdefault(t, 0.0)
        self._backlogged = backlogged
        for i in running[remaining == 1]:
            vtc.charge(int(tenant[i]), decode_tokens=1, context=int(state.computed[i]))

        tokens = np.minimum(remaining, 1)
        budget = self.max_num_batched_tokens - running.size
        cap = min(self.max_num_seqs, self.max_num_batched_tokens)
        # prompt work per tenant, oldest first: [tokens still to compute, position in running or -1 if new]
        work: dict[int, list] = {}
        for j in (remaining > 1).nonzero()[0]:
            work.setdefault(int(tenant[running[j]]), []).append([int(remaining[j]) - 1, int(j)])
        new_ids, new_tokens, blocked = [], [], set()
        while budget > 0:
            cands = {t for t, w in work.items() if w}
            if not state.preempted_this_step:    # as MixedBudget: no admission right after a preemption
                cands |= {t for t, ids in waiting_of.items() if ids} - blocked
            if not cands:
                break
            t = vtc.pick(cands)
            if not work.get(t):                            # admit the tenant's oldest waiting request
                i = int(waiting_of[t][0])
                if running.size + len(new_ids) >= cap or not state.can_admit(i):
                    blocked.add(t)
                    continue
                waiting_of[t].pop(0)
                state.waiting.remove(i)
                state.admit(i)
                new_ids.append(i)
                new_tokens.append(0)
                work.setdefault(t, []).append([int(state.seq_len[i] - state.computed[i]), -1 - (len(new_ids) - 1)])
            item = work[t][0]
            n = min(item[0], budget, self.quantum)
            if item[1] >= 0:                     # the chunk goes on after what this step computes already
                context = int(state.computed[running[item[1]]]) + int(tokens[item[1]])
                tokens[item[1]] += n
            else:
                context = int(state.computed[new_ids[-1 - item[1]]]) + new_tokens[-1 - item[1]]
                new_tokens[-1 - item[1]] += n
            item[0] -= n
            budget -= n
            vtc.charge(t, prefill_tokens=n, context=context)
            if item[0] == 0:
                work[t].pop(0)
        return _with_admitted(state, running, tokens, new_ids, new_tokens)


@dataclass
class Priority:
    """Priority classes with a KV quota for the lower ones (docs/simulator.md). `priority[i]` is request
    i's class (0 interactive); `batch_kv_quota` caps the KV tokens that all classes above 0 hold together, checked
    when one is admitted (each then grows by a slot a decode: size the quota at the sequences' final length, as
    `servelab.analytic.fairness.batch_kv_quota` does with `batch_context`)."""

    priority: np.ndarray
    batch_kv_quota: int | None = None
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    preempt_for_interactive: bool = True
    name: str = field(default="priority", compare=False)

    def __post_init__(self):
        _check_limits("Priority", self.max_num_batched_tokens, self.max_num_seqs)
        if self.batch_kv_quota is not None and (not isinstance(self.batch_kv_quota, int | np.integer)
                                                or self.batch_kv_quota < 0):
            raise ValueError(f"Priority: batch_kv_quota must be None or an integer >= 0 (KV tokens), "
                             f"got {self.batch_kv_quota!r}")
        self.priority = np.asarray(self.priority).ravel()

    def _victim(self, state: ServingState, below: int = -1) -> int | None:
        """The running sequence of the largest class value, the latest arrival among equals (vLLM's key);
        only among classes > `below`. None when there is none."""
        running = state.running
        running = running[self.priority[running] > below]
        if not running.size:
            return None
        return int(max(running.tolist(), key=lambda i: (int(self.priority[i]), i)))

    def _batch_held(self, state: ServingState) -> int:
        r = state.running
        return int(state.reserved[r[self.priority[r] > 0]].sum())

    def schedule(self, state: ServingState) -> tuple[np.ndarray, np.ndarray]:
        prio = self.priority
        order = sorted(state.waiting, key=lambda i: (int(prio[i]), i))
        # 0. an interactive request at the head that does not fit takes KV from the lower classes first
        if self.preempt_for_interactive and order and prio[order[0]] == 0:
            head = order[0]
            while not state.kv_free >= state.seq_len[head] + state.running.size:
                victim = self._victim(state, below=0)
                if victim is None:
                    break
                state.preempt(victim)
            order = sorted(state.waiting, key=lambda i: (int(prio[i]), i))
        running, remaining = _decode_all(state, self._victim)
        tokens = np.minimum(remaining, 1)
        budget = self.max_num_batched_tokens - running.size
        for j in (remaining > 1).nonzero()[0]:                     # part-prefilled prompts, in admission order
            if budget <= 0:
                break
            n = min(int(remaining[j]), budget + 1)
            tokens[j] = n
            budget -= n - 1
        new_ids, new_tokens = [], []
        cap = min(self.max_num_seqs, self.max_num_batched_tokens)
        held = self._batch_held(state)
        interactive_only = state.preempted_this_step                # a preemption made room for class 0 only
        for i in order:
            if budget <= 0 or running.size + len(new_ids) >= cap:
                break
            if prio[i] > 0:
                if interactive_only:
                    break
                if self.batch_kv_quota is not None and held + state.seq_len[i] > self.batch_kv_quota:
                    break                                           # the batch class is at its quota
            if not state.can_admit(i):
                break
            state.waiting.remove(i)
            state.admit(i)
            if prio[i] > 0:
                held += int(state.seq_len[i])
            n = min(int(state.seq_len[i] - state.computed[i]), budget)
            budget -= n
            new_ids.append(i)
            new_tokens.append(n)
        return _with_admitted(state, running, tokens, new_ids, new_tokens)


def tenant_service(steps: list, tenant, weights: TokenWeights) -> np.ndarray:
    """GPU-seconds each tenant was served up to the end of each step, from a `Traced` policy's `steps` (lists of
    (request id, tokens)): row k, column t is tenant t's total after step k. An entry of one token is priced as a
    decode, a longer one as that many prompt tokens.

    >>> tenant_service([[(0, 100), (1, 1)], [(1, 1)]], [0, 1], TokenWeights(1.0, 8.0)).tolist()
    [[100.0, 8.0], [100.0, 16.0]]
    """
    tenant = np.asarray(tenant).ravel()
    out = np.zeros((len(steps), int(tenant.max()) + 1 if tenant.size else 0))
    for k, step in enumerate(steps):
        for i, n in step:
            out[k, tenant[i]] += weights.decode_s if n == 1 else weights.prefill_s * n
    return np.cumsum(out, axis=0)


def measured_service(steps: list, contexts: list, durations, tenant, model: ModelSpec, gpu: GPUSpec) -> np.ndarray:
    """GPU-seconds each tenant used up to the end of each step, measured without any token prices: each step's
    duration is split among its sequences by their shares of the step's binding resource on the roofline, FLOPs
    when the step is compute-bound, bytes when it is memory-bound (the weights' read split by tokens computed).
    `steps` and `contexts` are a `Traced` policy's (each sequence's tokens and its context before the step),
    `durations` the result's `step_duration_s`. Row k, column t: tenant t's total after step k.

    >>> from servelab.analytic.costmodel import LLAMA3_8B, H100_SXM
    >>> got = measured_service([[(0, 1), (1, 1)]], [[8000, 1000]], [0.01], [0, 1], LLAMA3_8B, H100_SXM)
    >>> round(float(got[0, 0] / got[0].sum()), 2)    # the weights split evenly; 8x the context, more KV read
    0.53
    """
    tenant = np.asarray(tenant).ravel()
    out = np.zeros((len(steps), int(tenant.max()) + 1 if tenant.size else 0))
    m = model
    for k, (step, ctx, d) in enumerate(zip(steps, contexts, np.asarray(durations, dtype=float), strict=True)):
        ids = np.array([i for i, _ in step], dtype=np.int64)
        n = np.array([t for _, t in step], dtype=float)
        c = np.asarray(ctx, dtype=float)
        pairs = n * c + n * (n + 1) / 2
        each = cost_from_totals(m, gpu, n, np.ones_like(n), pairs, c)      # per sequence, elementwise
        nbytes = m.weight_bytes * n / n.sum() + each.kv_read_bytes + each.kv_write_bytes
        total = cost_from_totals(m, gpu, int(n.sum()), len(ids), int(pairs.sum()), int(c.sum()))
        share = each.flops / each.flops.sum() if total.bound == "compute" else nbytes / nbytes.sum()
        np.add.at(out[k], tenant[ids], d * share)
    return np.cumsum(out, axis=0)
