"""Static vs continuous batching, counted in decode steps.

The model (chapter 01): request ``i`` generates ``out_lens[i]`` tokens, one per decode step, and the engine
runs at most ``B`` requests at a time, one per *slot*. A decode step costs about the same whatever the batch
holds (decode is memory-bound), so the number of steps is the cost and

    utilization = useful tokens / slot-steps on offer = sum(out_lens) / (B * total_steps).

* Static (request-level) batching takes the requests ``B`` at a time; a batch ends when its longest
  request ends, and only then does the next batch start.
* Continuous (iteration-level) batching gives a slot back the moment its request finishes, and the next
  waiting request takes the slot that frees up first. A min-heap of slot free times computes this without
  simulating every step: ``finish[i] = heappop(slots) + out_lens[i]``.

Over many requests the ratio static steps / continuous steps tends to ``E[max of B lengths] / E[length]``
(:func:`predicted_gain`): the gain is a statistic of the output-length distribution, not a constant.

Every function checks its inputs and raises ``ValueError`` with a message naming the bad argument.
"""

from __future__ import annotations

import heapq
import math
import numbers
from collections.abc import Sequence
from typing import NamedTuple

__all__ = [
    "ArrivalSchedule",
    "Placement",
    "constant_pmf",
    "expected_max",
    "fcfs_order",
    "geometric_pmf",
    "harmonic",
    "lower_bound",
    "naive_continuous",
    "pmf_mean",
    "predicted_gain",
    "simulate_continuous",
    "simulate_continuous_arrivals",
    "simulate_static",
    "simulate_static_arrivals",
    "slot_assignments",
    "uniform_pmf",
    "utilization",
]


# --------------------------------------------------------------------------------------------------------
# input checks


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _check_batch_size(B) -> int:
    if not _is_int(B) or B < 1:
        raise ValueError(f"B (the batch size) must be an integer >= 1, got {B!r}")
    return int(B)


def _check_lengths(out_lens) -> list[int]:
    lens = list(out_lens)
    for i, L in enumerate(lens):
        if not _is_int(L):
            raise ValueError(f"out_lens[{i}] must be an integer number of tokens, got {L!r}")
        if L < 1:
            raise ValueError(f"out_lens[{i}] must be >= 1 (a request generates at least one token), got {L}")
    return [int(L) for L in lens]


def _check_arrivals(arrivals, n: int) -> list[int]:
    arr = list(arrivals)
    if len(arr) != n:
        raise ValueError(f"arrivals and out_lens must have the same length, got {len(arr)} and {n}")
    for i, a in enumerate(arr):
        if not _is_int(a):
            raise ValueError(f"arrivals[{i}] must be an integer step, got {a!r}")
        if a < 0:
            raise ValueError(f"arrivals[{i}] must be >= 0, got {a}")
    return [int(a) for a in arr]


def _check_pmf(pmf) -> list[float]:
    probs = [float(p) for p in pmf]
    if not probs:
        raise ValueError("pmf must not be empty (pmf[k - 1] is the probability of length k)")
    for k, p in enumerate(probs, start=1):
        if not p >= 0.0:  # also rejects NaN
            raise ValueError(f"pmf[{k - 1}] (probability of length {k}) must be >= 0, got {p}")
    total = math.fsum(probs)
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"pmf must sum to 1, got {total!r}")
    return probs


# --------------------------------------------------------------------------------------------------------
# static vs continuous batching


def simulate_static(out_lens: Sequence[int], B: int) -> tuple[int, list[int]]:
    """Static batching: requests go in fixed batches of ``B`` in list order; a batch lasts as long as its
    longest request, and the next batch starts only after that.

    Returns ``(total_steps, finish)`` where ``finish[i]`` is the step at which request ``i`` has produced
    its last token (its batch's start plus its own length; its slot then idles until the batch ends).

    >>> simulate_static([20, 200, 50, 30], 2)    # batch [20, 200] lasts 200, batch [50, 30] lasts 50
    (250, [20, 200, 250, 230])
    """
    lens, B = _check_lengths(out_lens), _check_batch_size(B)
    t, finish = 0, [0] * len(lens)
    for s in range(0, len(lens), B):
        batch = range(s, min(s + B, len(lens)))
        for i in batch:
            finish[i] = t + lens[i]
        t += max(lens[i] for i in batch)  # the whole batch waits for its longest request
    return t, finish


