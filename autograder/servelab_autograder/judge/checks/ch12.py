"""Chapter 12's grading table: each test cell, the exercise it grades and its cases; the drills' answers.

Fixed cases come first (the notebook's and the visible asserts', then one for each pitfall, then edge cases): the
pitfall atlas of the learner-facing module is made from them. The random ones are drawn from the run's seed.

What the sandbox's library lacks while this chapter grades (``references``): every function of
``servelab.analytic.queueing`` an exercise is, and the three that would answer utilization_limit in a call
(mg1_mean_wait, wait_quantile, ttft_quantile). The simulator stays (the demos use it; they are not run while grading):
its ``Backoff`` and ``RetryAfter`` call ``queueing.retry_delay`` and ``queueing.retry_after`` through the module, so
they find the blocked ones too.

The walkthrough's cells that call the references or the simulator (the TTFT curves and their simulation, the limit
table, the engine's departures, the spike under three rules, the retry storm under four ways of refusing) are demos.
setup_1 (imports and two helpers) runs as it is.
"""

from __future__ import annotations

import math
import random

from servelab.analytic import queueing
from servelab_autograder.exercises import ch12
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise, no_point

S = ch12.SPECS
case = ch12.case
LOGNORMAL_08 = math.exp(0.8 ** 2) - 1          # a log-normal's cv2 at sigma = 0.8 (and a prefill time linear in it)


def _limit_fixed():
    return [case("utilization_limit", 0.8, 0.1), case("utilization_limit", 0.8, 0.1, q=0.9),
            case("utilization_limit", 0.8, 0.1, cv2=1.0), case("utilization_limit", 0.05, 0.1),
            case("utilization_limit", 0.8, 0.1, LOGNORMAL_08),
            case("utilization_limit", 1.0, 0.15, LOGNORMAL_08),        # drill 1
            case("utilization_limit", 0.1, 0.1),                       # the target is one prefill: rho <= 1 - q
            case("utilization_limit", 2.0, 0.25, 0.43, 0.95), case("utilization_limit", 5.0, 0.1, 3.0, 0.999),
            # cv2 and q left out: the defaults the docstring states (constant service times, p99) are graded too
            case("utilization_limit", 0.8, 0.1, ch12.DEFAULT, ch12.DEFAULT),
            case("utilization_limit", 0.8, 0.1, LOGNORMAL_08, ch12.DEFAULT),
            case("utilization_limit", 0.8, 0.1, ch12.DEFAULT, 0.9)]


def _limit_random(rng: random.Random):
    out = []
    for _ in range(100):
        service = round(rng.uniform(0.01, 0.5), 4)
        out.append(case("utilization_limit", round(service * rng.choice([0.5, 1.0, 1.5, 2, 4, 8, 20,
                                                                          rng.uniform(1, 30)]), 6),
                        service, rng.choice([0.0, 0.0, 0.43, 0.9, 1.0, round(rng.uniform(0, 4), 3)]),
                        rng.choice([0.5, 0.9, 0.95, 0.99, 0.99, 0.999])))
    return out


def _drain_fixed():
    return [case("drain_time", 20, 5, 10, 60), case("drain_time", 8, 5, 10, 60), case("drain_time", 20, 10, 10, 60),
            case("drain_time", 20, 0, 10, 60), case("drain_time", 80, 25, 40, 60), case("drain_time", 10, 5, 10, 60),
            case("drain_time", 15.5, 9.5, 10.0, 30.0)]


def _drain_random(rng: random.Random):
    out = []
    for _ in range(100):
        capacity = round(rng.uniform(1, 100), 3)
        out.append(case("drain_time", round(capacity * rng.uniform(0.5, 4), 3),
                        round(capacity * rng.choice([0.0, rng.uniform(0, 1.2)]), 3), capacity,
                        rng.choice([1, 10, 60, 300, round(rng.uniform(0.5, 600), 2)])))
    return out


