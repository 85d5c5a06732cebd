"""Chapter 07's drills with numbers drawn per learner (``exercises.variants``); the notebook reaches them as
``_grade.drill_numbers()`` (``exercises.ch07``)."""

from __future__ import annotations

from servelab_autograder.exercises import variants

# ------------------------------------------------------------------------------------------------
# the drills' numbers, drawn per learner (exercises.variants): block size 16; a prompt whose last block is part-full
# and whose cached tokens are whole blocks, a decoding sequence whose last block is full (so len % 16 is 0), a
# Llama-3-8B-shaped cache

def _blocks(rng, n: int) -> list[int]:
    return rng.sample(range(64), n)


def _prefill(rng) -> dict:
    blocks = rng.randrange(2, 5)
    prompt = 16 * (blocks - 1) + rng.randrange(1, 16)
    return {"prompt": prompt, "table": _blocks(rng, blocks), "cached": 16 * rng.randrange(1, blocks),
            "second": rng.randrange(5, 41)}


def _decode(rng) -> dict:
    blocks = rng.randrange(2, 6)
    return {"length": 16 * blocks, "table": _blocks(rng, blocks)}


def _no_cache(rng) -> dict:
    return {"prompt": rng.randrange(200, 2001, 100), "new": rng.randrange(50, 401, 25)}


_PREFILL = "a {prompt}-token prompt has block table {table}, block size 16, and {cached} tokens cached"
_NO_CACHE = "a {prompt:,}-token prompt and {new} new tokens"
DRILLS = (
    variants.Variant("drill_1", {"prompt": 41, "table": [12, 5, 30], "cached": 32, "second": 20}, _prefill,
                     _PREFILL + ": what is the `slot_mapping` entry of its last prompt token?", key="prefill"),
    variants.Variant("drill_2", {"prompt": 41, "table": [12, 5, 30], "cached": 32, "second": 20}, _prefill,
                     "the same prefill step (" + _PREFILL + ") also schedules a second, uncached {second}-token prompt "
                     "whole: what is `cu_seqlens_k[-1]`?", key="prefill"),
    variants.Variant("drill_3", {"length": 48, "table": [3, 11, 6]}, _decode,
                     "a decoding sequence has {length} tokens, block table {table}, block size 16: what is its new "
                     "token's slot?"),
    variants.Variant("drill_4", {"gib": 40, "block": 16},
                     lambda rng: {"gib": rng.choice((8, 20, 24, 60)), "block": rng.choice((16, 32))},
                     "how many KV blocks of {block} tokens fit in {gib} GiB for Llama-3-8B (32 layers, 8 KV heads of "
                     "128, bf16)?"),
    variants.Variant("drill_5", {"prompt": 1000, "new": 200}, _no_cache,
                     "how many token positions does the model compute for " + _NO_CACHE + " with no KV cache?",
                     key="no_cache"),
    variants.Variant("drill_6", {"prompt": 1000, "new": 200}, _no_cache,
                     "how many times more is that than with a KV cache (" + _NO_CACHE + ")?", key="no_cache"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_1.table`` and so on."""
    return variants.show(DRILLS, who)
