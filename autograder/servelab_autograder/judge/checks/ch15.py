"""Chapter 15's grading table: each test cell, the exercise it grades and its cases; the drills' answers.

Fixed cases come first (the notebook's and the visible asserts', then one for each pitfall, then edge cases): the
pitfall atlas of the learner-facing module is made from them. The random ones are drawn from the run's seed.
Arguments are plain data made by ``ch15.case`` (a ring as a list of (point, worker) tuples, the thresholds' defaults
filled in).

What the sandbox's library lacks while this chapter grades (``references``), and what stays:

- the four functions of ``servelab.analytic.routing`` the exercises are, and ``shared_prefix_hit_rate`` (drill 4 in
  one call); ``cache_aware_pick`` is also what ``CacheAware.pick`` in ``servelab.simulator.replicas`` calls, so the
  simulator's cache-aware router cannot answer the exercise either.
- ``build_ring``, ``stable_hash`` and the workloads stay: the visible asserts build a ring with them, and they are
  not an exercise.

Every cell that runs the simulator or the library's references (the routers on the hot workload, the trace, the two
workloads, the threshold sweep, the resize) is a demo: not run while grading. setup_1 (imports) runs as it is.
"""

from __future__ import annotations

import math
import random

from servelab.analytic import costmodel, routing
from servelab.analytic.costmodel import H100_SXM, LLAMA31_8B
from servelab.analytic.serving import ServingPoint
from servelab_autograder import paths
from servelab_autograder.exercises import ch15
from servelab_autograder.judge import known_wrong
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise, no_point

S = ch15.SPECS
case = ch15.case
R3 = [(10, 0), (20, 1), (30, 2)]
R2 = [(10, 0), (20, 1)]


def _pitfall(name: str) -> str:
    """A pitfall's message as its patch writes it (a drill's wrong answer that the exercise's mistake makes)."""
    return known_wrong.load(known_wrong.folder(paths.repo_root(), ch15.ASSIGNMENT) / f"{name}.diff").message


def _random_ring(rng: random.Random, n: int, vnodes: int) -> list:
    points = rng.sample(range(1000), n * vnodes)
    workers = [w for w in range(n) for _ in range(vnodes)]
    rng.shuffle(workers)
    return sorted(zip(points, workers))


# ------------------------------------------------------------------------------------------------
# ring_owner


def _owner_fixed():
    big = routing.build_ring(4, 64)
    return [case("ring_owner", R3, 15), case("ring_owner", R3, 20), case("ring_owner", R3, 0),
            case("ring_owner", R3, 30), case("ring_owner", R3, 31),          # past the last point: wraps
            case("ring_owner", big, routing.stable_hash(0)),
            case("ring_owner", [(5, 3)], 9), case("ring_owner", [(5, 3)], 1),  # one point owns the circle
            case("ring_owner", [(10, 1), (40, 0), (70, 2), (90, 1)], 95),
            case("ring_owner", [(10, 1), (40, 0), (70, 2), (90, 1)], 41),
            case("ring_owner", [(10, 1), (40, 0), (70, 2), (90, 1)], 69)]


def _owner_random(rng: random.Random):
    out = []
    for _ in range(150):
        ring = _random_ring(rng, rng.randint(1, 6), rng.randint(1, 8))
        points = [p for p, _ in ring]
        key = rng.choice([rng.randint(0, 1000), rng.choice(points), points[-1] + 1, points[0] - 1, 1000])
        out.append(case("ring_owner", ring, key))
    return out


# ------------------------------------------------------------------------------------------------
# bounded_owner


def _bounded_fixed():
    # first the case each pitfall alone gets wrong (its first failure names it), then the notebook's, then edges
    return [case("bounded_owner", R2, 5, [1, 0], 2.0),      # the cap counts the request being placed
            case("bounded_owner", R3, 5, [1, 2, 0], 1.25),  # ceil, not floor
            case("bounded_owner", R2, 5, [2, 1], 1.0),      # at the cap is full
            case("bounded_owner", R3, 5, [3, 0, 0], 1.25), case("bounded_owner", R3, 25, [0, 0, 0], 1.25),
            case("bounded_owner", R2, 5, [2, 2], 1.0),
            case("bounded_owner", R2, 15, [3, 3], 1.0),     # floor would leave nobody below the cap
            case("bounded_owner", R3, 35, [4, 0, 0], 1.5),  # past the last point, and full: walk on from the first
            case("bounded_owner", R3, 25, [0, 0, 9], 2.0),  # the walk wraps to the first worker
            case("bounded_owner", [(10, 0), (20, 1), (30, 0), (40, 1)], 15, [5, 5], 1.25),
            case("bounded_owner", routing.build_ring(4, 8), routing.stable_hash("k"), [7, 7, 7, 0], 1.0),
            case("bounded_owner", [(10, 0)], 50, [9], 1.0),
            # a walk past 1,100 points of a full worker: the walk goes round the whole ring if it must
            case("bounded_owner", [(p, 0) for p in range(1100)] + [(1100, 1)], 0, [5, 0], 1.0)]