def _dead_fixed():
    return [case("dead_requests", 20, 5, 10, 60, 30), case("dead_requests", 20, 5, 10, 60, 60),
            case("dead_requests", 20, 0, 10, 60, 30), case("dead_requests", 80, 25, 40, 60, 20),
            case("dead_requests", 8, 5, 10, 60, 1), case("dead_requests", 30, 9, 10, 20, 2.5)]


def _dead_random(rng: random.Random):
    out = []
    for _ in range(100):
        capacity = round(rng.uniform(1, 100), 3)
        out.append(case("dead_requests", round(capacity * rng.uniform(0.5, 4), 3),
                        round(capacity * rng.uniform(0, 0.95), 3), capacity,
                        rng.choice([10, 60, 300, round(rng.uniform(1, 600), 2)]),
                        rng.choice([1, 5, 30, round(rng.uniform(0.1, 120), 2)])))
    return out


def _admit_fixed():
    rows = [(12_000, 2_000, 10_000, 1.5), (14_000, 2_000, 10_000, 1.5), (0, 20_000, 10_000, 1.5),
            (13_000, 2_000, 10_000, 1.5),                               # exactly on the deadline: admitted
            (21_000, 3_000, 12_000, 2.0), (21_001, 3_000, 12_000, 2.0),   # drill 4's edge
            (0, 0, 5_000, 0.0)]
    return [case("admit_by_deadline", *row) for row in rows]


def _admit_random(rng: random.Random):
    out = []
    for _ in range(150):
        rate = rng.choice([5_000, 10_000, 12_000, 40_000, rng.randint(1_000, 100_000)])
        deadline = rng.choice([0.5, 1.0, 1.5, 2.0, 5.0, round(rng.uniform(0.1, 10), 2)])
        prompt = rng.randint(1, 16_000)
        backlog = max(0, int(rate * deadline) - prompt + rng.randint(-3 * prompt, 3 * prompt))
        out.append(case("admit_by_deadline", backlog, prompt, rate, deadline))
    return out


def _retry_fixed():
    return [case("retry_delay", 5, 0.5, 8.0), case("retry_delay", 0, 0.5, 8.0), case("retry_delay", 3, 0.5, 8.0, 1),
            case("retry_delay", 10, 0.5, 8.0, 2), case("retry_delay", 4, 0.25, 1.5),
            case("retry_delay", 0, 1.0, 0.5), case("retry_delay", 2, 0.1, 100.0, 7)]


def _retry_random(rng: random.Random):
    return [case("retry_delay", rng.randint(0, 12),
                 rng.choice([0.05, 0.1, 0.25, 0.5, 1.0, round(rng.uniform(0.01, 2), 3)]),
                 rng.choice([1.0, 4.0, 8.0, 30.0, 60.0, round(rng.uniform(0.1, 100), 2)]),
                 rng.choice([None, rng.randint(0, 10_000), rng.randint(0, 10_000)])) for _ in range(100)]


def _retry_after_fixed():
    D = ch12.DEFAULT
    rows = [(50_000, 20_000, 12_000), (44_000, 20_000, 12_000),            # the docstring: 2.5 s -> 3, exactly 2 s
            (10_000, 20_000, 12_000), (20_000, 20_000, 12_000),            # at or below the line: the minimum, 1 s
            (20_001, 20_000, 12_000), (50_000, 0, 10_000),                 # a token over it; exactly 5 s to empty
            (50_000, 20_000, 12_000, 4.0, 1), (44_000, 20_000, 12_000, 4.0, 7),   # the server's jitter
            (10_000, 20_000, 12_000, 5.0, 3), (3, 5, 2.0, 3.0, 11),        # jitter below the line
            (0, 0, 1.0, 0.0, 2), (90_000, 30_000, 16_000),                 # a generator and no spread; drill 6
            (90_000, 30_000, 16_000, 2.0, 5), (36_000, 0, 12_000, 0.5, 4), (150_000, 49_000, 68_000, 5.0, 9),
            (50_000, 20_000, 12_000, D, D), (50_000, 20_000, 12_000, 4.0, D),   # jitter_s without a generator
            (10_000, 20_000, 12_000, D, 6)]
    return [case("retry_after", *row) for row in rows]


