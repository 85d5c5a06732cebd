"""Driving the speculative scheduler with a fake target model: greedy verification of each sequence's drafts
(`accept_greedy`), proposers for examples and tests (`oracle_proposer`), and the loops `run_speculative` and
`trace_speculative`.

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

from servelab.schedulers.spec_decode import SamplingParams, Sequence, SpecScheduler  # noqa: F401 - examples

__all__ = ["accept_greedy", "fake_target", "oracle_proposer", "run_speculative", "trace_speculative"]


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


def run_speculative(scheduler: SpecScheduler, propose: Callable[[Sequence, int], list[int]],
                    target: Callable[[list[int]], int] = fake_target,
                    max_steps: int = 100_000) -> list[tuple[int, int, bool]]:
    """Drive `scheduler`: propose drafts for the running sequences, schedule, verify greedily, postprocess.
    Returns (tokens computed, sequences, is_prefill) per step."""
    steps = []
    while not scheduler.is_finished():
        if len(steps) >= max_steps:
            raise RuntimeError(f"not finished after {max_steps} steps")
        for seq in scheduler.running:
            seq.draft_token_ids = list(propose(seq, scheduler.max_drafts(seq)))[:scheduler.max_drafts(seq)]
        seqs, is_prefill = scheduler.schedule()
        steps.append((sum(s.num_scheduled_tokens for s in seqs), len(seqs), is_prefill))
        if is_prefill:
            out = [[target(s.token_ids[:s.num_cached_tokens + s.num_scheduled_tokens])] for s in seqs]
        else:
            out = [accept_greedy(s, target) for s in seqs]
        scheduler.postprocess(seqs, out, is_prefill)
    return steps


def trace_speculative(scheduler: SpecScheduler, propose: Callable[[Sequence, int], list[int]],
                      target: Callable[[list[int]], int] = fake_target) -> list[dict]:
    """`run_speculative`, recording each decode step of each sequence: its length before the step, drafts
    scheduled, drafts accepted, tokens appended (accepted + the bonus), tokens computed, the blocks it held
    before, took for the look-ahead and gave back in the rollback, and the tokens with KV after it. A finished
    sequence gives back all its blocks (`given_back` counts only the rollback's, 0 then)."""
    rows, step = [], 0
    while not scheduler.is_finished():
        for seq in scheduler.running:
            seq.draft_token_ids = list(propose(seq, scheduler.max_drafts(seq)))[:scheduler.max_drafts(seq)]
        held = {seq.seq_id: len(seq.block_table) for seq in scheduler.running}
        seqs, is_prefill = scheduler.schedule()
        if is_prefill:
            out = [[target(s.token_ids[:s.num_cached_tokens + s.num_scheduled_tokens])] for s in seqs]
            scheduler.postprocess(seqs, out, is_prefill)
            step += 1
            continue
        before = [(len(s), len(s.draft_token_ids), s.num_scheduled_tokens, len(s.block_table)) for s in seqs]
        out = [accept_greedy(s, target) for s in seqs]
        accepted = [sum(1 for _ in _agree(s.draft_token_ids, t)) for s, t in zip(seqs, out)]
        finished = scheduler.postprocess(seqs, out, is_prefill)
        for s, (n, d, computed, blocks), a, t in zip(seqs, before, accepted, out):
            done = s in finished
            rows.append({"step": step, "seq": s.name, "len": n, "drafts": d, "accepted": a, "appended": len(t),
                         "computed": computed, "blocks_before": held.get(s.seq_id, blocks),
                         "taken": blocks - held.get(s.seq_id, blocks),
                         "given_back": 0 if done else blocks - len(s.block_table),
                         "cached": s.num_cached_tokens, "finished": done})
        step += 1
    return rows


def _agree(drafts: list[int], tokens: list[int]):
    for d, t in zip(drafts, tokens):
        if d != t:
            return
        yield d
