"""A step-driven serving simulator: requests arrive, a scheduler builds each step, the cost model prices it.

The loop is an engine's, with the GPU replaced by `servelab.costmodel`:

    admit the requests that have arrived by `now`
    ids, tokens = policy.schedule(state)          # which sequences compute how many tokens this step
    now += step time of that batch                # roofline + fixed overhead
    sequences whose KV now covers all their tokens emit one token; finished ones free their KV

Every sequence is handled the same way, as in vLLM's current scheduler: it has `seq_len` tokens (prompt
+ tokens generated so far) and `computed` of them have KV. A step computes some of the rest; when
`computed == seq_len` the step's logits give a new token. A prefill is "many tokens to compute", a decode
is "one token to compute", a recompute after preemption is a prefill of prompt + generated tokens.

Memory, in tokens (one KV slot holds one token; block rounding is left out): a sequence reserves KV for
its whole current length when it is admitted (as nano-vllm allocates blocks for the whole prompt), and
one more slot before each decode. When a decode finds no free slot, the most recently admitted running
sequence is preempted: its KV is dropped and it goes back to the front of the waiting queue, to be
prefilled again later (recompute). Admission is FCFS from the head of the queue, never skipping ahead.

Two policies share this machinery and differ only in what a step holds:

* `PrefillFirst` (nano-vllm): if any prefill can be scheduled, the step is prefill only; only the first
  prefill of a step may be cut to fit `max_num_batched_tokens`; otherwise the step decodes the running
  sequences. A long prompt therefore stops every running decode for as long as its prefill takes, and
  chunking does not help: a part-prefilled prompt keeps every step a prefill step until it is done.
  With KV in tokens this is servelab.scheduler at block size 1 without prefix caching, step for step.
* `MixedBudget` (vLLM's current scheduler, Sarathi-Serve): every running sequence decodes in every step,
  then prefill chunks fill what is left of `max_num_batched_tokens`. A long prompt is spread over many
  steps, and no step is longer than the budget's worth of work.

`MixedBudget(prefill_order="shortest_first")` hands the leftover budget to the prompts with the fewest
tokens left instead of the oldest: scheduling by the half of a request's work that is known on arrival.

Admission control: `simulate(..., admission=rule)` asks `rule(state, i)` about each request as it arrives;
a rejected request is never served (no tokens, NaN latencies) and counts against goodput.
`BacklogAdmission` is the rule derived from the TTFT and TPOT targets (`costmodel.max_backlog_tokens`):
admit only if the prompt tokens queued ahead plus the request's own can be prefilled in time.

Per request the result holds the time of every token (as a step index: no per-token Python objects), so
TTFT, TPOT, every inter-token gap, queueing delay and finish time all come out of arrays. `Traced` wraps a
policy and keeps every step's (request id, tokens) pairs, for tables and for step-by-step comparisons.

Time is in seconds throughout (arrivals, step times). `servelab.workloads.poisson_arrivals` is chapter 1's
step-clock generator and returns integer *steps*; `poisson_arrivals` here returns float *seconds*.

>>> from servelab.costmodel import LLAMA3_8B, H100_SXM
>>> reqs = Requests(poisson_arrivals(200, rate=5.0, seed=1), fixed_lengths(200, 512), fixed_lengths(200, 64))
>>> res = simulate(reqs, MixedBudget(max_num_batched_tokens=2048), LLAMA3_8B, H100_SXM)
>>> bool((res.generated == 64).all()), bool(res.tpot.max() < 0.02)
(True, True)
"""

from __future__ import annotations

import numbers
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from servelab import costmodel
from servelab.costmodel import DEFAULT_STEP_OVERHEAD_S, GPUSpec, ModelSpec

__all__ = [
    "Admission",
    "BacklogAdmission",
    "MixedBudget",
    "Policy",
    "PrefillFirst",
    "Requests",
    "ServingState",
    "SimResult",
    "Traced",
    "burst_arrivals",
    "fixed_lengths",
    "lognormal_lengths",
    "merge_requests",
    "percentiles",
    "poisson_arrivals",
    "prefill_backlog",
    "simulate",
    "trace_arrivals",
    "uniform_lengths",
]


