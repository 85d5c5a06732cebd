"""Chapter 02's scenarios: the workloads of requests nano-vllm's scheduler is run through, and their cases.

A scenario (:func:`scenario`) is a scheduler's settings and requests arriving before given steps. The chapter's
(the shape table's run, the tight-memory loop, one per scheduler pitfall, the prefix cache's) are the visible
checks' workloads; the grader adds random ones (``servelab_autograder.judge.checks.ch02``). :func:`cases_of` reads an
exercise's cases off the reference's recorded runs (``nanovllm_record.record``).
"""

from __future__ import annotations

import copy

from servelab.engine.driver import expected
from servelab_autograder.exercises.nanovllm_record import record


def scenario(label: str, num_blocks: int, block_size: int, budget: int, arrivals, max_num_seqs: int = 8,
             eos: int = -1, cache: bool = False) -> dict:
    """``arrivals``: [(step, [(name, prompt, max_tokens, ignore_eos), ...]), ...]."""
    return {"label": label, "config": {"num_blocks": num_blocks, "block_size": block_size,
                                       "max_num_batched_tokens": budget, "max_num_seqs": max_num_seqs, "eos": eos,
                                       "enable_prefix_caching": cache},
            "arrivals": [[step, [[n, list(p), m, ie] for n, p, m, ie in reqs]] for step, reqs in arrivals]}


def with_cache(sc: dict, cache: bool) -> dict:
    out = copy.deepcopy(sc)
    out["config"]["enable_prefix_caching"] = cache
    out["label"] += f", prefix caching {'on' if cache else 'off'}"
    return out


_RECORDS: dict = {}


def abc_run() -> dict:
    """The shape table's run: A, B, C with 6, 5 and 3 prompt tokens, 4 tokens each, 5 blocks of 4, budget 8."""
    reqs = [(n, [ord(n) * 100 + j for j in range(L)], 4, True) for n, L in [("A", 6), ("B", 5), ("C", 3)]]
    return scenario("the A/B/C shape table", 5, 4, 8, [(0, reqs)])


def tight_memory_run(bs: int) -> dict:
    """Five prompts of 3bs, 1, bs + 1, 2bs - 1 and bs tokens, each generating bs + 2, in 5 blocks of bs."""
    prompts = [list(range(i * 10000, i * 10000 + n)) for i, n in enumerate([3 * bs, 1, bs + 1, 2 * bs - 1, bs])]
    return scenario(f"the tight-memory loop at block size {bs}", 5, bs, bs + bs // 2,
                    [(0, [(str(i), p, bs + 2, True) for i, p in enumerate(prompts)])])


def pitfall_scenarios() -> list[dict]:
    """One small scenario per scheduler pitfall (prefix caching off)."""
    four = [(n, [ord(n) * 10 + j for j in range(4)], 3, True) for n in "ABCD"]
    eos_prompt = [5, 6, 7]
    return [
        # B does not fit in what A leaves of the budget: it must wait, neither cut nor run whole
        scenario("a second prefill that does not fit in the budget", 8, 4, 8,
                 [(0, [("A", list(range(6)), 2, True), ("B", [9] * 5, 2, True)])]),
        # A is decoding when B arrives: the step must be B's prefill alone
        scenario("a request arriving while another decodes", 8, 4, 8,
                 [(0, [("A", list(range(3)), 3, True)]), (1, [("B", [7, 8, 9], 2, True)])]),
        # 10 tokens, budget 6: a mid-chunk step, then the rest of the prompt
        scenario("a prompt longer than the budget (mid-chunk step)", 4, 4, 6, [(0, [("A", list(range(10)), 2, True)])]),
        # running [A, B, C, D], no free block, every one needs a block: D, then C must be preempted; E (2 blocks)
        # waits the whole time, so the preempted ones must go in front of it
        scenario("memory runs out with four sequences decoding", 4, 4, 16,
                 [(0, four), (1, [("E", [1, 2, 3, 4, 5], 1, True)])]),
        # A stops at eos after 2 tokens; B ignores eos
        scenario("a request that stops at eos", 6, 4, 8,
                 [(0, [("A", eos_prompt, 3, False), ("B", eos_prompt, 3, True)])], eos=expected(eos_prompt, 3)[1]),
        # B, the head of waiting, needs 3 blocks and 2 are free; C behind it would fit but must not jump ahead
        scenario("the head of waiting does not fit yet", 5, 4, 16,
                 [(0, [("A", list(range(9)), 4, True)]),
                  (1, [("B", list(range(9)), 3, True), ("C", [0, 1], 1, True)])]),
        # block size 1: every token opens a block
        scenario("block size 1", 12, 1, 4, [(0, [("A", [1, 2, 3], 3, True), ("B", [4, 5], 2, True)])]),
    ]


