"""Admission control: a rule asked about each request as it arrives, and the Retry-After its refusal carries."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from servelab.analytic import queueing
from servelab.simulator.arrivals import _is_int
from servelab.simulator.state import ServingState


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
    servelab.analytic.costmodel.max_backlog_tokens derives from the TTFT and TPOT targets); reject it otherwise.

    >>> BacklogAdmission(64_000).max_backlog_tokens
    64000
    """

    max_backlog_tokens: int

    def __post_init__(self):
        if not _is_int(self.max_backlog_tokens) or self.max_backlog_tokens < 0:
            raise ValueError(f"max_backlog_tokens must be an integer >= 0, got {self.max_backlog_tokens!r}")

    def __call__(self, state: ServingState, i: int) -> bool:
        return prefill_backlog(state) + int(state.prompt_len[i]) <= self.max_backlog_tokens


@dataclass(frozen=True)
class RetryAfter:
    """`rule`, whose refusals carry a Retry-After header: queueing.retry_after of the live backlog
    (`prefill_backlog(state)`) down to `admit_line_tokens` at `prefill_tokens_per_s`, plus the server's jitter, a
    uniform draw below `jitter_s` from a `random.Random(seed)` per simulation (none when `jitter_s` is 0). Clients
    that honour it (`Clients(..., honour_retry_after=True)`) wait max(their backoff, Retry-After).

    >>> RetryAfter(BacklogAdmission(64_000), 48_000, 60_000.0, jitter_s=4.0).jitter_s
    4.0
    """

    rule: Admission
    admit_line_tokens: int
    prefill_tokens_per_s: float
    jitter_s: float = 0.0
    seed: int = 0

    def __post_init__(self):
        if not callable(self.rule):
            raise ValueError(f"rule must be an admission rule (state, request id) -> bool, got {self.rule!r}")
        if not _is_int(self.admit_line_tokens) or self.admit_line_tokens < 0:
            raise ValueError(f"admit_line_tokens must be an integer >= 0, got {self.admit_line_tokens!r}")
        for name, v, positive in (("prefill_tokens_per_s", self.prefill_tokens_per_s, True),
                                  ("jitter_s", self.jitter_s, False)):
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0 \
                    or (positive and v == 0):
                raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {v!r}")

    def __call__(self, state: ServingState, i: int) -> bool:
        return self.rule(state, i)

    def rng(self) -> random.Random | None:
        """The server's jitter generator for one simulation (None without jitter)."""
        return random.Random(self.seed) if self.jitter_s > 0 else None

    def seconds(self, state: ServingState, rng: random.Random | None) -> int:
        """The Retry-After of a refusal made now, in whole seconds."""
        return queueing.retry_after(prefill_backlog(state), self.admit_line_tokens, self.prefill_tokens_per_s,
                                    self.jitter_s, rng)
