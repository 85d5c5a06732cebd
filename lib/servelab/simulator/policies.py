"""The scheduling policies: what one step holds (`PrefillFirst`, `MixedBudget`), and `Traced` to record it."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from servelab.simulator.arrivals import _is_int
from servelab.simulator.state import ServingState


class Policy(Protocol):
    """What a scheduler must provide: a name and, once per step, the sequences to run and how many tokens
    each computes (int arrays or lists, same length). It may admit and preempt through the state."""

    name: str

    def schedule(self, state: ServingState) -> tuple[np.ndarray, np.ndarray]: ...


def _check_limits(owner: str, max_num_batched_tokens, max_num_seqs):
    if not _is_int(max_num_batched_tokens) or max_num_batched_tokens < 1:
        raise ValueError(f"{owner}: max_num_batched_tokens (the token budget) must be an integer >= 1, "
                         f"got {max_num_batched_tokens!r}")
    if not _is_int(max_num_seqs) or max_num_seqs < 1:
        raise ValueError(f"{owner}: max_num_seqs must be an integer >= 1, got {max_num_seqs!r}")


@dataclass(frozen=True)
class PrefillFirst:
    """nano-vllm's policy: a step is all prefill whenever some prefill fits, else all decode.

    Prefill: FCFS from the head of `waiting`, while KV can be reserved and fewer than `max_num_seqs` are
    scheduled; only the first sequence of a step may be cut to the remaining budget, and a cut sequence
    stays at the head to finish first next step. Decode: the first `max_num_seqs` running sequences, one
    token each (nano-vllm caps sequences per step, not running sequences). Defaults are nano-vllm's.
    """

    max_num_batched_tokens: int = 16384
    max_num_seqs: int = 512
    name: str = field(default="prefill-first", compare=False)

    def __post_init__(self):
        _check_limits("PrefillFirst", self.max_num_batched_tokens, self.max_num_seqs)

    def schedule(self, state: ServingState) -> tuple[np.ndarray, np.ndarray]:
        ids, tokens, batched = [], [], 0
        waiting = state.waiting
        while waiting and len(ids) < self.max_num_seqs:
            i = waiting[0]
            remaining = self.max_num_batched_tokens - batched
            if remaining == 0:
                break
            fresh = state.reserved[i] == 0
            if fresh and not state.can_admit(i):
                break                                   # head-of-line: never skip ahead
            need = int(state.seq_len[i] - state.computed[i])
            if remaining < need and ids:
                break                                   # only the first prefill of a step is chunked
            if fresh:
                state.admit(i)
            n = min(need, remaining)
            batched += n
            ids.append(i)
            tokens.append(n)
            if n == need:                               # prompt done this step: it decodes from now on
                waiting.popleft()
                state.running = np.append(state.running, i)
        if ids:
            return np.array(ids, dtype=np.int64), np.array(tokens, dtype=np.int64)

        # every running sequence is between decodes here, so each needs exactly one more slot
        ids = state.reserve_decode_slots(self.max_num_seqs)
        return ids, np.ones(ids.size, dtype=np.int64)


_PREFILL_ORDERS = ("fcfs", "shortest_first")


@dataclass(frozen=True)
class MixedBudget:
    """The budgeted mixed step, decodes first (Sarathi-Serve's stall-free batching; vLLM V1's own step is `V1`).

    1. Every running sequence that is decoding gets its one token (KV slots reserved, preempting from
       the tail if short).
    2. Running sequences part-way through their prompt get chunks, in admission order, from what is left
       of `max_num_batched_tokens`.
    3. If budget is still left and nobody was preempted this step, new sequences are admitted FCFS and
       take chunks too.

    Admission stops at min(max_num_seqs, max_num_batched_tokens) running sequences, so the decodes alone
    always fit in the budget: every running sequence advances every step, and a step never computes more
    than `max_num_batched_tokens` tokens.

    `prefill_order="shortest_first"` changes steps 2 and 3 only: the prompts still to prefill (running
    part-prefilled ones and waiting ones alike) take the leftover budget in order of the prompt tokens
    they still need, fewest first (ties: lower request id), instead of first come first served. The
    prompt length is known on arrival, so this is shortest-remaining-work-first on the half of a
    request's work that is known; decodes, whose length is not known, still all run every step. A
    waiting request that cannot be admitted (KV, running cap) stops admission, as under FCFS.

    `aging_rate` (tokens a second, shortest_first only) ages that order: a prompt's key becomes the tokens it
    still needs minus aging_rate x the seconds since it arrived (`servelab.analytic.ordering.aged_priority`), so
    a long prompt behind a steady stream of short ones is served within about its length / aging_rate seconds
    instead of never. 0 (the default) is plain shortest-first.
    """

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    prefill_order: str = "fcfs"
    aging_rate: float = 0.0
    name: str = field(default="mixed-budget", compare=False)

    def __post_init__(self):
        _check_limits("MixedBudget", self.max_num_batched_tokens, self.max_num_seqs)
        if self.prefill_order not in _PREFILL_ORDERS:
            raise ValueError(f"MixedBudget: prefill_order must be one of {_PREFILL_ORDERS}, got {self.prefill_order!r}")
        a = self.aging_rate
        if isinstance(a, bool) or not isinstance(a, numbers.Real) or not 0 <= a < math.inf:
            raise ValueError(f"MixedBudget: aging_rate must be a finite number >= 0 (tokens a second), got {a!r}")
        if a and self.prefill_order != "shortest_first":
            raise ValueError("MixedBudget: aging_rate ages the shortest_first order; with prefill_order='fcfs' "
                             "every request is served in arrival order already")

    def schedule(self, state: ServingState) -> tuple[np.ndarray, np.ndarray]:
        # 1. decodes: the running sequences whose last sampled token has no KV slot yet
        while True:
            running = state.running
            seq_len = state.seq_len[running]
            decoding = running[state.reserved[running] < seq_len]
            if state.kv_free >= decoding.size:
                break
            state.preempt_tail()
        state.reserved[decoding] += 1
        state.kv_free -= decoding.size

        # every running sequence has >= 1 token to compute: decodes exactly 1, part-prefilled ones more.
        # Count one token for each (they all fit, by the running cap below) and share the rest.
        remaining = seq_len - state.computed[running]
        tokens = np.minimum(remaining, 1)               # all ones: nobody in `running` is done
        budget = self.max_num_batched_tokens - running.size
        if self.prefill_order == "shortest_first":
            return self._shortest_first(state, running, remaining, tokens, budget)

        # 2. part-prefilled sequences share what is left, in admission order
        if budget > 0 and running.size:
            for j in (remaining > 1).nonzero()[0]:      # at most a couple: each admission uses up the budget
                n = min(int(remaining[j]), budget + 1)  # its 1 token is already counted
                tokens[j] = n
                budget -= n - 1
                if budget == 0:
                    break

        # 3. admissions, FCFS, while budget, KV and the running cap allow; not right after a preemption,
        # which would only bring back the sequence just evicted
        new_ids, new_tokens = [], []
        cap = min(self.max_num_seqs, self.max_num_batched_tokens)
        if not state.preempted_this_step:
            waiting = state.waiting
            while waiting and budget > 0 and running.size + len(new_ids) < cap and state.can_admit(waiting[0]):
                i = waiting.popleft()
                state.admit(i)
                n = min(int(state.seq_len[i] - state.computed[i]), budget)   # computed > 0 only if swapped in
                budget -= n
                new_ids.append(i)
                new_tokens.append(n)
        return _with_admitted(state, running, tokens, new_ids, new_tokens)

    def _shortest_first(self, state, running, remaining, tokens, budget):
        # candidates: (key, request id, position in running or -1 if waiting, prompt tokens still to compute);
        # the key is those tokens, less aging_rate x the seconds waited when aging is on
        cands = [(int(remaining[j]), int(running[j]), j) for j in (remaining > 1).nonzero()[0]]
        if not state.preempted_this_step:
            cands += [(int(state.seq_len[i] - state.computed[i]), int(i), -1) for i in state.waiting]
        if self.aging_rate:
            rate, now, arrival = self.aging_rate, state.now, state.arrival_s
            cands = [(need - rate * (now - arrival[i]), i, j, need) for need, i, j in cands]
        else:
            cands = [(need, i, j, need) for need, i, j in cands]
        cands.sort()
        new_ids, new_tokens = [], []
        cap = min(self.max_num_seqs, self.max_num_batched_tokens)
        admitting = True
        for _, i, j, need in cands:
            if budget == 0:
                break
            if j >= 0:                                   # running, part-prefilled: its 1 token is counted
                n = min(need, budget + 1)
                tokens[j] = n
                budget -= n - 1
            elif admitting:
                if running.size + len(new_ids) >= cap or not state.can_admit(i):
                    admitting = False                   # no skipping past a request that does not fit
                    continue
                state.waiting.remove(i)
                state.admit(i)
                n = min(need, budget)
                budget -= n
                new_ids.append(i)
                new_tokens.append(n)
        return _with_admitted(state, running, tokens, new_ids, new_tokens)


def _with_admitted(state: ServingState, running: np.ndarray, tokens: np.ndarray, new_ids: list, new_tokens: list):
    """Append this step's admissions to `running` and return the step's (ids, tokens)."""
    if new_ids:
        state.running = running = np.concatenate([running, np.array(new_ids, dtype=np.int64)])
        tokens = np.concatenate([tokens, np.array(new_tokens, dtype=np.int64)])
    return running, tokens


@dataclass
class Traced:
    """A policy that delegates to another and keeps what it scheduled: `steps[k]` is step k's list of
    (request id, tokens) pairs, in the order the policy returned them.

    >>> from servelab.analytic.costmodel import LLAMA2_7B, H100_SXM
    >>> from servelab.simulator import Requests, simulate
    >>> traced = Traced(MixedBudget(max_num_batched_tokens=8))
    >>> _ = simulate(Requests([0, 0, 0], [6, 5, 3], [4, 4, 4]), traced, LLAMA2_7B, H100_SXM)
    >>> traced.steps[:3]
    [[(0, 6), (1, 2)], [(0, 1), (1, 3), (2, 3)], [(0, 1), (1, 1), (2, 1)]]
    >>> traced.contexts[:3]
    [[0, 0], [6, 2, 0], [7, 5, 3]]
    """

    policy: Policy
    steps: list = field(default_factory=list)
    contexts: list = field(default_factory=list)     # each scheduled sequence's tokens computed before the step

    @property
    def name(self) -> str:
        return self.policy.name

    def schedule(self, state: ServingState) -> tuple[np.ndarray, np.ndarray]:
        ids, tokens = self.policy.schedule(state)
        self.steps.append(list(zip(np.asarray(ids).tolist(), np.asarray(tokens).tolist())))
        self.contexts.append(state.computed[np.asarray(ids, dtype=np.int64)].tolist())
        return ids, tokens
