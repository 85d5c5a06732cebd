"""Workloads for the simulator: arrival times (seconds), prompt and output lengths, and `Requests`."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np


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
