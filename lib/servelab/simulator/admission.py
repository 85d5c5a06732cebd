"""Admission control: a rule asked about each request as it arrives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

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