def simulate_continuous(out_lens: Sequence[int], B: int) -> tuple[int, list[int]]:
    """Continuous batching: in list order, each request takes the slot that frees up first.

    ``slots`` is a min-heap of the times at which the (at most ``B``) slots become free, so
    ``finish[i] = heappop(slots) + out_lens[i]``. Returns ``(total_steps, finish)`` with
    ``total_steps = max(finish)`` (0 when there are no requests).

    >>> simulate_continuous([20, 200, 50, 30], 2)   # 50 starts at 20, 30 starts at 70
    (200, [20, 200, 70, 100])
    """
    lens, B = _check_lengths(out_lens), _check_batch_size(B)
    finish, slots = [0] * len(lens), [0] * min(B, len(lens))
    for i, L in enumerate(lens):  # in arrival order, the earliest free slot takes it
        finish[i] = heapq.heappop(slots) + L
        heapq.heappush(slots, finish[i])
    return (max(finish) if finish else 0), finish


def naive_continuous(out_lens: Sequence[int], B: int) -> tuple[int, list[int]]:
    """Continuous batching simulated one decode step at a time (the slow, obvious reference for
    :func:`simulate_continuous`): before every step, free slots are filled with the next requests in list
    order; after it, every running request has one token fewer to go.

    >>> naive_continuous([5, 1, 1, 1], 2)
    (5, [5, 1, 2, 3])
    """
    lens, B = _check_lengths(out_lens), _check_batch_size(B)
    t, finish, nxt, running = 0, [0] * len(lens), 0, {}
    while nxt < len(lens) or running:
        while len(running) < B and nxt < len(lens):
            running[nxt] = lens[nxt]
            nxt += 1
        t += 1
        for i in list(running):
            running[i] -= 1
            if running[i] == 0:
                finish[i] = t
                del running[i]
    return t, finish


def utilization(out_lens: Sequence[int], B: int, total_steps: int) -> float:
    """Fraction of the ``B * total_steps`` slot-steps that produced a token: ``sum(out_lens) / (B *
    total_steps)``; 0.0 when there are no requests.

    >>> utilization([20, 200, 50, 30], 2, 250)    # 300 tokens in 500 slot-steps
    0.6
    """
    lens, B = _check_lengths(out_lens), _check_batch_size(B)
    if not _is_int(total_steps) or total_steps < 0:
        raise ValueError(f"total_steps must be an integer >= 0, got {total_steps!r}")
    if not lens:
        return 0.0
    if sum(lens) > B * total_steps:
        raise ValueError(
            f"total_steps={total_steps} is impossible: {sum(lens)} tokens need at least "
            f"{lower_bound(lens, B)} steps with B={B}"
        )
    return sum(lens) / (B * total_steps)


