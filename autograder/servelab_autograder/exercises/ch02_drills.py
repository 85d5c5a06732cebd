"""Chapter 02's drills, with numbers drawn per learner (``exercises.variants``); the notebook reaches them as
``_grade.drill_numbers()`` (``exercises.ch02``). Each range keeps the question's premise for every draw:

- drill 1 scales "Why it matters"'s tight-memory run to blocks of ``bs`` (every length a multiple of the block, plus
  one): the run keeps its shape, three preemptions, from 3 tokens a block up (at 2 a block a sequence finishes first);
- drill 4's B (``b`` prompt tokens) takes the last free block before A's 9th token needs one, and needs no new one of
  its own until then: ``25 + a <= b <= 32 + a``, and at most 39, so B can grow by its 10 tokens within 6 blocks of 8;
- a system prompt is no multiple of the block size (so a hit stops at the last whole block).

The grading table (``judge/checks/ch02.py``) recomputes each answer with nano-vllm's scheduler and checks the premise.
"""

from __future__ import annotations

from servelab_autograder.exercises import variants


def _system(rng) -> dict:
    system = rng.randrange(200, 3001)
    while system % 16 == 0:
        system = rng.randrange(200, 3001)
    return {"system": system, "own_before": rng.randrange(5, 41), "own_now": rng.randrange(10, 101)}


def _tight_block(rng) -> dict:
    bs = rng.randrange(3, 33)
    while bs == 4:                  # the run "Why it matters" prints
        bs = rng.randrange(3, 33)
    return {"bs": bs}


def _two_requests(rng) -> dict:
    a = rng.randrange(2, 8)
    return {"a": a, "b": rng.randrange(25 + a, min(32 + a, 39) + 1)}


DRILLS = (
    variants.Variant("drill_1", {"bs": 8}, _tight_block,
                     "the tight-memory run of \"Why it matters\" (tight_memory(bs): five prompts of 3bs, 1, bs + 1, "
                     "2bs - 1 and bs tokens, each generating bs + 2; 5 blocks of bs tokens; a budget of 6 tokens a "
                     "step; prefix caching off) with blocks of bs = {bs} tokens instead of 4: how many tokens are "
                     "prefilled in total, over all prefill steps?"),
    variants.Variant("drill_2", {"system": 1000, "own_before": 24, "own_now": 50}, _system,
                     "a request whose prompt was a {system:,}-token system prompt followed by {own_before} other "
                     "tokens has finished; its blocks are freed but still hashed. A new request arrives: the same "
                     "system prompt followed by {own_now} tokens of its own. Block size 16, plenty of free blocks. "
                     "How many of the new request's tokens come from the prefix cache?"),
    variants.Variant("drill_3", {"prompt": 40}, lambda rng: {"prompt": rng.randrange(20, 101)},
                     "three requests share one {prompt}-token prompt; block size 16, a large budget, plenty of blocks. "
                     "R1 and R2 arrive together and are admitted in the same step; R3 arrives one step later. How "
                     "many prompt tokens are prefilled for the three together?"),
    variants.Variant("drill_4", {"a": 5, "b": 37}, _two_requests,
                     "A (a {a}-token prompt, generating 16) is decoding when B (a {b}-token prompt, generating 10) "
                     "arrives one step later; 6 blocks of 8 tokens, a budget of 64, prefix caching off. When A's 9th "
                     "token needs a block and none is free, nano-vllm preempts B. How many tokens does B's second "
                     "prefill compute?"),
    variants.Variant("drill_5", {"block": 256}, lambda rng: {"block": rng.choice((64, 128, 512, 1024))},
                     "the requests of \"Why paged KV at all\", in blocks of {block} tokens: how many fit at once?"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_2.system`` and so on."""
    return variants.show(DRILLS, who)