# --------------------------------------------------------------------------------------------------
# Workloads: arrival times and lengths
# --------------------------------------------------------------------------------------------------

def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _check_count(name: str, n) -> int:
    if not _is_int(n) or n < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {n!r}")
    return int(n)


def _rng(seed) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def poisson_arrivals(n: int, rate: float, seed=0, start_s: float = 0.0) -> np.ndarray:
    """`n` arrival times (seconds) of a Poisson process with `rate` requests per second.

    The gaps between arrivals are exponential with mean 1 / rate. Same seed, same times.

    >>> poisson_arrivals(3, rate=2.0, seed=0).round(3).tolist()
    [0.34, 0.85, 0.86]
    """
    n = _check_count("n", n)
    if not isinstance(rate, numbers.Real) or not rate > 0 or not np.isfinite(rate):
        raise ValueError(f"rate must be a finite number > 0 (requests per second), got {rate!r}")
    if not start_s >= 0:
        raise ValueError(f"start_s must be >= 0, got {start_s!r}")
    return start_s + np.cumsum(_rng(seed).exponential(1.0 / rate, size=n))


def burst_arrivals(n: int, burst_size: int, interval_s: float, start_s: float = 0.0) -> np.ndarray:
    """`n` arrivals in bursts: `burst_size` requests at once, a burst every `interval_s` seconds.

    >>> burst_arrivals(5, burst_size=2, interval_s=1.5).tolist()
    [0.0, 0.0, 1.5, 1.5, 3.0]
    """
    n = _check_count("n", n)
    if not _is_int(burst_size) or burst_size < 1:
        raise ValueError(f"burst_size must be an integer >= 1, got {burst_size!r}")
    if not interval_s >= 0 or not start_s >= 0:
        raise ValueError(f"interval_s and start_s must be >= 0, got {interval_s!r} and {start_s!r}")
    return start_s + (np.arange(n) // burst_size) * float(interval_s)


def trace_arrivals(times) -> np.ndarray:
    """Arrival times from a recorded trace, as a sorted float array (times must be finite and >= 0).

    >>> trace_arrivals([0.5, 0.0, 2]).tolist()
    [0.0, 0.5, 2.0]
    """
    arr = np.asarray(times, dtype=np.float64).ravel()
    if arr.size and (not np.all(np.isfinite(arr)) or arr.min() < 0):
        raise ValueError("trace arrival times must be finite and >= 0 seconds")
    return np.sort(arr)


def _check_length(name: str, value) -> int:
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1 (tokens), got {value!r}")
    return int(value)


def fixed_lengths(n: int, length: int) -> np.ndarray:
    """Every request the same length."""
    return np.full(_check_count("n", n), _check_length("length", length), dtype=np.int64)


def uniform_lengths(n: int, low: int, high: int, seed=0) -> np.ndarray:
    """Lengths drawn uniformly from low..high, both included."""
    low, high = _check_length("low", low), _check_length("high", high)
    if high < low:
        raise ValueError(f"high ({high}) must be >= low ({low})")
    return _rng(seed).integers(low, high + 1, size=_check_count("n", n), dtype=np.int64)


def lognormal_lengths(n: int, median: float, sigma: float, seed=0, low: int = 1, high: int | None = None) -> np.ndarray:
    """Right-skewed lengths, as real prompt and output lengths are: log-normal with the given median and
    shape `sigma`, rounded and clipped to low..high. sigma=1 puts the 90th percentile at 3.6 x median."""
    if not median > 0 or not sigma >= 0:
        raise ValueError(f"median must be > 0 and sigma >= 0, got {median!r} and {sigma!r}")
    low = _check_length("low", low)
    if high is not None and _check_length("high", high) < low:
        raise ValueError(f"high ({high}) must be >= low ({low})")
    draws = _rng(seed).lognormal(np.log(median), sigma, size=_check_count("n", n))
    return np.clip(np.rint(draws), low, high).astype(np.int64)


@dataclass(frozen=True)
class Requests:
    """The workload: request i arrives at `arrival_s[i]` with `prompt_len[i]` tokens and generates exactly
    `output_len[i]` (no early end-of-sequence). Arrival times must be sorted."""

    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray

    def __post_init__(self):
        arrival = np.asarray(self.arrival_s, dtype=np.float64).ravel()
        prompt, output = np.asarray(self.prompt_len).ravel(), np.asarray(self.output_len).ravel()
        if not arrival.size == prompt.size == output.size:
            raise ValueError(f"arrival_s, prompt_len and output_len must have one entry per request, got "
                             f"{arrival.size}, {prompt.size} and {output.size}")
        for name, arr in (("prompt_len", prompt), ("output_len", output)):
            if arr.size and (not np.issubdtype(arr.dtype, np.integer) or arr.min() < 1):
                raise ValueError(f"{name} must hold integers >= 1 (tokens)")
        if arrival.size and (not np.all(np.isfinite(arrival)) or arrival.min() < 0):
            raise ValueError("arrival_s must be finite and >= 0 seconds")
        if np.any(np.diff(arrival) < 0):
            raise ValueError("arrival_s must be sorted (non-decreasing); trace_arrivals() sorts a trace")
        object.__setattr__(self, "arrival_s", arrival)
        object.__setattr__(self, "prompt_len", prompt.astype(np.int64))
        object.__setattr__(self, "output_len", output.astype(np.int64))

    def __len__(self) -> int:
        return self.arrival_s.size

    @property
    def max_kv_tokens(self) -> np.ndarray:
        """The most KV each request ever holds: its last token is sampled but never fed back."""
        return self.prompt_len + self.output_len - 1


def merge_requests(*parts: Requests) -> tuple[Requests, list[np.ndarray]]:
    """One workload from several (a background load plus a long prompt, say), sorted by arrival; ties keep
    the order of `parts`, then each part's own order. Also returns, for each part, where its requests
    went: `ids[k][j]` is the new index of request j of `parts[k]`.

    >>> both, (chat, long) = merge_requests(Requests([0.0, 1.0], [10, 10], [5, 5]), Requests([0.5], [8000], [4]))
    >>> both.prompt_len.tolist(), chat.tolist(), long.tolist()
    ([10, 8000, 10], [0, 2], [1])
    """
    if not parts:
        raise ValueError("merge_requests needs at least one Requests")
    arrival = np.concatenate([p.arrival_s for p in parts])
    order = np.argsort(arrival, kind="stable")
    where = np.empty(order.size, dtype=np.int64)
    where[order] = np.arange(order.size)
    bounds = np.cumsum([0] + [len(p) for p in parts])
    merged = Requests(arrival[order], np.concatenate([p.prompt_len for p in parts])[order],
                      np.concatenate([p.output_len for p in parts])[order])
    return merged, [where[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


# --------------------------------------------------------------------------------------------------
# Scheduler state and the two policies
# --------------------------------------------------------------------------------------------------

class ServingState:
    """The queues and the KV cache, as a policy sees them.

    Per-request counters are numpy arrays indexed by request id: `seq_len` (prompt + tokens generated so
    far), `computed` (leading tokens with KV), `reserved` (KV slots held). `waiting` is a deque of ids,
    FCFS (under PrefillFirst its head may be part-prefilled); `running` is an int array of ids in
    admission order. A running sequence holds `reserved == seq_len` while its prompt is being prefilled
    and `reserved == seq_len - 1` between decodes: the token it sampled last has no KV yet.
    """

    def __init__(self, prompt_len: np.ndarray, output_len: np.ndarray, kv_capacity: int):
        n = prompt_len.size
        self.prompt_len, self.output_len = prompt_len, output_len
        self.seq_len = prompt_len.copy()
        self.computed = np.zeros(n, dtype=np.int64)
        self.reserved = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.first_scheduled_s = np.full(n, np.nan)
        self.kv_capacity = kv_capacity
        self.kv_free = kv_capacity
        self.waiting: deque[int] = deque()
        self.running = np.empty(0, dtype=np.int64)
        self.now = 0.0
        self.preempted_this_step = False

    @property
    def produced(self) -> np.ndarray:
        return self.seq_len - self.prompt_len

    @property
    def kv_used(self) -> int:
        return self.kv_capacity - self.kv_free

    def can_admit(self, i: int) -> bool:
        return self.kv_free >= self.seq_len[i]

    def admit(self, i: int) -> None:
        """Reserve KV for the whole current sequence (prompt + anything generated before a preemption)."""
        need = int(self.seq_len[i])
        assert self.reserved[i] == 0 and self.kv_free >= need, "admit() must follow can_admit()"
        self.reserved[i] = need
        self.kv_free -= need
        if np.isnan(self.first_scheduled_s[i]):
            self.first_scheduled_s[i] = self.now

    def preempt_tail(self) -> int:
        """Recompute-style preemption of the most recently admitted running sequence: drop its KV and put
        it at the front of the waiting queue. Returns its id."""
        i = int(self.running[-1])
        self.running = self.running[:-1]
        self.kv_free += int(self.reserved[i])
        self.reserved[i] = 0
        self.computed[i] = 0
        self.preemptions[i] += 1
        self.waiting.appendleft(i)
        self.preempted_this_step = True
        return i

    def reserve_decode_slots(self, count: int) -> np.ndarray:
        """One more KV slot for each of the first `count` running sequences, preempting from the tail of
        `running` until they fit (the tail may be among them). Returns the ids that got a slot."""
        while self.kv_free < min(count, self.running.size):
            self.preempt_tail()
        ids = self.running[:count]
        self.reserved[ids] += 1
        self.kv_free -= ids.size
        return ids


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
    """The budgeted mixed step (vLLM's current scheduler, Sarathi-Serve's stall-free batching).

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
    """

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    prefill_order: str = "fcfs"
    name: str = field(default="mixed-budget", compare=False)

    def __post_init__(self):
        _check_limits("MixedBudget", self.max_num_batched_tokens, self.max_num_seqs)
        if self.prefill_order not in _PREFILL_ORDERS:
            raise ValueError(f"MixedBudget: prefill_order must be one of {_PREFILL_ORDERS}, got {self.prefill_order!r}")

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
                n = min(int(state.seq_len[i]), budget)
                budget -= n
                new_ids.append(i)
                new_tokens.append(n)
        return _with_admitted(state, running, tokens, new_ids, new_tokens)

    def _shortest_first(self, state, running, remaining, tokens, budget):
        # candidates: (prompt tokens still to compute, request id, position in running or -1 if waiting)
        cands = [(int(remaining[j]), int(running[j]), j) for j in (remaining > 1).nonzero()[0]]
        if not state.preempted_this_step:
            cands += [(int(state.seq_len[i] - state.computed[i]), int(i), -1) for i in state.waiting]
        cands.sort()
        new_ids, new_tokens = [], []
        cap = min(self.max_num_seqs, self.max_num_batched_tokens)
        admitting = True
        for need, i, j in cands:
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

    >>> from servelab.costmodel import LLAMA2_7B, H100_SXM
    >>> traced = Traced(MixedBudget(max_num_batched_tokens=8))
    >>> _ = simulate(Requests([0, 0, 0], [6, 5, 3], [4, 4, 4]), traced, LLAMA2_7B, H100_SXM)
    >>> traced.steps[:3]
    [[(0, 6), (1, 2)], [(0, 1), (1, 3), (2, 3)], [(0, 1), (1, 1), (2, 1)]]
    """

    policy: Policy
    steps: list = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.policy.name

    def schedule(self, state: ServingState) -> tuple[np.ndarray, np.ndarray]:
        ids, tokens = self.policy.schedule(state)
        self.steps.append(list(zip(np.asarray(ids).tolist(), np.asarray(tokens).tolist())))
        return ids, tokens


# --------------------------------------------------------------------------------------------------
# Admission control: a rule applied to each request as it arrives
# --------------------------------------------------------------------------------------------------

class Admission(Protocol):
    """Called once per request, when it arrives and before it joins `waiting`; False rejects it (it is
    never served: no tokens, NaN latencies, and it counts against goodput)."""

    def __call__(self, state: ServingState, i: int) -> bool: ...


def prefill_backlog(state: ServingState) -> int:
    """Prompt tokens still to compute, over waiting sequences and part-prefilled running ones: the work a
    newly arrived request finds queued ahead of it (FCFS). Decoding sequences owe one token each, which is
    decode work, not backlog. The simulator calls admission between steps, so nothing is in flight."""
    running = state.running
    mid = running[state.reserved[running] == state.seq_len[running]]       # reserved in full: still in prefill
    backlog = int((state.seq_len[mid] - state.computed[mid]).sum())
    if state.waiting:
        waiting = np.fromiter(state.waiting, dtype=np.int64, count=len(state.waiting))
        backlog += int((state.seq_len[waiting] - state.computed[waiting]).sum())
    return backlog


@dataclass(frozen=True)
class BacklogAdmission:
    """Admit request i iff prefill_backlog(state) + its prompt <= `max_backlog_tokens` (the limit that
    servelab.costmodel.max_backlog_tokens derives from the TTFT and TPOT targets); reject it otherwise.

    >>> BacklogAdmission(64_000).max_backlog_tokens
    64000
    """

    max_backlog_tokens: int

    def __post_init__(self):
        if not _is_int(self.max_backlog_tokens) or self.max_backlog_tokens < 0:
            raise ValueError(f"max_backlog_tokens must be an integer >= 0, got {self.max_backlog_tokens!r}")

    def __call__(self, state: ServingState, i: int) -> bool:
        return prefill_backlog(state) + int(state.prompt_len[i]) <= self.max_backlog_tokens


# --------------------------------------------------------------------------------------------------
# The simulation loop and its result
# --------------------------------------------------------------------------------------------------

def percentiles(values, qs=(50, 90, 99)) -> dict[int, float]:
    """{q: q-th percentile}, ignoring NaNs (TPOT is NaN for single-token outputs)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {q: float("nan") for q in qs}
    return {q: float(v) for q, v in zip(qs, np.percentile(values, qs))}


@dataclass(frozen=True)
class SimResult:
    """What happened. Per-request arrays are indexed like the `Requests`; per-step arrays by step number.

    Token k of request i (k = 0 .. output_len[i]-1) was emitted at the end of step
    `token_step[token_offset[i] + k]`, i.e. at `step_end_s[...]`. A request rejected by admission control
    (`rejected[i]`) emitted nothing: its token steps are -1 and its latencies NaN.
    """

    policy: str
    kv_capacity: int
    requests: Requests
    generated: np.ndarray         # tokens each request generated, as counted by the simulator
    first_scheduled_s: np.ndarray
    preemptions: np.ndarray
    token_offset: np.ndarray
    token_step: np.ndarray
    step_start_s: np.ndarray
    step_end_s: np.ndarray
    step_tokens: np.ndarray       # tokens computed in the step (decodes + prefill chunks)
    step_seqs: np.ndarray         # sequences in the step
    step_decodes: np.ndarray      # sequences that computed exactly one token
    step_kv_used: np.ndarray      # KV slots reserved while the step ran
    rejected: np.ndarray | None = None   # per request: turned away on arrival by admission control

    def __post_init__(self):
        if self.rejected is None:
            object.__setattr__(self, "rejected", np.zeros(len(self.requests), dtype=bool))

    # ---- per request ----
    @property
    def arrival_s(self) -> np.ndarray:
        return self.requests.arrival_s

    @property
    def served(self) -> np.ndarray:
        """Requests that were admitted (all of them without admission control)."""
        return ~self.rejected

    def _times(self, token_index=None) -> np.ndarray:
        """Emission times of the given token slots (default: all of them); NaN for a rejected request's."""
        steps = self.token_step if token_index is None else self.token_step[token_index]
        if not self.step_end_s.size:
            return np.full(np.shape(steps), np.nan)
        times = self.step_end_s[steps]
        return np.where(steps >= 0, times, np.nan) if self.rejected.any() else times

    def token_times(self, i: int) -> np.ndarray:
        start = self.token_offset[i]
        return self._times(np.arange(start, start + self.requests.output_len[i]))

    def gaps(self, i: int) -> np.ndarray:
        """Request i's inter-token gaps (seconds), output_len - 1 of them (NaN if it was rejected)."""
        return np.diff(self.token_times(i))

    @property
    def first_token_s(self) -> np.ndarray:
        return self._times(self.token_offset)

    @property
    def finish_s(self) -> np.ndarray:
        return self._times(self.token_offset + self.requests.output_len - 1)

    @property
    def ttft(self) -> np.ndarray:
        return self.first_token_s - self.arrival_s

    @property
    def tpot(self) -> np.ndarray:
        """Mean time per output token after the first: (finish - first token) / (output_len - 1); NaN when
        a request generates a single token (or was rejected)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.requests.output_len > 1,
                            (self.finish_s - self.first_token_s) / (self.requests.output_len - 1), np.nan)

    @property
    def queueing_delay(self) -> np.ndarray:
        """Arrival until the start of the first step that computed any of the request's tokens."""
        return self.first_scheduled_s - self.arrival_s

    def _gaps_all(self) -> tuple[np.ndarray, np.ndarray]:
        """(gap, keep): np.diff over every token slot, and which entries are true inter-token gaps of a
        served request (not the jump from one request's last token to the next one's first)."""
        gaps = np.diff(self._times())
        keep = np.ones(gaps.size, dtype=bool)
        keep[self.token_offset[1:] - 1] = False        # the step from one request's last token to the next's first
        if self.rejected.any():
            keep &= ~np.isnan(gaps)
        return gaps, keep

    def inter_token_gaps(self) -> np.ndarray:
        """Every inter-token gap of every served request, concatenated (request 0's first). Memory: 8 bytes
        per generated token."""
        gaps, keep = self._gaps_all()
        return gaps[keep]

    def gap_timeline(self, ids=None) -> tuple[np.ndarray, np.ndarray]:
        """(emitted_s, gap_s): for every inter-token gap of the given requests (default: all served ones),
        when the later token came out and how long after the one before it. For plotting gaps over time."""
        ids = np.flatnonzero(self.served) if ids is None else np.asarray(ids, dtype=np.int64).ravel()
        times, gaps = [], []
        for i in ids:
            t = self.token_times(int(i))
            if t.size > 1 and not np.isnan(t[0]):
                times.append(t[1:])
                gaps.append(np.diff(t))
        if not times:
            return np.empty(0), np.empty(0)
        return np.concatenate(times), np.concatenate(gaps)

    @property
    def max_gap(self) -> np.ndarray:
        """Each request's longest inter-token gap (NaN for single-token outputs and rejected requests)."""
        out = np.full(len(self.requests), np.nan)
        multi = (self.requests.output_len > 1) & self.served
        if multi.any():
            gaps, keep = self._gaps_all()
            gaps[~keep] = -np.inf                       # between requests: never a maximum
            out[multi] = np.maximum.reduceat(gaps, self.token_offset[multi])
        return out

    @property
    def step_duration_s(self) -> np.ndarray:
        return self.step_end_s - self.step_start_s

    # ---- aggregate ----
    @property
    def duration_s(self) -> float:
        """First arrival to last token."""
        return float(np.nanmax(self.finish_s) - self.arrival_s.min()) if self.served.any() else float("nan")

    def throughput(self) -> float:
        """Output tokens per second over `duration_s`."""
        return float(self.requests.output_len[self.served].sum() / self.duration_s)

    def slo_met(self, ttft_s: float, tpot_s: float) -> np.ndarray:
        """Which requests met both targets (a single-token request has no TPOT to miss; a rejected one
        met nothing)."""
        tpot = self.tpot
        return self.served & (self.ttft <= ttft_s) & ((tpot <= tpot_s) | np.isnan(tpot))

    def goodput(self, ttft_s: float, tpot_s: float) -> float:
        """Requests per second that met both the TTFT and the TPOT target."""
        return float(self.slo_met(ttft_s, tpot_s).sum() / self.duration_s)

    def goodput_tokens(self, ttft_s: float, tpot_s: float) -> float:
        """Output tokens per second of the requests that met both targets: the throughput users feel."""
        return float(self.requests.output_len[self.slo_met(ttft_s, tpot_s)].sum() / self.duration_s)

    def summary(self, ttft_s: float | None = None, tpot_s: float | None = None) -> dict[str, float]:
        out = {"requests": len(self.requests), "steps": self.step_end_s.size, "duration_s": self.duration_s,
               "throughput_tok_s": self.throughput(), "requests_per_s": len(self.requests) / self.duration_s,
               "preemptions": int(self.preemptions.sum()), "rejected": int(self.rejected.sum())}
        for metric in ("ttft", "tpot", "queueing_delay"):
            for q, v in percentiles(getattr(self, metric)).items():
                out[f"{metric}_p{q}_s"] = v
        out["max_gap_s"] = float(np.nanmax(self.max_gap)) if np.any(~np.isnan(self.max_gap)) else float("nan")
        if ttft_s is not None and tpot_s is not None:
            out["goodput_req_s"] = self.goodput(ttft_s, tpot_s)
            out["slo_attainment"] = float(self.slo_met(ttft_s, tpot_s).mean())
        return out


def simulate(requests: Requests, policy: Policy, model: ModelSpec, gpu: GPUSpec, *,
             kv_capacity_tokens: int | None = None, memory_fraction: float = 0.9,
             overhead_s: float = DEFAULT_STEP_OVERHEAD_S, admission: Admission | None = None) -> SimResult:
    """Run `requests` through `policy` on one `gpu` serving `model` until every request has finished.

    The KV capacity is `kv_capacity_tokens` if given, else what fits next to the weights in
    `memory_fraction` of the GPU's memory. Each step lasts `costmodel`'s roofline time for its batch plus
    `overhead_s`; when nothing is waiting or running, the clock jumps to the next arrival. Arrivals are
    seen between steps: a request arriving while a step runs joins the queue when that step ends.
    `admission`, if given, is asked about each request as it joins (see `Admission`); a rejected request
    is never served.
    """
    if kv_capacity_tokens is None:
        kv_capacity_tokens = costmodel.kv_capacity_tokens(model, gpu, memory_fraction)
    if not _is_int(kv_capacity_tokens) or kv_capacity_tokens < 1:
        raise ValueError(f"kv_capacity_tokens must be an integer >= 1, got {kv_capacity_tokens!r}")
    if not isinstance(overhead_s, numbers.Real) or not overhead_s >= 0:
        raise ValueError(f"overhead_s must be a number >= 0 (seconds per step), got {overhead_s!r}")
    if admission is not None and not callable(admission):
        raise ValueError(f"admission must be a callable (state, request id) -> bool, got {admission!r}")
    n = len(requests)
    if n == 0:
        raise ValueError("no requests to simulate")
    worst = int(np.argmax(requests.max_kv_tokens))
    if requests.max_kv_tokens[worst] > kv_capacity_tokens:
        raise ValueError(f"request {worst} needs {requests.max_kv_tokens[worst]} tokens of KV (prompt "
                         f"{requests.prompt_len[worst]} + output {requests.output_len[worst]} - 1) but the KV "
                         f"cache holds {kv_capacity_tokens}: it could never finish")

    prompt, output, arrival = requests.prompt_len, requests.output_len, requests.arrival_s
    state = ServingState(prompt, output, int(kv_capacity_tokens))
    token_offset = np.concatenate([[0], np.cumsum(output)[:-1]]).astype(np.int64)
    # token k of request i goes to token_offset[i] + k, and k = seq_len - prompt_len before the emission
    token_slot_base = token_offset - prompt
    token_step = np.full(int(output.sum()), -1, dtype=np.int32)
    final_len = prompt + output                         # seq_len once the last token is out
    finished = np.zeros(n, dtype=bool)
    rejected = np.zeros(n, dtype=bool)
    starts, ends, step_tokens, step_seqs, step_decodes, step_kv = [], [], [], [], [], []
    seq_len, computed, reserved = state.seq_len, state.computed, state.reserved

    now, next_arrival, num_finished, step = 0.0, 0, 0, 0
    while num_finished < n:
        if next_arrival < n and arrival[next_arrival] <= now:
            upto = int(np.searchsorted(arrival, now, side="right"))
            if admission is None:
                state.waiting.extend(range(next_arrival, upto))
            else:
                state.now = now
                for i in range(next_arrival, upto):
                    if admission(state, i):
                        state.waiting.append(i)
                    else:
                        rejected[i] = finished[i] = True
                        num_finished += 1
            next_arrival = upto
        if not state.waiting and not state.running.size:
            if next_arrival == n:
                if num_finished == n:
                    break                               # the last arrivals were all rejected
                raise RuntimeError("nothing to run and nothing left to arrive, yet some request is unfinished")
            now = float(arrival[next_arrival])          # idle: jump to the next arrival
            continue

        state.now, state.preempted_this_step = now, False
        ids, tokens = policy.schedule(state)
        ids, tokens = np.asarray(ids, dtype=np.int64), np.asarray(tokens, dtype=np.int64)   # lists are fine too
        if ids.size == 0:
            raise RuntimeError(f"{policy.name} scheduled nothing at t={now:.6f}s with work pending")

        # price the step from its four totals (see costmodel.cost_from_totals); a chunk of c tokens on a
        # prefix of p has c*p + c*(c+1)/2 (query, key) pairs, and sum(c*(c+1)) = c.c + sum(c)
        context = computed[ids]
        num_tokens = int(tokens.sum())
        pairs = int(np.dot(tokens, context)) + (int(np.dot(tokens, tokens)) + num_tokens) // 2
        cost = costmodel.cost_from_totals(model, gpu, num_tokens, ids.size, pairs, int(context.sum()))
        starts.append(now)
        step_kv.append(state.kv_used)
        now += cost.seconds(overhead_s)
        ends.append(now)
        step_tokens.append(num_tokens)
        step_seqs.append(ids.size)
        step_decodes.append(ids.size - int(np.count_nonzero(tokens - 1)))

        # postprocess: advance the KV; a sequence whose KV now covers all its tokens samples one more
        new_computed = context + tokens
        computed[ids] = new_computed
        emit = ids[new_computed == seq_len[ids]]
        if emit.size:
            token_step[token_slot_base[emit] + seq_len[emit]] = step
            seq_len[emit] += 1
            done = emit[seq_len[emit] == final_len[emit]]
            if done.size:
                state.kv_free += int(reserved[done].sum())
                reserved[done] = 0
                finished[done] = True
                num_finished += done.size
                state.running = state.running[~finished[state.running]]
        step += 1
    assert state.kv_free == state.kv_capacity and not state.waiting, "every slot comes back when all are done"

    return SimResult(policy=policy.name, kv_capacity=int(kv_capacity_tokens), requests=requests,
                     generated=state.produced, first_scheduled_s=state.first_scheduled_s,
                     preemptions=state.preemptions,
                     token_offset=token_offset, token_step=token_step,
                     step_start_s=np.array(starts), step_end_s=np.array(ends),
                     step_tokens=np.array(step_tokens, dtype=np.int64), step_seqs=np.array(step_seqs, dtype=np.int64),
                     step_decodes=np.array(step_decodes, dtype=np.int64),
                     step_kv_used=np.array(step_kv, dtype=np.int64), rejected=rejected)