def lower_bound(out_lens: Sequence[int], B: int) -> int:
    """No schedule finishes in fewer steps than ``max(max(out_lens), ceil(sum(out_lens) / B))``: the
    longest request needs its own length in steps, and ``B`` slots make at most ``B`` tokens a step.

    >>> lower_bound([20, 200, 50, 30], 2)         # max(200, ceil(300 / 2))
    200
    >>> lower_bound([5, 5, 5], 2)                 # max(5, ceil(7.5))
    8
    """
    lens, B = _check_lengths(out_lens), _check_batch_size(B)
    if not lens:
        return 0
    return max(max(lens), -(-sum(lens) // B))


class Placement(NamedTuple):
    """Request ``request`` occupies slot ``slot`` from step ``start`` to step ``finish`` (exclusive)."""

    request: int
    slot: int
    start: int
    finish: int


def slot_assignments(out_lens: Sequence[int], B: int, policy: str = "continuous") -> list[Placement]:
    """Which slot each request occupies and when, for ``policy`` ``"static"`` or ``"continuous"``.

    The start and finish times are those of :func:`simulate_static` / :func:`simulate_continuous`; under
    continuous batching a tie between free slots goes to the lower slot number. Returned in request order.

    >>> slot_assignments([5, 1, 1, 1], 2)
    [Placement(request=0, slot=0, start=0, finish=5), Placement(request=1, slot=1, start=0, finish=1), \
Placement(request=2, slot=1, start=1, finish=2), Placement(request=3, slot=1, start=2, finish=3)]
    """
    lens, B = _check_lengths(out_lens), _check_batch_size(B)
    out = []
    if policy == "static":
        t = 0
        for s in range(0, len(lens), B):
            batch = range(s, min(s + B, len(lens)))
            out += [Placement(i, i - s, t, t + lens[i]) for i in batch]
            t += max(lens[i] for i in batch)
    elif policy == "continuous":
        slots = [(0, k) for k in range(min(B, len(lens)))]  # (free at, slot id): already a heap
        for i, L in enumerate(lens):
            free, k = heapq.heappop(slots)
            out.append(Placement(i, k, free, free + L))
            heapq.heappush(slots, (free + L, k))
    else:
        raise ValueError(f"policy must be 'static' or 'continuous', got {policy!r}")
    return out


# --------------------------------------------------------------------------------------------------------
# arrival times: requests that are not all there at step 0


class ArrivalSchedule(NamedTuple):
    """Per-request ``start`` and ``finish`` steps and queueing ``delay = start - arrival``."""

    start: list[int]
    finish: list[int]
    delay: list[int]

    @property
    def total_steps(self) -> int:
        """The step at which the last request finishes (0 with no requests)."""
        return max(self.finish, default=0)


def fcfs_order(arrivals: Sequence[int]) -> list[int]:
    """Request indices in first-come first-served order: by arrival step, ties by list position.

    >>> fcfs_order([3, 0, 3, 1])
    [1, 3, 0, 2]
    """
    return sorted(range(len(arrivals)), key=lambda i: (arrivals[i], i))


def simulate_continuous_arrivals(
    arrivals: Sequence[int], out_lens: Sequence[int], B: int
) -> ArrivalSchedule:
    """Continuous batching when request ``i`` arrives at step ``arrivals[i]``.

    Iteration-level admission: before each step, the engine fills free slots with requests that have
    arrived, first-come first-served (by arrival step, ties by list position). A request arriving at step
    ``a`` can take a slot that is free at any time ``>= a``, so in FCFS order
    ``start[i] = max(arrivals[i], heappop(slots))`` and ``finish[i] = start[i] + out_lens[i]``.
    Returns an :class:`ArrivalSchedule` ``(start, finish, delay)``; ``delay[i] = start[i] - arrivals[i]``
    is the queueing delay (steps spent waiting for a slot).

    >>> simulate_continuous_arrivals([0, 0, 1, 6], [4, 2, 3, 1], 2)   # request 2 waits for slot 1 (free at 2)
    ArrivalSchedule(start=[0, 0, 2, 6], finish=[4, 2, 5, 7], delay=[0, 0, 1, 0])
    """
    lens, B = _check_lengths(out_lens), _check_batch_size(B)
    arr = _check_arrivals(arrivals, len(lens))
    n = len(lens)
    start, finish, slots = [0] * n, [0] * n, [0] * min(B, n)
    for i in fcfs_order(arr):
        start[i] = max(arr[i], heapq.heappop(slots))
        finish[i] = start[i] + lens[i]
        heapq.heappush(slots, finish[i])
    return ArrivalSchedule(start, finish, [s - a for s, a in zip(start, arr)])


def simulate_static_arrivals(arrivals: Sequence[int], out_lens: Sequence[int], B: int) -> ArrivalSchedule:
    """Static batching when request ``i`` arrives at step ``arrivals[i]``.

    Whenever the engine is idle it takes up to ``B`` requests that have already arrived, first-come
    first-served, as one batch (it does not wait to fill the batch; if nobody is waiting it idles until
    the next arrival). The batch runs until its longest request finishes; requests arriving meanwhile wait.

    >>> simulate_static_arrivals([0, 0, 1, 6], [4, 2, 3, 1], 2)   # request 2 waits for the batch to end at 4
    ArrivalSchedule(start=[0, 0, 4, 7], finish=[4, 2, 7, 8], delay=[0, 0, 3, 1])
    """
    lens, B = _check_lengths(out_lens), _check_batch_size(B)
    arr = _check_arrivals(arrivals, len(lens))
    n = len(lens)
    order = fcfs_order(arr)
    start, finish = [0] * n, [0] * n
    t, k = 0, 0
    while k < n:
        t = max(t, arr[order[k]])  # idle until somebody is there
        batch = []
        while k < n and len(batch) < B and arr[order[k]] <= t:
            batch.append(order[k])
            k += 1
        for i in batch:
            start[i], finish[i] = t, t + lens[i]
        t += max(lens[i] for i in batch)
    return ArrivalSchedule(start, finish, [s - a for s, a in zip(start, arr)])


# --------------------------------------------------------------------------------------------------------
# the gain is a statistic of the output-length distribution
#
# A pmf is a list: pmf[k - 1] is the probability that a request generates exactly k tokens (k = 1..n).


def pmf_mean(pmf: Sequence[float]) -> float:
    """E[L] for the length pmf (``pmf[k - 1] = P(L = k)``).

    >>> pmf_mean([0.5, 0.5])
    1.5
    """
    probs = _check_pmf(pmf)
    return math.fsum(k * p for k, p in enumerate(probs, start=1))


def expected_max(pmf: Sequence[float], B: int) -> float:
    """E[max of B independent lengths] drawn from ``pmf`` (``pmf[k - 1] = P(L = k)``).

    For a positive integer variable, E[M] = sum over k >= 1 of P(M >= k), and the max of ``B`` draws is
    below ``k`` only when all ``B`` are: P(M >= k) = 1 - F(k - 1)^B, with F the CDF. So

        E[max_B L] = sum_{k=1..n} (1 - F(k - 1)^B).

    >>> expected_max([0.5, 0.5], 2)       # lengths 1 or 2: the max is 1 only if both are 1 (prob 1/4)
    1.75
    """
    probs, B = _check_pmf(pmf), _check_batch_size(B)
    terms, cdf = [], 0.0  # cdf holds F(k - 1) when term k is added
    for p in probs:
        terms.append(1.0 - min(cdf, 1.0) ** B)
        cdf += p
    return math.fsum(terms)


def predicted_gain(pmf: Sequence[float], B: int) -> float:
    """Static steps / continuous steps as the number of requests grows: ``E[max_B L] / E[L]``.

    A static batch lasts E[max of its B lengths] steps for B requests; continuous batching spends
    E[L] / B steps per request on average. The gain is 1 for constant lengths and about the harmonic number
    H_B for geometric (exponential-like) lengths: 2.72 at B = 8.

    >>> predicted_gain([0.5, 0.5], 2)     # 1.75 / 1.5
    1.1666666666666667
    """
    return expected_max(pmf, B) / pmf_mean(pmf)


def harmonic(B: int) -> float:
    """H_B = 1 + 1/2 + ... + 1/B: E[max of B exponentials] / E[one exponential].

    >>> round(harmonic(8), 4)
    2.7179
    """
    B = _check_batch_size(B)
    return math.fsum(1.0 / k for k in range(1, B + 1))


def constant_pmf(length: int) -> list[float]:
    """Every request generates exactly ``length`` tokens.

    >>> constant_pmf(3)
    [0.0, 0.0, 1.0]
    """
    if not _is_int(length) or length < 1:
        raise ValueError(f"length must be an integer >= 1, got {length!r}")
    return [0.0] * (length - 1) + [1.0]


def uniform_pmf(lo: int, hi: int) -> list[float]:
    """Lengths uniform on ``lo..hi`` (both included).

    >>> uniform_pmf(2, 3)
    [0.0, 0.5, 0.5]
    """
    if not _is_int(lo) or not _is_int(hi) or not 1 <= lo <= hi:
        raise ValueError(f"need integers 1 <= lo <= hi, got lo={lo!r}, hi={hi!r}")
    return [0.0] * (lo - 1) + [1.0 / (hi - lo + 1)] * (hi - lo + 1)


def geometric_pmf(mean: float, max_len: int | None = None, tail: float = 1e-12) -> list[float]:
    """Geometric lengths with the given mean: P(L = k) = (1 - p)^(k - 1) p with p = 1 / mean, the discrete
    cousin of an exponential (each step ends the request with probability p).

    With ``max_len`` the lengths are capped (a ``max_tokens`` limit): the mass of ``L >= max_len`` sits on
    ``max_len``. Without it the support is cut where the remaining mass drops below ``tail`` and that
    remainder is put on the last length.

    >>> geometric_pmf(2, max_len=3)
    [0.5, 0.25, 0.25]
    """
    if not isinstance(mean, numbers.Real) or isinstance(mean, bool) or not mean >= 1:
        raise ValueError(f"mean must be a number >= 1, got {mean!r}")
    if max_len is not None and (not _is_int(max_len) or max_len < 1):
        raise ValueError(f"max_len must be an integer >= 1 or None, got {max_len!r}")
    if not 0 < tail < 1:
        raise ValueError(f"tail must be in (0, 1), got {tail!r}")
    p = 1.0 / float(mean)
    q = 1.0 - p
    if max_len is None:  # smallest n with q^n <= tail
        max_len = 1 if q == 0.0 else max(1, math.ceil(math.log(tail) / math.log(q)))
    probs = [q ** (k - 1) * p for k in range(1, max_len)]
    probs.append(q ** (max_len - 1))  # P(L >= max_len)
    return probs
