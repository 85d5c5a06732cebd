"""Chapter 05's drills with numbers drawn per learner (``exercises.variants``); the notebook reaches them as
``_grade.drill_numbers()`` (``exercises.ch05``). Each draw keeps the drill's sense: a pool that holds everything it is
said to hold, an eviction target between the two leaves (so evicting whole leaves, the least recently used one,
shows), and running requests whose reservation leaves room.
"""

from __future__ import annotations

from servelab_autograder.exercises import variants


def _pool(rng) -> dict:
    pool = rng.randrange(800, 2001, 100)
    system = rng.randrange(200, pool // 2, 10)
    return {"pool": pool, "system": system, "own": rng.randrange(10, 61, 5),
            "unlocked": rng.randrange(50, min(300, pool - system - 60) + 1, 10)}


def _evict(rng) -> dict:
    a = rng.randrange(10, 41)
    b = rng.randrange(a + 5, 71)
    return {"prompt": rng.randrange(50, 201, 10), "a": a, "b": b, "target": rng.randrange(a + 1, b)}


def _admission(rng) -> dict:
    running, left = rng.randrange(4, 21), rng.randrange(100, 801, 50)
    free = rng.randrange(1000, 5001, 500)
    while free <= running * left:                 # room is left beside the reservation
        free += 1000
    return {"free": free, "evictable": rng.randrange(250, 2001, 250), "running": running, "left": left}


_ADMISSION = {"free": 3000, "evictable": 1000, "running": 10, "left": 400}
DRILLS = (
    variants.Variant("drill_1", {"hot": 8}, lambda rng: {"hot": rng.randrange(4, 13)},
                     "the starvation workload with {hot} hot requests (H1..H{hot} arriving at steps 2, 4, ...): at "
                     "which step is L admitted under longest prefix first?"),
    variants.Variant("drill_2", {"pool": 1000, "system": 600, "own": 30, "unlocked": 200}, _pool,
                     "a pool of {pool:,} slots. A running request hit a cached {system}-token system prompt, which it "
                     "now locks, and holds {own} slots of its own. The tree also keeps {unlocked} unlocked tokens of "
                     "finished requests. How many slots can a new request that shares nothing be given at most "
                     "(free + evictable, no reservation)?"),
    variants.Variant("drill_3", {"prompt": 100, "a": 20, "b": 30, "target": 25}, _evict,
                     "nothing is locked. The tree holds a {prompt}-token prompt with two continuations: A's {a} tokens "
                     "and B's {b} tokens (B inserted after A). Then A is matched again and `evict({target})` runs. How "
                     "many tokens are left in the tree?"),
    variants.Variant("drill_4", _ADMISSION, _admission,
                     "SGLang's admission: {free:,} free slots and {evictable:,} evictable tokens; {running} running "
                     "requests may each still generate {left} tokens; `new_token_ratio` is 0.7. How many slots of "
                     "room does it see for a new request?", key="admission"),
    variants.Variant("drill_5", _ADMISSION, _admission,
                     "the same {running} requests ({left} tokens left each) after the ratio has decayed to its floor: "
                     "how many slots does the reservation hold back?", key="admission"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_1.hot`` and so on."""
    return variants.show(DRILLS, who)
