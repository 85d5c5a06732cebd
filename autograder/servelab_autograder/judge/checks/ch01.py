"""Chapter 01's grading table: each test cell, the exercise it grades and its cases; the drills' answers.

Fixed cases come first (the chapter's worked examples, then one for each pitfall, then edge cases): the pitfall
atlas of the learner-facing module is made from them. The random ones are drawn from the run's seed.
"""

from __future__ import annotations

import random

from servelab.analytic import batching as ref
from servelab.analytic import workloads
from servelab_autograder.exercises import ch01
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise, Relation, no_point

S = ch01.SPECS


def _lens(rng: random.Random, max_n: int, max_len: int) -> list[int]:
    return [rng.randint(1, max_len) for _ in range(rng.randint(1, max_n))]


def _lens_and_B(rng: random.Random, count: int = 300, max_len: int = 40):
    return [(_lens(rng, 3 + k // 20, max_len), rng.randint(1, 8)) for k in range(count)]


def _visible_continuous():
    """The visible test's own 300 cases (random.Random(0)), graded again here with the relation it asserts."""
    rng = random.Random(0)
    out = []
    for _ in range(300):
        lens = [rng.randint(1, 30) for _ in range(rng.randint(1, 15))]
        out.append((lens, rng.randint(1, 6)))
    return out


def _never_slower_than_static(args, mine, theirs) -> str | None:
    lens, B = args
    if theirs[0] < mine[0]:
        return (f"simulate_continuous(out_lens={ch01._short.repr(lens)}, B={B}) takes {mine[0]} steps but your "
                f"simulate_static takes {theirs[0]}: continuous batching is never slower than static batching, "
                f"so simulate_static is wrong here")
    return None


def _utilization_random(rng: random.Random):
    out = []
    for _ in range(200):
        lens, B = _lens(rng, 15, 40), rng.randint(1, 8)
        steps = rng.choice([ref.simulate_static(lens, B)[0], ref.simulate_continuous(lens, B)[0],
                            ref.lower_bound(lens, B), ref.lower_bound(lens, B) + rng.randint(1, 50)])
        out.append((lens, B, steps))
    return out


def _arrivals_random(rng: random.Random):
    out = []
    for k in range(300):
        lens = _lens(rng, 3 + k // 25, 20)
        arrivals = [rng.randint(0, 30) for _ in lens]
        if rng.random() < 0.5:
            arrivals.sort()
        out.append((arrivals, lens, rng.randint(1, 5)))
    return out


def _pmf(rng: random.Random, n: int) -> list[float]:
    weights = [rng.choice([0, 0, 1, 2, 3, 5, 8]) for _ in range(n)]
    weights[rng.randrange(n)] += 1
    return [w / sum(weights) for w in weights]


# more requests than any loop a learner might cap (32, 1024) and than the random cases hold: 1100 of them
_MANY = random.Random(1100)
MANY_LENS = [_MANY.randint(1, 40) for _ in range(1100)]
MANY_ARRIVALS = sorted(_MANY.randint(0, 3000) for _ in range(1100))

BIMODAL_PMF = [0.9 if k == 50 else 0.1 if k == 1000 else 0.0 for k in range(1, 1001)]
DRILL_1_LENS = [300] + [20] * 30
V = {v.name: v for v in ch01.DRILLS}    # the drills' numbers, drawn per learner


def _bimodal(n) -> list[float]:
    return [n.short_pct / 100 if k == n.short else 1 - n.short_pct / 100 if k == n.long else 0.0
            for k in range(1, n.long + 1)]


def _uniform(n) -> list[int]:
    """Drill 5's workload: the chapter's uniform lengths, of the learner's size and seed."""
    return workloads.output_lengths(n.n, "uniform", seed=n.seed, lo=1, hi=200)

CHAPTER = Chapter(
    assignment=ch01.ASSIGNMENT,
    prelude="import heapq\nimport math\nimport numbers\nimport random\n\nfrom servelab.analytic import workloads\n",
    demos=("setup_2", "setup_3", "setup_4", "setup_7"),
    setup=("setup_drills",),
    references=tuple(f"servelab.analytic.batching:{n}" for n in (
        "simulate_static", "simulate_continuous", "naive_continuous", "utilization", "lower_bound",
        "slot_assignments", "simulate_continuous_arrivals", "expected_max", "predicted_gain")),
    exercises=(
        Exercise(S["simulate_static"], "test_simulate_static",
                 fixed=lambda: [([20, 200, 50, 30], 2), ([5, 1, 1, 1], 2),
                                ([9, 1, 1, 8, 2, 2], 3),    # the longest is neither first nor last in its batch
                                ([1, 2, 3, 4, 5, 6, 7], 3),  # a partial last batch
                                ([5, 5, 5], 2), ([], 3), ([7], 1), ([3, 1, 2], 5),  # B > requests
                                (MANY_LENS, 5), (MANY_LENS, 40)],  # batches past the 32nd and the 1024th request
                 random=_lens_and_B),
        Exercise(S["simulate_continuous"], "test_simulate_continuous",
                 fixed=lambda: [([20, 200, 50, 30], 2), ([5, 1, 1, 1], 2), ([9, 1, 1, 8, 2, 2], 3),
                                ([1, 2, 3, 4, 5, 6, 7], 3), ([], 3), ([7], 1), ([3, 1, 2], 5)],
                 random=lambda rng: [*_visible_continuous(), *_lens_and_B(rng)],
                 relations=(Relation(S["simulate_static"], _never_slower_than_static),)),
        Exercise(S["utilization"], "test_utilization",
                 fixed=lambda: [([20, 200, 50, 30], 2, 250), ([20, 200, 50, 30], 2, 200), ([5, 1, 1, 1], 2, 6),
                                ([5, 1, 1, 1], 2, 5), ([], 4, 0)],
                 random=_utilization_random),
        Exercise(S["lower_bound"], "test_lower_bound",
                 fixed=lambda: [([20, 200, 50, 30], 2), ([5, 1, 1, 1], 2), ([5, 5, 5], 2),  # ceil(7.5) = 8
                                ([1, 1, 1, 1, 1], 2), ([9], 4), ([], 3)],
                 random=lambda rng: [(_lens(rng, 15, 40), rng.randint(1, 8)) for _ in range(200)]),
        Exercise(S["simulate_continuous_arrivals"], "test_simulate_continuous_arrivals",
                 fixed=lambda: [([0, 0, 1, 6], [4, 2, 3, 1], 2),       # the docstring's example
                                ([0, 0, 0, 0], [20, 200, 50, 30], 2),  # all at step 0: simulate_continuous
                                ([0, 10], [3, 3], 2),                  # a late request starts when it arrives
                                ([0, 100], [5, 5], 1),                 # the engine idles until the next arrival
                                ([5, 0, 0], [1, 1, 1], 1),             # unsorted arrivals: first come first served
                                ([3, 3, 0, 3], [2, 9, 4, 1], 2),       # ties keep list order
                                ([], [], 2),
                                (MANY_ARRIVALS, MANY_LENS, 7)],        # past the 1024th request
                 random=_arrivals_random),
        Exercise(S["expected_max"], "test_expected_max",
                 fixed=lambda: [([0.5, 0.5], 2), ([1.0], 1), ([1.0], 4), (ref.constant_pmf(5), 4),
                                (ref.uniform_pmf(1, 10), 3), ([0.25, 0.5, 0.25], 2),
                                (ref.geometric_pmf(10, max_len=60), 8), (BIMODAL_PMF, 32)],
                 random=lambda rng: [(_pmf(rng, rng.randint(1, 30)), rng.randint(1, 16)) for _ in range(200)]),
    ),
    drills=Drills("test_drills", (
        Drill("drill_1", "", variant=V["drill_1"], points=no_point,
              answer=lambda n: ref.simulate_continuous([n.long] + [n.short] * n.count, n.batch)[0]),
        Drill("drill_2", "", variant=V["drill_2"], abs_tol=0.03, points=no_point,
              answer=lambda n: ref.predicted_gain(ref.geometric_pmf(n.mean), n.batch)),
        Drill("drill_3", "", variant=V["drill_3"], rel_tol=0.01, points=no_point,
              answer=lambda n: ref.predicted_gain(_bimodal(n), n.batch)),
        Drill("drill_4", "", variant=V["drill_4"], rel_tol=0.01, points=no_point,
              answer=lambda n: ref.predicted_gain(ref.geometric_pmf(n.mean), n.batch),
              hints=lambda n: ((ref.predicted_gain(ref.uniform_pmf(1, 2 * n.mean), n.batch),
                                f"That is the gain for lengths uniform on 1..{2 * n.mean}; the drill's lengths are "
                                f"geometric."),)),
        Drill("drill_5", "", variant=V["drill_5"], points=no_point,
              answer=lambda n: ref.simulate_static(sorted(_uniform(n)), n.batch)[0],
              hints=lambda n: ((ref.simulate_static(_uniform(n), n.batch)[0],
                                "That is static batching in arrival order: sort the lengths first."),
                               (ref.simulate_static(sorted(_uniform(n), reverse=True), n.batch)[0],
                                "That is sorted longest first; the drill sorts shortest first, sorted(lens)."))),
    ), read=ch01.as_float),
)
