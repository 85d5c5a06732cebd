"""What a scheduling policy sees and changes: the queues, the per-request counters and the KV cache."""

from __future__ import annotations

from collections import deque

import numpy as np


class ServingState:
    """The queues and the KV cache, as a policy sees them.

    Per-request counters are numpy arrays indexed by request id: `seq_len` (prompt + tokens generated so
    far), `computed` (leading tokens with KV), `reserved` (KV slots held). `waiting` is a deque of ids,
    FCFS (under PrefillFirst its head may be part-prefilled); `running` is an int array of ids in
    admission order; `arrival_s` each request's arrival (zeros unless the loop passes them). A running
    sequence holds `reserved == seq_len` while its prompt is being prefilled and `reserved == seq_len - 1`
    between decodes: the token it sampled last has no KV yet.

    Under swap preemption (`swap`, a `preemption.Swap`, priced for `model`) a waiting sequence may hold KV on
    the host (`host_held > 0`, its `computed` kept); `admit` copies it back, and the copy time of the step's
    swaps accumulates in `step_swap_s`, which the loop adds to the step and resets.
    """

    def __init__(self, prompt_len: np.ndarray, output_len: np.ndarray, kv_capacity: int, swap=None, model=None,
                 arrival_s: np.ndarray | None = None):
        n = prompt_len.size
        self.prompt_len, self.output_len = prompt_len, output_len
        self.arrival_s = np.zeros(n) if arrival_s is None else arrival_s     # what an aging rule counts from
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
        # swap preemption (servelab.simulator.preemption): None means recompute, and none of this is used
        self.swap, self.model = swap, model
        self.host_kv_capacity = swap.pool_tokens(model) if swap is not None else 0
        self.host_kv_free = self.host_kv_capacity
        self.host_held = np.zeros(n, dtype=np.int64)          # host slots each swapped-out sequence holds
        self.swaps_out = np.zeros(n, dtype=np.int64)
        self.swaps_in = np.zeros(n, dtype=np.int64)
        self.swap_fallbacks = np.zeros(n, dtype=np.int64)     # victims recomputed because the host pool was full
        self.step_swap_s = 0.0                                # copy time of this step's swaps so far
        self.victim_tokens: list[int] = []                    # computed tokens of each preemption's victim

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
        if self.host_held[i]:                   # swapped out: copy its KV back in before this step runs
            self.step_swap_s += self.swap.seconds(self.model, self.computed[i])
            self.host_kv_free += int(self.host_held[i])
            self.host_held[i] = 0
            self.swaps_in[i] += 1

    def preempt_tail(self) -> int:
        """Preempt the most recently admitted running sequence: free its KV and put it at the front of the
        waiting queue. Recompute (the default) drops its KV; with swap preemption its KV is copied out to the
        host pool if it fits there (it keeps `computed`), else it is recomputed too. Returns its id."""
        return self.preempt(int(self.running[-1]))

    def preempt(self, i: int) -> int:
        """Preempt running sequence `i`, wherever it is in `running` (a priority policy's victim), exactly as
        `preempt_tail` preempts the last one. Returns `i`."""
        i = int(i)
        if self.running.size and self.running[-1] == i:
            self.running = self.running[:-1]
        else:
            keep = self.running != i
            if keep.all():
                raise ValueError(f"preempt: request {i} is not running")
            self.running = self.running[keep]
        self.kv_free += int(self.reserved[i])
        self.reserved[i] = 0
        self.victim_tokens.append(int(self.computed[i]))
        if self.swap is not None and self.computed[i] > 0:
            need = self.swap.host_tokens(self.computed[i])
            if need <= self.host_kv_free:
                self.host_kv_free -= need
                self.host_held[i] = need
                self.swaps_out[i] += 1
                self.step_swap_s += self.swap.seconds(self.model, self.computed[i])
            else:
                self.swap_fallbacks[i] += 1
                self.computed[i] = 0
        else:
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
