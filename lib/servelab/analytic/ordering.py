"""Orders for the two halves of a request's work: the prompt, known on arrival, and the output, known only at the end.

* Skip-join multi-level feedback queue (FastServe, Wu et al. 2023, arXiv 2305.05920; the rule as the authors' code
  states it, LLMServe/FastServe `fastserve/scheduler.py`, class `MLFQ`, `add_request` and `pop_finished_requests`):
  level k's quantum is `first_quantum * 2**k`; a job joins the first level whose quantum holds its first iteration
  (the prompt), skipping the levels above, and moves down one level each time its service at a level passes that
  level's quantum. Here service is counted in tokens computed for the request (a prompt token and an output token
  count one each), and the last of `levels` levels keeps whatever reaches it.
* Aging for shortest-prompt-first: `aged_priority`, the prompt tokens still to compute minus `aging_rate` times the
  seconds waited since arrival, smallest first.
* Output-length prediction with a multiplicative log-normal error: `predicted_lengths`.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["aged_priority", "aging_rate_to_overtake", "mlfq_entry_level", "mlfq_level", "mlfq_levels", "mlfq_quantum",
           "predicted_lengths"]


def _count(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def mlfq_quantum(level: int, first_quantum: int) -> int:
    """Tokens of service level `level` grants before a job moves down: first_quantum x 2**level.

    >>> [mlfq_quantum(k, 64) for k in range(4)]
    [64, 128, 256, 512]
    """
    return _count("first_quantum", first_quantum, 1) << _count("level", level, 0)


def mlfq_entry_level(first_iteration: int, first_quantum: int, levels: int) -> int:
    """Skip-join: the first level (0 is the highest priority) whose quantum holds the job's first iteration,
    `first_iteration` tokens (its prompt); the last level, levels - 1, if none does.

    >>> mlfq_entry_level(100, 64, 8), mlfq_entry_level(128, 64, 8), mlfq_entry_level(32768, 64, 4)
    (1, 1, 3)
    """
    first_iteration = _count("first_iteration", first_iteration, 0)
    q, levels = _count("first_quantum", first_quantum, 1), _count("levels", levels, 1)
    level = 0
    while level < levels - 1 and q << level < first_iteration:
        level += 1
    return level


def mlfq_level(first_iteration: int, attained: int, first_quantum: int, levels: int) -> int:
    """The level of a job that joined by skip-join (`mlfq_entry_level`) and has been served `attained` tokens in
    all (its first iteration included): at each level from its entry on it may take that level's quantum, and
    once its service there passes the quantum it moves down one; the last level keeps it.

    >>> mlfq_level(100, 100, 64, 8), mlfq_level(100, 128, 64, 8), mlfq_level(100, 129, 64, 8)
    (1, 1, 2)
    >>> mlfq_level(100, 128 + 256 + 1, 64, 8), mlfq_level(100, 10**9, 64, 4)
    (3, 3)
    """
    attained = _count("attained", attained, 0)
    level = mlfq_entry_level(first_iteration, first_quantum, levels)
    used = first_quantum << level                  # service by the end of this level's quantum
    while level < levels - 1 and attained > used:
        level += 1
        used += first_quantum << level
    return level


def aged_priority(remaining_prompt_tokens, waited_s, aging_rate: float):
    """Shortest-prompt-first with aging: the prompt tokens still to compute minus aging_rate (tokens a second)
    times the seconds waited since arrival; the smallest goes first. With aging_rate 0 it is shortest-prompt-first;
    a prompt of P tokens has priority <= 0, ahead of every newcomer, after P / aging_rate seconds.

    >>> aged_priority(32768, 2.0, 4096.0), aged_priority(256, 0.0, 4096.0)
    (24576.0, 256.0)
    """
    if not isinstance(aging_rate, numbers.Real) or not aging_rate >= 0:
        raise ValueError(f"aging_rate must be a number >= 0 (tokens a second), got {aging_rate!r}")
    return remaining_prompt_tokens - aging_rate * waited_s


def aging_rate_to_overtake(prompt_tokens: int, newcomer_tokens: int, wait_s: float) -> float:
    """The smallest aging rate (tokens a second) at which a prompt of `prompt_tokens` that has waited `wait_s` seconds
    is ahead of (or ties) a newcomer of `newcomer_tokens` arriving now: (prompt - newcomer) / wait, 0 if it is not
    longer.

    >>> aging_rate_to_overtake(32768, 256, 8.0)
    4064.0
    """
    if not isinstance(wait_s, numbers.Real) or not wait_s > 0:
        raise ValueError(f"wait_s must be a number of seconds > 0, got {wait_s!r}")
    return max(0.0, (prompt_tokens - newcomer_tokens) / wait_s)


def predicted_lengths(output_len, sigma: float, seed: int = 0) -> np.ndarray:
    """Output lengths as a predictor would guess them: each true length times exp(sigma x N(0, 1)), a
    multiplicative log-normal error (sigma 0: the true lengths; sigma 1: a factor of e either way one time in
    three), drawn from `seed`. Floats.

    >>> predicted_lengths([10, 200], 0.0).tolist()
    [10.0, 200.0]
    """
    if not isinstance(sigma, numbers.Real) or not sigma >= 0:
        raise ValueError(f"sigma must be a number >= 0, got {sigma!r}")
    out = np.asarray(output_len, dtype=np.float64)
    return out * np.exp(sigma * np.random.default_rng(seed).standard_normal(out.shape))


def mlfq_levels(first_iteration, attained, first_quantum: int, levels: int) -> np.ndarray:
    """`mlfq_level` of many jobs at once (int arrays of first iterations and attained service), for a scheduler
    that orders its queue every step.

    >>> mlfq_levels([100, 100, 100, 32768], [100, 129, 385, 40000], 64, 8).tolist()
    [1, 2, 3, 7]
    """
    q, levels = _count("first_quantum", first_quantum, 1), _count("levels", levels, 1)
    first = np.asarray(first_iteration, dtype=np.int64)
    served = np.asarray(attained, dtype=np.int64)
    entry = np.zeros(first.shape, dtype=np.int64)
    for k in range(levels - 1):                      # levels whose quantum is below the first iteration
        entry += (q << k) < first
    level = entry.copy()
    for k in range(levels - 1):                      # service past the quanta of levels entry..k: below k + 1
        level += (k >= entry) & (served > q * ((2 << k) - (1 << entry)))
    return level
