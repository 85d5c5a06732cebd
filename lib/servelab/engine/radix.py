"""Driving the radix scheduler with a fake model: `RadixEngine`, its step record and table, and a workload on
which longest-prefix-first starves a request.

    >>> sch = RadixScheduler(kv_capacity_tokens=64, max_num_batched_tokens=64)
    >>> system = list(range(100, 120))
    >>> a, b = Req(system + [1, 2], 2, name="A"), Req(system + [7], 2, name="B")
    >>> trace = RadixEngine(sch).run([a], arrivals={1: [b]})
    >>> [(r.kind, r.scheduled, r.cached) for r in trace[:2]]      # B hits the system prompt A inserted
    [('P', [('A', 22)], [('A', 0)]), ('P', [('B', 1)], [('B', 20)])]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from servelab.engine.driver import Engine, StepRecord
from servelab.engine.trace import Table, names_cell, pairs_cell
from servelab.schedulers.radix_scheduler import RadixScheduler, Req, TokenToKVPoolAllocator
from servelab.schedulers.scheduler import SequenceStatus

__all__ = ["TABLE_COLUMNS", "RadixEngine", "RadixStepRecord", "lpm_starvation", "radix_table", "slot_model"]


def slot_model(pool: TokenToKVPoolAllocator) -> Callable[[list[Req]], list[int]]:
    """`servelab.engine.driver.fake_model`, but it reads the context through the KV slots.

    For each request it first writes the tokens this step computes into their slots, then reads every slot
    of the request's row back. The sampled token is fake_model's formula over what it read, so a request
    whose row points at a slot holding someone else's token generates something else, and RuntimeError names
    the slot.
    """

    def model(reqs: list[Req]) -> list[int]:
        out = []
        for r in reqs:
            toks = r.token_ids
            lo, hi = r.num_cached_tokens, r.num_cached_tokens + r.num_scheduled_tokens
            for pos in range(lo, hi):
                pool.kv[r.kv_indices[pos]] = toks[pos]
            seen = [pool.kv[s] for s in r.kv_indices[:hi]]
            if seen != toks[:hi]:
                pos = next(i for i, (a, b) in enumerate(zip(seen, toks)) if a != b)
                raise RuntimeError(f"{r.name}: slot {r.kv_indices[pos]} holds the KV of token {seen[pos]} but "
                                   f"position {pos} of {r.name} is token {toks[pos]}")
            out.append((sum(seen) * 31 + 7) % 1000)
        return out

    return model


class RadixEngine(Engine):
    """The radix family: drives a RadixScheduler one step at a time (`servelab.engine.driver.drive`); by default
    the model reads the context through the KV slots (`slot_model`) and every step checks the pool's invariants.
    Its records add the free slots and the tree's evictable and protected tokens, read right after schedule()."""

    def __init__(self, scheduler: RadixScheduler, model: Callable[[list[Req]], list[int]] | None = None,
                 check: bool = True):
        super().__init__(scheduler, model if model is not None else slot_model(scheduler.token_to_kv_pool_allocator))
        self.check = check

    def schedule(self) -> StepRecord:
        sch = self.scheduler
        was_running = list(sch.running)
        reqs, is_prefill = sch.schedule()
        tree = sch.tree_cache
        return StepRecord(
            step=len(self.trace), is_prefill=is_prefill,
            scheduled=[(r.name, r.num_scheduled_tokens) for r in reqs],
            cached=[(r.name, r.num_cached_tokens) for r in reqs],    # the hit, at a prefill
            preempted=[r.name for r in was_running if r.status == SequenceStatus.WAITING],
            extra={"available": sch.token_to_kv_pool_allocator.available_size(),    # free slots
                   "evictable": tree.evictable_size(), "protected": tree.protected_size()},
            batch=reqs)

    def postprocess(self, record: StepRecord, output) -> list[Req]:
        finished = super().postprocess(record, output)
        if self.check:
            self.scheduler.check_invariants()
        return finished


RadixStepRecord = StepRecord   # the radix engine's record was its own class; the one StepRecord now


# --------------------------------------------------------------------------------------------------------
# the trace as a table

TABLE_COLUMNS = ("step", "kind", "scheduled (name:tokens)", "cached", "preempted", "finished", "free slots",
                 "evictable", "protected", "waiting", "running")


def radix_table(trace: Iterable[StepRecord], columns: Iterable[str] = TABLE_COLUMNS) -> Table:
    """One row per schedule() call: the batch, the hits, the pool's free slots and the tree's sizes.

    >>> sch = RadixScheduler(kv_capacity_tokens=32, max_num_batched_tokens=32)
    >>> t = RadixEngine(sch).run([Req([1, 2, 3], 1, name="A")], arrivals={1: [Req([1, 2, 9], 1, name="B")]})
    >>> print(radix_table(t, ("step", "kind", "scheduled (name:tokens)", "cached", "free slots", "evictable")))
    step | kind | scheduled (name:tokens) | cached | free slots | evictable
    -----+------+-------------------------+--------+------------+----------
    0    | P    | A:3                     | A:0    | 29         | 0
    1    | P    | B:1                     | B:2    | 28         | 1
    """
    rows = [(str(r.step), r.kind, pairs_cell(r.scheduled), pairs_cell(r.cached), names_cell(r.preempted),
             names_cell(r.finished), str(r.available), str(r.evictable), str(r.protected), names_cell(r.waiting),
             names_cell(r.running))
            for r in trace]
    return Table(TABLE_COLUMNS, rows, columns)


# --------------------------------------------------------------------------------------------------------
# a workload on which longest-prefix-first starves a request


def lpm_starvation(policy: str, n_hot: int = 8, system_len: int = 32) -> tuple[list[StepRecord], int]:
    """One request at a time (max_num_seqs=1). Hot requests H0..H{n_hot} share a `system_len`-token
    system prompt; H0 arrives at step 0 and H1, H2, ... every 2 steps from step 2. L, which shares nothing,
    arrives at step 1. Each request runs 3 steps (a prefill and 2 decodes), so hot requests arrive faster than
    they are served. Returns (trace, the step at which L is admitted).

    Under FCFS, L goes right after H0. Under LPM every waiting H matches the system prompt and L matches
    nothing, so each pass sorts every H ahead of L, and L waits for the stream to dry up.

    >>> lpm_starvation("fcfs", n_hot=4)[1], lpm_starvation("lpm", n_hot=4)[1]
    (3, 15)
    """
    sch = RadixScheduler(kv_capacity_tokens=512, max_num_batched_tokens=512, max_num_seqs=1, policy=policy)
    system = list(range(2000, 2000 + system_len))
    hot = lambda i: Req(system + [3000 + i] * 4, 3, name=f"H{i}")
    arrivals = {0: [hot(0)], 1: [Req([4000 + j for j in range(24)], 3, name="L")]}
    for i in range(1, n_hot + 1):
        arrivals[2 * i] = [hot(i)]
    trace = RadixEngine(sch).run(arrivals=arrivals)
    admitted = next(r.step for r in trace if r.is_prefill and any(n == "L" for n, _ in r.scheduled))
    return trace, admitted
