"""Closed forms of queueing for serving: how busy a prefill server may run, spikes and their drain, dead work.

The prefill server is an M/G/1 queue: utilization rho = lambda * E[S], the Pollaczek-Khinchine mean wait and an
exponential wait tail; `utilization_limit` turns a TTFT target into the largest utilization that meets it at a
quantile. `drain_time`, `dead_requests`, `admit_by_deadline`, `retry_delay` and `retry_after` cover spikes, work
for clients who left, refusal on arrival, the client's backoff and the server's Retry-After. The formulas and where
they hold: docs/analytic.md.

>>> round(utilization_limit(target_s=0.8, service_s=0.1), 3)      # deterministic prefills of 100 ms, p99 TTFT 800 ms
0.697
>>> round(utilization_limit(target_s=0.8, service_s=0.1, cv2=1.0), 3)   # the same mean, exponential-like variance
0.455
"""

from __future__ import annotations

import math
import random

__all__ = ["MIN_RETRY_AFTER_S", "admit_by_deadline", "dead_requests", "drain_time", "mg1_mean_wait", "retry_after",
           "retry_delay", "ttft_quantile", "utilization_limit", "wait_quantile"]

MIN_RETRY_AFTER_S = 1       # the shortest Retry-After a refusal carries: "come back at once" would bring them all back