def _retry_after_random(rng: random.Random):
    out = []
    for _ in range(150):
        rate = rng.choice([2.0, 1_000.0, 12_000.0, 16_000.0, 68_000.0, round(rng.uniform(10, 100_000), 1)])
        line = rng.choice([0, 20_000, 49_000, rng.randint(0, 200_000)])
        drain = rng.choice([0, 1, 2, 5, rng.randint(0, 30)]) if rng.random() < 0.4 else rng.uniform(-3, 30)
        backlog = max(0, line + int(drain * rate))                       # whole seconds past the line, or not
        jitter = rng.choice([0.0, 0.5, 2.0, 5.0, round(rng.uniform(0, 10), 2)])
        seed = rng.choice([None, rng.randint(0, 10_000), rng.randint(0, 10_000)])
        out.append(case("retry_after", backlog, line, rate, jitter, seed))
    return out


# ------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview": every expected value comes from the library

V = {v.name: v for v in ch12.DRILLS}    # each drill's numbers, drawn per learner: queueing numbers, no single step


DRILLS = Drills("test_drills", (
    Drill("drill_1", "", variant=V["drill_1"], abs_tol=0.001, points=no_point,
          answer=lambda n: queueing.utilization_limit(n.ttft_s, n.prefill_ms / 1e3, math.exp(n.sigma ** 2) - 1)),
    Drill("drill_2", "", variant=V["drill_2"], abs_tol=0.05, points=no_point,
          answer=lambda n: queueing.drain_time(n.spike, n.base, n.capacity, n.seconds)),
    Drill("drill_3", "", variant=V["drill_3"], abs_tol=0.5, points=no_point,
          answer=lambda n: queueing.dead_requests(n.spike, n.base, n.capacity, n.seconds, n.timeout)),
    Drill("drill_4", "", variant=V["drill_4"], abs_tol=0.5, points=no_point,
          answer=lambda n: n.rate * n.deadline_s - n.prompt),
    Drill("drill_5", "", variant=V["drill_5"], abs_tol=0.001, points=no_point,
          answer=lambda n: sum(queueing.retry_delay(a, n.base_s, n.cap_s) for a in range(n.retries))),
    Drill("drill_6", "", variant=V["drill_6"], abs_tol=0.5, points=no_point,
          answer=lambda n: queueing.retry_after(n.queued, n.line, n.rate)),
), read=lambda value, name: ch12.common.as_float(value, name, ch12.common.short_repr(12, 120), finite=True))


CHAPTER = Chapter(
    assignment=ch12.ASSIGNMENT,
    prelude="import math\nimport random\n",
    demos=("setup_2", "setup_3", "setup_4", "setup_5", "setup_6"),
    setup=("setup_drills",),
    references=tuple(f"servelab.analytic.queueing:{n}" for n in (
        "mg1_mean_wait", "wait_quantile", "ttft_quantile", "utilization_limit", "drain_time", "dead_requests",
        "admit_by_deadline", "retry_delay", "retry_after")),
    exercises=(
        Exercise(S["utilization_limit"], "test_utilization_limit", fixed=_limit_fixed, random=_limit_random),
        Exercise(S["drain_time"], "test_drain_time", fixed=_drain_fixed, random=_drain_random),
        Exercise(S["dead_requests"], "test_dead_requests", fixed=_dead_fixed, random=_dead_random),
        Exercise(S["admit_by_deadline"], "test_admit_by_deadline", fixed=_admit_fixed, random=_admit_random),
        Exercise(S["retry_delay"], "test_retry_delay", fixed=_retry_fixed, random=_retry_random),
        Exercise(S["retry_after"], "test_retry_after", fixed=_retry_after_fixed, random=_retry_after_random),
    ),
    drills=DRILLS,
)
