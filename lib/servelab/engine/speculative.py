"""Driving the speculative scheduler with a fake target model: greedy verification of each sequence's drafts
(`accept_greedy`), proposers for examples and tests (`oracle_proposer`), `SpecEngine` (the family's adapter to
`servelab.engine.driver.drive`), and `run_speculative` and `trace_speculative` over it.

>>> from servelab.engine.driver import expected
>>> sch = SpecScheduler(num_blocks=8, block_size=4, max_num_batched_tokens=16, num_speculative_tokens=3)
>>> a = Sequence([1, 2, 3], SamplingParams(max_tokens=7), name="A")
>>> sch.add(a)
>>> steps = run_speculative(sch, propose=oracle_proposer(expected([1, 2, 3], 7), accept=[2, 0, 3]))
>>> a.completion_token_ids == expected([1, 2, 3], 7), [n for n, _, _ in steps]  # 4 steps, not 1 + 6
(True, [3, 4, 3, 2])
"""

from __future__ import annotations

from collections.abc import Callable

from servelab.engine.driver import Engine, StepRecord, drive
from servelab.schedulers.spec_decode import SamplingParams, Sequence, SpecScheduler  # noqa: F401 - examples

__all__ = ["SpecEngine", "accept_greedy", "fake_target", "oracle_proposer", "run_speculative", "trace_speculative"]


def fake_target(tokens: list[int]) -> int:
    """servelab.engine.driver's fake model as a function of a sequence's tokens: the token it samples after them."""
    return (sum(tokens) * 31 + 7) % 1000


def accept_greedy(seq: Sequence, target: Callable[[list[int]], int] = fake_target) -> list[int]:
    """Greedy verification of `seq.draft_token_ids`: the drafts the target agrees with, then its own token at the
    first disagreement (or after the last draft). What plain greedy decoding would append, in one step."""
    context, out = list(seq.token_ids), []
    for draft in seq.draft_token_ids:
        t = target(context)
        out.append(t)
        if t != draft:
            return out
        context.append(t)
    out.append(target(context))
    return out


def oracle_proposer(truth: list[int], accept: list[int]) -> Callable[[Sequence, int], list[int]]:
    """A proposer for one sequence that knows the true continuation `truth` and gets `accept[j]` drafts right
    at its j-th proposal (cycling), then one wrong; for worked examples and tests."""
    calls = [0]

    def propose(seq: Sequence, k: int) -> list[int]:
        done = seq.num_completion_tokens
        right = accept[calls[0] % len(accept)]
        calls[0] += 1
        guess = truth[done:done + k]
        return [t if i < right else t + 1 for i, t in enumerate(guess)][:k]
    return propose


class SpecEngine(Engine):
    """The speculative family: before each schedule() the proposer drafts for the running sequences, and the
    model is greedy verification by `target`. Its decode records add `verified`, one dict per sequence (what
    `trace_speculative` lists)."""

    def __init__(self, scheduler: SpecScheduler, propose: Callable[[Sequence, int], list[int]],
                 target: Callable[[list[int]], int] = fake_target):
        super().__init__(scheduler)
        self.propose = propose
        self.target = target
        self._before: list[tuple] = []

    def schedule(self) -> StepRecord:
        sch = self.scheduler
        for seq in sch.running:
            seq.draft_token_ids = list(self.propose(seq, sch.max_drafts(seq)))[:sch.max_drafts(seq)]
        held = {seq.seq_id: len(seq.block_table) for seq in sch.running}
        record = super().schedule()
        # each sequence's blocks before, and its length, drafts, tokens computed and blocks after the look-ahead
        self._before = [(held.get(s.seq_id), len(s), len(s.draft_token_ids), s.num_scheduled_tokens,
                         len(s.block_table)) for s in record.batch]
        return record

    def forward(self, record: StepRecord) -> list[list[int]]:
        if record.is_prefill:
            return [[self.target(s.token_ids[:s.num_cached_tokens + s.num_scheduled_tokens])] for s in record.batch]
        return [accept_greedy(s, self.target) for s in record.batch]

    def postprocess(self, record: StepRecord, output: list[list[int]]) -> list[Sequence]:
        seqs = record.batch
        if record.is_prefill:
            return super().postprocess(record, output)
        accepted = [sum(1 for _ in _agree(s.draft_token_ids, t)) for s, t in zip(seqs, output)]
        finished = super().postprocess(record, output)
        rows = []
        for s, (held, n, d, computed, blocks), a, t in zip(seqs, self._before, accepted, output):
            done = s in finished
            before = blocks if held is None else held
            rows.append({"step": record.step, "seq": s.name, "len": n, "drafts": d, "accepted": a, "appended": len(t),
                         "computed": computed, "blocks_before": before, "taken": blocks - before,
                         "given_back": 0 if done else blocks - len(s.block_table),
                         "cached": s.num_cached_tokens, "finished": done})
        record.extra["verified"] = rows
        return finished


def run_speculative(scheduler: SpecScheduler, propose: Callable[[Sequence, int], list[int]],
                    target: Callable[[list[int]], int] = fake_target,
                    max_steps: int = 100_000) -> list[tuple[int, int, bool]]:
    """Drive `scheduler`: propose drafts for the running sequences, schedule, verify greedily, postprocess.
    Returns (tokens computed, sequences, is_prefill) per step."""
    trace = drive(SpecEngine(scheduler, propose, target), max_steps=max_steps)
    return [(r.num_batched_tokens, len(r.scheduled), r.is_prefill) for r in trace]


def trace_speculative(scheduler: SpecScheduler, propose: Callable[[Sequence, int], list[int]],
                      target: Callable[[list[int]], int] = fake_target) -> list[dict]:
    """`run_speculative`, recording each decode step of each sequence: its length before the step, drafts
    scheduled, drafts accepted, tokens appended (accepted + the bonus), tokens computed, the blocks it held
    before, took for the look-ahead and gave back in the rollback, and the tokens with KV after it. A finished
    sequence gives back all its blocks (`given_back` counts only the rollback's, 0 then)."""
    return [row for r in drive(SpecEngine(scheduler, propose, target)) for row in r.extra.get("verified", [])]


def _agree(drafts: list[int], tokens: list[int]):
    for d, t in zip(drafts, tokens):
        if d != t:
            return
        yield d