def _bounded_random(rng: random.Random):
    out = []
    for _ in range(150):
        n = rng.choice([1, 2, 4, 8])       # powers of two: the cap's float arithmetic is exact in any order
        ring = _random_ring(rng, n, rng.randint(1, 6))
        loads = [rng.choice([0, rng.randint(0, 12)]) for _ in range(n)]
        out.append(case("bounded_owner", ring, rng.randint(0, 1000), loads, rng.choice([1.0, 1.25, 1.5, 2.0, 3.0])))
    return out


# ------------------------------------------------------------------------------------------------
# cache_aware_pick


def _pick_fixed():
    return [case("cache_aware_pick", [100, 10], [50, 0], 100, [500, 900]),
            case("cache_aware_pick", [30, 10], [50, 0], 100, [500, 900]),    # one threshold only: balanced
            case("cache_aware_pick", [20, 10], [20, 0], 100, [900, 500]),    # a length of 20 is not a rate
            case("cache_aware_pick", [12, 10], [0, 0], 100, [100, 900]),     # the smallest tree, not the least load
            case("cache_aware_pick", [20, 10], [20, 0], 100, [100, 900]),
            case("cache_aware_pick", [5, 5], [0, 0], 0, [7, 3]),             # an empty request
            case("cache_aware_pick", [20, 10], [20, 0], 100, [900, 500], cache_threshold=0.1),
            case("cache_aware_pick", [70, 5, 9], [90, 0, 0], 100, [5, 9, 1]),     # 65 > 64 and 70 > 7.5
            case("cache_aware_pick", [69, 5, 9], [90, 0, 0], 100, [5, 9, 1]),     # 64 is not above 64
            case("cache_aware_pick", [90, 61, 80], [0, 90, 0], 100, [5, 9, 1]),   # 90 < 61 x 1.5
            case("cache_aware_pick", [0, 0, 0], [30, 0, 0], 100, [9, 5, 5]),      # 0.3 is not above 0.3
            case("cache_aware_pick", [3, 3, 3], [31, 31, 0], 100, [9, 5, 5]),     # tie: the first best match
            case("cache_aware_pick", [3, 1, 1], [0, 0, 0], 10, [4, 4, 4]),        # tie: the first smallest tree
            case("cache_aware_pick", [200, 0, 0], [90, 0, 0], 100, [5, 9, 1]),    # the first least loaded
            case("cache_aware_pick", [40, 20], [100, 0], 100, [5, 5], balance_abs_threshold=16,
                 balance_rel_threshold=1.1),
            case("cache_aware_pick", [300, 200], [90, 0], 100, [1, 9]),      # 300 is not above 200 x 1.5
            case("cache_aware_pick", [280, 200], [90, 0], 100, [1, 9]),      # 80 apart, but 280 < 200 x 1.5
            *_defaults()]


def _defaults():
    """Cases that leave the thresholds out: the function's own defaults (0.3, 64, 1.5) are graded on them."""
    d = ch15.spec.DEFAULT
    return [(loads, matches, 100, sizes, d, d, d) for loads, matches, sizes in (
        ([50, 60], [50, 0], [900, 500]),      # 0.5 is above 0.3
        ([50, 60], [0, 0], [900, 500]),       # 0 is not
        ([70, 5], [90, 0], [1, 9]),           # 65 apart: above 64
        ([69, 5], [90, 0], [1, 9]),           # 64 apart: not above
        ([180, 100], [90, 0], [1, 9]),        # 1.8x: above 1.5
        ([280, 200], [90, 0], [1, 9]),        # 1.4x: not above
        ([300, 200], [90, 0], [1, 9]))]       # 1.5x exactly: not above


def _pick_random(rng: random.Random):
    out = []
    for _ in range(200):
        n = rng.randint(1, 6)
        loads = [rng.choice([0, rng.randint(0, 20), rng.randint(0, 200)]) for _ in range(n)]
        text = rng.choice([0, rng.randint(1, 40), rng.randint(1, 5000)])
        matches = [rng.choice([0, text, rng.randint(0, text)]) for _ in range(n)]
        sizes = [rng.choice([0, rng.randint(0, 50), rng.randint(0, 10000)]) for _ in range(n)]
        knobs = rng.choice([{}, {"cache_threshold": rng.choice([0.0, 0.1, 0.5, 0.9])},
                            {"balance_abs_threshold": rng.choice([0, 4, 16, 32]),
                             "balance_rel_threshold": rng.choice([1.0, 1.1, 2.0])}])
        out.append(case("cache_aware_pick", loads, matches, text, sizes, **knobs))
    return out


