"""Chapter 02's drills, three of them with numbers drawn per learner (``exercises.variants``); the notebook reaches
them as ``_grade.drill_numbers()`` (``exercises.ch02``). Drills 1 and 4 are traces of fixed small runs (the shape
table's A/B/C with one more block, and one preemption) that the learner reads step by step: their numbers stay the
workbook's. A system prompt is no multiple of the block size (so a hit stops at the last whole block).
"""

from __future__ import annotations

from servelab_autograder.exercises import variants


def _system(rng) -> dict:
    system = rng.randrange(200, 3001)
    while system % 16 == 0:
        system = rng.randrange(200, 3001)
    return {"system": system, "own_before": rng.randrange(5, 41), "own_now": rng.randrange(10, 101)}


def _fixed(numbers: dict):
    return lambda rng: dict(numbers)


DRILLS = (
    variants.Variant("drill_1", {"blocks": 6}, _fixed({"blocks": 6}),
                     "the same A/B/C requests and budget as the shape table, prefix caching off, but with {blocks} "
                     "blocks of 4 instead of 5: how many tokens are prefilled in total, over all prefill steps?"),
    variants.Variant("drill_2", {"system": 1000, "own_before": 24, "own_now": 50}, _system,
                     "a request whose prompt was a {system:,}-token system prompt followed by {own_before} other "
                     "tokens has finished; its blocks are freed but still hashed. A new request arrives: the same "
                     "system prompt followed by {own_now} tokens of its own. Block size 16, plenty of free blocks. "
                     "How many of the new request's tokens come from the prefix cache?"),
    variants.Variant("drill_3", {"prompt": 40}, lambda rng: {"prompt": rng.randrange(20, 101)},
                     "three requests share one {prompt}-token prompt; block size 16, a large budget, plenty of blocks. "
                     "R1 and R2 arrive together and are admitted in the same step; R3 arrives one step later. How "
                     "many prompt tokens are prefilled for the three together?"),
    variants.Variant("drill_4", {"a": 5, "b": 37}, _fixed({"a": 5, "b": 37}),
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
