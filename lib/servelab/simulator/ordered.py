"""`Ordered`: the budgeted mixed step whose running set is chosen again every step by a priority order, for the half
of a request's work that is not known on arrival, its output.

Each step, of the running and the waiting requests, the `min(max_num_seqs, max_num_batched_tokens)` first in the
order are resident; a running request outside them is preempted (parked: `simulate`'s `preemption` says whether its
KV is dropped or swapped to the host), and the waiting ones among them are admitted. Within the step it is
`MixedBudget`'s: decodes first (preempting the last in the order while KV is short, and then admitting nobody),
prompt chunks in the order, then admissions in the order while budget and KV allow. The orders (ties: request id):

* "fcfs": by request id, i.e. arrival. With KV to spare it makes `MixedBudget`'s steps.
* "mlfq": skip-join multi-level feedback queue (FastServe): by `servelab.analytic.ordering.mlfq_levels` of the
  prompt and the service attained, the most tokens of the request ever held in KV. Least attained service first,
  with levels, so the output length is never guessed; `levels=1` is "fcfs".
* "predicted": shortest predicted output first, by `predicted_output` (e.g. `ordering.predicted_lengths`).

The fast paths of `simulate` (mixed_fast, prefill_fast) never take this policy; docs/simulator.md has the rules.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np

from servelab.analytic.ordering import mlfq_levels
from servelab.simulator.policies import _check_limits, _with_admitted
from servelab.simulator.state import ServingState

__all__ = ["ORDERS", "Ordered"]

ORDERS = ("fcfs", "mlfq", "predicted")


@dataclass
class Ordered:
    """A resident set chosen by `order` every step (module docstring). `first_quantum` (tokens) and `levels` are the
    MLFQ's; `predicted_output[i]` is request i's predicted output length, for order="predicted"."""

    order: str = "mlfq"
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 32
    first_quantum: int = 4
    levels: int = 6
    prompt_tokens_per_step: int = 512
    predicted_output: np.ndarray | None = None
    name: str = field(default="ordered", compare=False)

    def __post_init__(self):
        _check_limits("Ordered", self.max_num_batched_tokens, self.max_num_seqs)
        if self.order not in ORDERS:
            raise ValueError(f"Ordered: order must be one of {ORDERS}, got {self.order!r}")
        for what in ("first_quantum", "levels", "prompt_tokens_per_step"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"Ordered: {what} must be an integer >= 1, got {v!r}")
        if (self.order == "predicted") != (self.predicted_output is not None):
            raise ValueError("Ordered: predicted_output is what order='predicted' sorts by, and only it")
        if self.predicted_output is not None:
            self.predicted_output = np.asarray(self.predicted_output, dtype=np.float64).ravel()
        self._state: ServingState | None = None
        self._attained = np.empty(0, dtype=np.int64)

    def _sorted(self, state: ServingState, ids: np.ndarray, queued: np.ndarray) -> np.ndarray:
        """`ids` in the order, first to last; `queued` says which of them wait (they go after the running ones of
        their level, as FastServe puts a batch's unfinished jobs back at the front of their queues)."""
        if self.order == "fcfs":
            return ids[np.lexsort((ids, queued))]
        if self.order == "mlfq":
            # service in decode steps: a prompt's first iteration is one per prompt_tokens_per_step of it (rounded
            # up), each output token one
            ptu, prompt, held = self.prompt_tokens_per_step, state.prompt_len[ids], self._attained[ids]
            first = -(-prompt // ptu)
            served = -(-np.minimum(held, prompt) // ptu) + np.maximum(held - prompt, 0)
            key = mlfq_levels(first, served, self.first_quantum, self.levels)
            return ids[np.lexsort((ids, queued, key))]
        return ids[np.lexsort((ids, self.predicted_output[ids]))]

    def schedule(self, state: ServingState) -> tuple[np.ndarray, np.ndarray]:
        if self._state is not state:                  # a new run: no service attained yet
            self._state, self._attained = state, np.zeros(state.prompt_len.size, dtype=np.int64)
        np.maximum(self._attained, state.computed, out=self._attained)
        cap = min(self.max_num_seqs, self.max_num_batched_tokens)
        waiting = np.fromiter(state.waiting, dtype=np.int64, count=len(state.waiting))
        ranked = self._sorted(state, np.concatenate([state.running, waiting]),
                              np.arange(state.running.size + waiting.size) >= state.running.size)
        rank = {int(i): k for k, i in enumerate(ranked)}
        # park the running requests that lost their place, the last in the order first
        for i in sorted((int(i) for i in state.running if rank[int(i)] >= cap), key=rank.get, reverse=True):
            state.preempt(i)
        short = False
        while True:                                   # decodes first, preempting the last in the order
            running = state.running
            decoding = running[state.reserved[running] < state.seq_len[running]]
            if state.kv_free >= decoding.size:
                break
            state.preempt(max((int(i) for i in running), key=rank.get))
            short = True
        state.reserved[decoding] += 1
        state.kv_free -= decoding.size

        remaining = state.seq_len[running] - state.computed[running]
        tokens = np.minimum(remaining, 1)
        budget = self.max_num_batched_tokens - running.size
        for j in sorted((remaining > 1).nonzero()[0], key=lambda j: rank[int(running[j])]):
            if budget == 0:
                break
            n = min(int(remaining[j]), budget + 1)    # its 1 token is already counted
            tokens[j] = n
            budget -= n - 1

        new_ids, new_tokens = [], []
        if not short:                                 # admissions in the order, never skipping one that does not fit
            queued = set(state.waiting)
            for i in ranked[:cap]:
                i = int(i)
                if i not in queued:
                    continue
                if budget == 0 or running.size + len(new_ids) >= cap or not state.can_admit(i):
                    break
                state.waiting.remove(i)
                state.admit(i)
                n = min(int(state.seq_len[i] - state.computed[i]), budget)
                budget -= n
                new_ids.append(i)
                new_tokens.append(n)
        return _with_admitted(state, running, tokens, new_ids, new_tokens)