# ------------------------------------------------------------------------------------------------
# keys_kept


def _kept_fixed():
    return [case("keys_kept", 4, 5, "modulo"), case("keys_kept", 4, 5, "consistent"),
            case("keys_kept", 4, 8, "modulo"), case("keys_kept", 6, 4, "consistent"),
            case("keys_kept", 5, 4, "modulo"), case("keys_kept", 5, 4, "consistent"),
            case("keys_kept", 1, 2, "consistent"), case("keys_kept", 3, 3, "modulo"),
            case("keys_kept", 3, 3, "consistent"), case("keys_kept", 6, 9, "modulo"),
            case("keys_kept", 8, 9, "modulo"), case("keys_kept", 2, 6, "consistent")]


def _kept_random(rng: random.Random):
    return [case("keys_kept", rng.randint(1, 32), rng.randint(1, 32), rng.choice(["modulo", "consistent"]))
            for _ in range(120)]


# ------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview": every expected value comes from the library


V = {v.name: v for v in ch15.DRILLS}    # each drill's numbers, drawn per learner


def _d3(n) -> float:
    return (costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=n.prompt)
            - costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=n.prompt - n.cached,
                                  prefill_context=n.cached)) * 1e3


def _d4(n, replicas=None) -> float:
    return routing.shared_prefix_hit_rate(n.requests, n.prompts, replicas or n.replicas, n.shared, n.own)


DRILLS = Drills("test_drills", (
    Drill("drill_1", "", variant=V["drill_1"], answer=lambda n: routing.keys_kept(n.before, n.after, "modulo"),
          rel_tol=0.002, points=no_point,
          hints=lambda n: ((routing.keys_kept(n.before, n.after, "consistent"), _pitfall("modulo_like_ring")),)),
    Drill("drill_2", "", variant=V["drill_2"], answer=lambda n: math.ceil(n.factor * (n.outstanding + 1) / n.replicas),
          points=no_point,
          hints=lambda n: ((math.ceil(n.factor * n.outstanding / n.replicas), _pitfall("cap_without_the_key")),)),
    Drill("drill_3", "", variant=V["drill_3"], answer=_d3, rel_tol=0.01,
          points=lambda n: (ServingPoint(LLAMA31_8B, H100_SXM, prefill_chunks=(n.prompt,)),
                            ServingPoint(LLAMA31_8B, H100_SXM, prefill_chunks=(n.prompt - n.cached,),
                                         prefill_prefix=n.cached)),
          hints=lambda n: ((_d3(n) / 1e3, "That is the time in seconds: the drill asks for milliseconds."),
                           (costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=n.prompt) * 1e3,
                            _pitfall("drills_whole_prompt")))),
    Drill("drill_4", "", variant=V["drill_4"], answer=_d4, rel_tol=0.002, points=no_point,
          hints=lambda n: ((_d4(n, 1), "That is the hit rate when each prompt misses once in all: round-robin sends "
                                       "it to every replica, and each replica misses it once."),)),
), read=lambda value, name: ch15.common.as_float(value, name, ch15.common.short_repr(12, 120), finite=True))


CHAPTER = Chapter(
    assignment=ch15.ASSIGNMENT,
    prelude="import bisect\nimport math\n\nimport numpy as np\n\nfrom servelab.analytic import costmodel, routing\n"
            "from servelab.analytic.costmodel import H100_SXM, LLAMA31_8B\n"
            "from servelab.analytic.routing import build_ring, stable_hash\n",
    demos=("setup_2", "setup_3", "setup_4", "setup_5", "setup_6"),
    setup=("setup_drills",),
    references=tuple(f"servelab.analytic.routing:{n}" for n in (
        "ring_owner", "bounded_owner", "cache_aware_pick", "keys_kept", "shared_prefix_hit_rate")),
    exercises=(
        Exercise(S["ring_owner"], "test_ring_owner", fixed=_owner_fixed, random=_owner_random),
        Exercise(S["bounded_owner"], "test_bounded_owner", fixed=_bounded_fixed, random=_bounded_random),
        Exercise(S["cache_aware_pick"], "test_cache_aware_pick", fixed=_pick_fixed, random=_pick_random),
        Exercise(S["keys_kept"], "test_keys_kept", fixed=_kept_fixed, random=_kept_random),
    ),
    drills=DRILLS,
)