def cache_scenarios() -> list[dict]:
    """Prefix-cache scenarios (caching on): the chapter's three phenomena and one per can_allocate pitfall."""
    system = list(range(100, 110))
    return [
        scenario("a shared 10-token system prompt", 10, 4, 64,
                 [(0, [("A", system + [1, 2], 1, True)]), (1, [("B", system + [7, 8, 9], 2, True)])], cache=True),
        scenario("the same 8-token prompt twice (the last block is full)", 10, 4, 64,
                 [(0, [("A", list(range(8)), 1, True)]), (1, [("B", list(range(8)), 1, True)])], cache=True),
        scenario("two requests with the same prompt in the same step", 10, 4, 64,
                 [(0, [("A", list(range(9)), 2, True), ("B", list(range(9)), 2, True)]),
                  (1, [("C", list(range(9)), 2, True)])], cache=True),
        scenario("a preempted sequence comes back", 5, 4, 16,
                 [(0, [("A", list(range(7)), 3, True), ("B", list(range(50, 58)), 3, True)])], cache=True),
        # [3, 4] is cached as a first block (of X2) and [1, 2] as a first block (of X1); in B [3, 4] is the second
        # block, after [1, 2]: with chained hashes it is not a hit
        scenario("a block cached at another position", 10, 2, 64,
                 [(0, [("X1", [1, 2, 5], 1, True), ("X2", [3, 4, 5], 1, True)]),
                  (1, [("B", [1, 2, 3, 4, 9], 1, True)])],
                 cache=True),
        # A's two hashed blocks are freed; B holds the third; C hits both freed blocks but needs 3 free entries
        # (2 cached + 1 fresh) and only 2 are free: C must wait until B finishes
        scenario("hits on freed blocks when the free list is short", 3, 2, 64,
                 [(0, [("A", [1, 2, 3, 4, 5], 1, True)]), (1, [("B", [7], 3, True)]),
                  (2, [("C", [1, 2, 3, 4, 9], 1, True)])],
                 cache=True),
    ]


def visible_scenarios() -> list[dict]:
    """The chapter's workloads, one per pitfall and the prefix cache's: the visible checks' cases."""
    pitfalls = pitfall_scenarios()
    return [abc_run(), tight_memory_run(4), tight_memory_run(16), *pitfalls,
            *(with_cache(sc, True) for sc in pitfalls), with_cache(abc_run(), True), *cache_scenarios()]


def cases_of(exercise: str, scenarios) -> list[tuple]:
    """The cases of ``exercise`` (a method name, or "Scheduler" for the whole class) from reference runs."""
    out = []
    for sc in scenarios:
        rec = record(sc)
        if rec is None:
            continue
        if exercise == "Scheduler":
            label, sc, replay = rec["run"]
            out.append((label, sc, replay))
        else:
            out += [tuple(c) for c in rec[exercise]]
    return out


def rule_cases(block_sizes=(4, *range(1, 4), *range(5, 17), 32, 256)) -> list[tuple[int, int]]:
    return [(n, bs) for bs in block_sizes for n in range(1, 3 * bs + 3)]


def scheduler_scenarios() -> list[dict]:
    """The whole Scheduler's workloads (prefix caching off)."""
    return [abc_run(), *(tight_memory_run(bs) for bs in (4, 16, 256)), *pitfall_scenarios()]


__all__ = ["abc_run", "cache_scenarios", "cases_of", "pitfall_scenarios", "rule_cases", "scenario",
           "scheduler_scenarios", "tight_memory_run", "visible_scenarios", "with_cache"]
