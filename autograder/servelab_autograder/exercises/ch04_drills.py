"""Chapter 04's drills with numbers drawn per learner (``exercises.variants``); the notebook reaches them as
``_grade.drill_numbers()`` (``exercises.ch04``). Drills 1, 2 and 4 share one scenario (many requests on one system
prompt), drills 3 and 5 another (a system prompt whose length is no multiple of 16, so rounding to pages and to
blocks counts).
"""

from __future__ import annotations

from servelab_autograder.exercises import variants


def _shared(rng) -> dict:
    return {"requests": rng.randrange(50, 401, 10), "prompt": rng.randrange(500, 4001, 100)}


def _system(rng) -> dict:
    system = rng.randrange(300, 3001)
    while system % 16 == 0:
        system = rng.randrange(300, 3001)
    return {"system": system, "own_before": rng.randrange(5, 51), "own_now": rng.randrange(10, 101)}


_SHARED = {"requests": 200, "prompt": 1500}
_SYSTEM = {"system": 1000, "own_before": 20, "own_now": 50}
DRILLS = (
    variants.Variant("drill_1", _SHARED, _shared,
                     "{requests} requests share a {prompt:,}-token system prompt, each followed by its own question. "
                     "How many prefill tokens does the radix cache skip?", key="shared"),
    variants.Variant("drill_2", _SHARED, _shared,
                     "how many MiB of KV does one copy of that {prompt:,}-token prompt take in LLaMA-2-7B (fp16, 512 "
                     "KiB per token)?", key="shared"),
    variants.Variant("drill_3", _SYSTEM, _system,
                     "a request with a {system:,}-token system prompt and {own_before} tokens of its own has been "
                     "cached. A new request has the same system prompt and {own_now} tokens of its own. How many "
                     "more of its tokens does the radix cache (page size 1) reuse than a block-hash cache with "
                     "nano-vllm's 256-token blocks?", key="system"),
    variants.Variant("drill_4", _SHARED, _shared,
                     "the {requests} requests of drill 1 decode together. How many MiB of the shared {prompt:,}-token "
                     "prompt's KV does one decode step read with a plain paged attention kernel (each request reads "
                     "its own context)?", key="shared"),
    variants.Variant("drill_5", _SYSTEM, _system,
                     "drill 3's two requests ({system:,}-token system prompt) go through a radix cache with "
                     "`page_size = 16`. How many of the new request's tokens does it reuse?", key="system"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_1.requests`` and so on."""
    return variants.show(DRILLS, who)