def _number(name: str, value, low: float = 0.0, high: float | None = None, open_high: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if value < low or (high is not None and (value >= high if open_high else value > high)):
        bound = f"[{low}, {high})" if open_high else f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be in {bound}, got {value!r}")
    return float(value)


def mg1_mean_wait(rho: float, service_s: float, cv2: float = 0.0) -> float:
    """Mean time in queue before service (Pollaczek-Khinchine): rho E[S] (1 + cv2) / (2 (1 - rho)).

    cv2 = 0 is M/D/1 (every prefill equally long), 1 is M/M/1. At rho = 0.7 and 100 ms prefills:

    >>> round(mg1_mean_wait(0.7, 0.1), 4), round(mg1_mean_wait(0.7, 0.1, cv2=1.0), 4)
    (0.1167, 0.2333)
    """
    rho = _number("rho (utilization)", rho, 0.0, 1.0, open_high=True)
    service_s, cv2 = _number("service_s", service_s), _number("cv2", cv2)
    return rho * service_s * (1 + cv2) / (2 * (1 - rho))


def wait_quantile(q: float, rho: float, mean_wait_s: float) -> float:
    """The q-quantile of the wait under the tail P(W > t) = rho exp(-rho t / E[W]): (E[W] / rho) ln(rho / (1 - q)),
    or 0 when at least a fraction q of requests find the server idle (rho <= 1 - q).

    >>> round(wait_quantile(0.99, 0.7, mg1_mean_wait(0.7, 0.1)), 4)
    0.7081
    """
    q = _number("q", q, 0.0, 1.0, open_high=True)
    rho = _number("rho (utilization)", rho, 0.0, 1.0, open_high=True)
    mean_wait_s = _number("mean_wait_s", mean_wait_s)
    if rho <= 1 - q or mean_wait_s == 0:
        return 0.0
    return mean_wait_s / rho * math.log(rho / (1 - q))


def ttft_quantile(q: float, rho: float, service_s: float, cv2: float = 0.0) -> float:
    """Time to first token at quantile q: the wait's quantile plus one prefill of the mean length (the prefill
    itself is not drawn at its own tail: one request's TTFT is dominated by the queue ahead of it)."""
    return wait_quantile(q, rho, mg1_mean_wait(rho, service_s, cv2)) + service_s


def utilization_limit(target_s: float, service_s: float, cv2: float = 0.0, q: float = 0.99) -> float:
    """The largest utilization rho at which ttft_quantile(q, rho, ...) <= target_s (the TTFT quantile only grows
    with rho, so it is found by bisection to 1e-9). 0 when even an idle server misses the target.

    >>> round(utilization_limit(0.8, 0.1), 3), round(utilization_limit(0.8, 0.1, q=0.9), 3)
    (0.697, 0.847)
    """
    target_s, service_s = _number("target_s", target_s), _number("service_s", service_s)
    if service_s == 0:
        raise ValueError("service_s must be > 0: a prefill takes some time")
    if target_s < service_s:
        return 0.0
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-9:
        mid = (lo + hi) / 2
        if ttft_quantile(q, mid, service_s, cv2) <= target_s:
            lo = mid
        else:
            hi = mid
    return lo


def drain_time(spike_rate: float, base_rate: float, capacity: float, spike_s: float) -> float:
    """Seconds after a spike ends until the queue it built is gone: the backlog (spike_rate - capacity) spike_s
    drains at capacity - base_rate. 0 when the spike stayed under capacity; inf when the base load alone
    fills the server.

    >>> drain_time(spike_rate=20, base_rate=5, capacity=10, spike_s=60)    # a one-minute spike at twice capacity
    120.0
    """
    spike_rate, base_rate = _number("spike_rate", spike_rate), _number("base_rate", base_rate)
    capacity, spike_s = _number("capacity", capacity), _number("spike_s", spike_s)
    backlog = max(0.0, spike_rate - capacity) * spike_s
    if backlog == 0:
        return 0.0
    if base_rate >= capacity:
        return math.inf
    return backlog / (capacity - base_rate)


def dead_requests(spike_rate: float, base_rate: float, capacity: float, spike_s: float, timeout_s: float) -> float:
    """Requests served after their client gave up, in a spike that an engine accepts whole (FCFS, no
    abandonment seen by the engine): a request arriving when the backlog is B waits B / capacity, so it is dead
    when B > timeout_s * capacity. The backlog grows during the spike and shrinks during the drain; the dead
    are the arrivals while it is above that line.

    >>> dead_requests(spike_rate=20, base_rate=5, capacity=10, spike_s=60, timeout_s=30)  # 600 + 300
    900.0
    """
    for name, v in (("spike_rate", spike_rate), ("base_rate", base_rate), ("capacity", capacity),
                    ("spike_s", spike_s), ("timeout_s", timeout_s)):
        _number(name, v)
    if base_rate >= capacity:
        raise ValueError(f"base_rate {base_rate} >= capacity {capacity}: the queue never drains")
    line = timeout_s * capacity                  # the backlog above which a new arrival's answer comes too late
    growth = spike_rate - capacity
    peak = max(0.0, growth) * spike_s
    if peak <= line:
        return 0.0
    t_cross = line / growth                      # during the spike, from here on arrivals are dead
    during = spike_rate * (spike_s - t_cross)
    after = base_rate * (peak - line) / (capacity - base_rate)   # while the drain brings it back to the line
    return during + after


def admit_by_deadline(backlog_tokens: int, prompt_tokens: int, prefill_tokens_per_s: float,
                      deadline_s: float) -> bool:
    """Admit a request only if its first token can come before its client's deadline: the prompt tokens queued
    ahead of it and its own, at the rate the engine prefills them.

    >>> admit_by_deadline(12_000, 2_000, prefill_tokens_per_s=10_000, deadline_s=1.5)    # 1.4 s: in time
    True
    >>> admit_by_deadline(14_000, 2_000, prefill_tokens_per_s=10_000, deadline_s=1.5)    # 1.6 s: refuse now
    False
    """
    _number("backlog_tokens", backlog_tokens), _number("prompt_tokens", prompt_tokens)
    rate = _number("prefill_tokens_per_s", prefill_tokens_per_s)
    if rate == 0:
        raise ValueError("prefill_tokens_per_s must be > 0")
    return (backlog_tokens + prompt_tokens) / rate <= _number("deadline_s", deadline_s)


def retry_delay(attempt: int, base_s: float, cap_s: float, rng: random.Random | None = None) -> float:
    """Seconds a refused client waits before retry number `attempt` (0 for the first retry): exponential backoff,
    min(cap_s, base_s * 2**attempt), and with `rng` "full jitter", a uniform draw below it, so that clients
    refused together spread out instead of coming back together.

    >>> [retry_delay(a, 0.5, 8.0) for a in range(6)]
    [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    """
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise ValueError(f"attempt must be an int >= 0, got {attempt!r}")
    ceiling = min(_number("cap_s", cap_s), _number("base_s", base_s) * 2.0 ** attempt)
    return ceiling if rng is None else rng.uniform(0.0, ceiling)


def retry_after(backlog_tokens: int, admit_line_tokens: int, prefill_tokens_per_s: float, jitter_s: float = 0.0,
                rng: random.Random | None = None) -> int:
    """The Retry-After of a 429, in whole seconds: the time the prompt tokens queued now take to drain, at the
    prefill rate, down to the backlog at which the admission rule admits again, plus (with `rng`) the server's
    jitter, one draw rng.uniform(0.0, jitter_s), so refused clients are told different times. HTTP's delay-seconds
    is a non-negative integer (RFC 9110, section 10.2.3): rounded up, and at least MIN_RETRY_AFTER_S (1 s).

    >>> retry_after(50_000, 20_000, prefill_tokens_per_s=12_000)        # 30,000 tokens to drain: 2.5 s
    3
    >>> retry_after(10_000, 20_000, 12_000), retry_after(44_000, 20_000, 12_000)    # below the line; exactly 2 s
    (1, 2)
    """
    backlog, line = _number("backlog_tokens", backlog_tokens), _number("admit_line_tokens", admit_line_tokens)
    rate, jitter_s = _number("prefill_tokens_per_s", prefill_tokens_per_s), _number("jitter_s", jitter_s)
    if rate == 0:
        raise ValueError("prefill_tokens_per_s must be > 0")
    wait = max(0.0, backlog - line) / rate
    if rng is not None:
        wait += rng.uniform(0.0, jitter_s)
    return max(MIN_RETRY_AFTER_S, math.ceil(wait))
