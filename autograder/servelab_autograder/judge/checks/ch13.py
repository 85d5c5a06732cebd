"""Chapter 13's grading table: each test cell, the exercise it grades and its cases; the drills' answers.

Fixed cases come first (the notebook's and the visible asserts', then one for each pitfall, then edge cases): the
pitfall atlas of the learner-facing module is made from them. The random ones are drawn from the run's seed.
Arguments are plain data made by ``ch13.case`` (a model, GPU or token weights as their fields, a set of tenants as
a sorted list).

What the sandbox's library lacks while this chapter grades (``references``), and what stays:

- every function of ``servelab.analytic.fairness`` an exercise is, ``document_len_for_share`` (drill 3 in one call), and
the
  three methods of ``VirtualTokenCounter`` that would answer ``next_tenant`` (``charge``, ``activate``, ``pick``).
- ``costmodel`` stays whole (the exercises are written with ``step_time``), and so do ``token_weights`` and
  ``TokenWeights`` (the prices are chapter 09's; the exercises are what is done with them).

The walkthrough's cells that run the simulator or the library's references (the shares over a run, the prices'
table, the TPOT picture, the quota in the simulator, the lift in the simulator) are demos: not run while grading.
setup_1 (imports) runs as it is.
"""

from __future__ import annotations

import random

from servelab.analytic import costmodel, fairness
from servelab.analytic.costmodel import H100_SXM, H200, LLAMA2_7B, LLAMA31_8B
from servelab.analytic.fairness import TokenWeights, token_weights
from servelab.analytic.serving import ServingPoint
from servelab_autograder import paths
from servelab_autograder.exercises import ch13
from servelab_autograder.judge import known_wrong
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise, no_point

S = ch13.SPECS
case = ch13.case
M, G = LLAMA31_8B, H100_SXM
MODELS, GPUS = (LLAMA31_8B, LLAMA2_7B), (H100_SXM, H200)
W15 = TokenWeights(prefill_s=15e-6, decode_s=120e-6)
W18 = TokenWeights(prefill_s=1.0, decode_s=8.0)


def roofline_weights() -> TokenWeights:
    return token_weights(M, G, 2000, 64, 2000)


def _pitfall(name: str) -> str:
    """A pitfall's message as its patch writes it (a drill's wrong answer that the exercise's mistake makes)."""
    return known_wrong.load(known_wrong.folder(paths.repo_root(), ch13.ASSIGNMENT) / f"{name}.diff").message


# ------------------------------------------------------------------------------------------------
# interactive_tpot


def _tpot_fixed():
    return [case("interactive_tpot", M, G, 64, 2000, 20, 16000),
            case("interactive_tpot", M, G, 64, 2000, 10, 32000), case("interactive_tpot", M, G, 64, 2000, 0, 0),
            case("interactive_tpot", M, G, 0, 0, 8, 16000), case("interactive_tpot", M, G, 64, 2000, 16, 32000),
            case("interactive_tpot", M, G, 64, 2000, 16, 16000), case("interactive_tpot", M, G, 64, 2000, 8, 16000),
            case("interactive_tpot", LLAMA2_7B, H200, 16, 4000, 4, 4000)]


def _tpot_random(rng: random.Random):
    out = []
    for _ in range(100):
        interactive, batch = rng.randint(0, 128), rng.randint(0, 64)
        batch += not (interactive or batch)          # a step holds at least one decode
        out.append(case("interactive_tpot", rng.choice(MODELS), rng.choice(GPUS), interactive,
                        rng.choice([0, 256, 1000, 2000, rng.randint(1, 8000)]), batch,
                        rng.choice([1000, 8000, 16000, 32000, rng.randint(1, 64000)])))
    return out


# ------------------------------------------------------------------------------------------------
# batch_kv_quota


def _step(lens) -> float:
    return costmodel.step_time(M, G, decode_context_lens=lens)


def _quota_fixed():
    return [case("batch_kv_quota", M, G, 0.030, 64, 2000, 16000), case("batch_kv_quota", M, G, 0.004, 64, 2000, 16000),
            case("batch_kv_quota", M, G, 0.030, 128, 2000, 16000), case("batch_kv_quota", M, G, 0.015, 40, 2100, 18000),
            case("batch_kv_quota", M, G, 0.020, 0, 0, 8000),           # no interactive decodes at all
            case("batch_kv_quota", M, G, 0.0105, 64, 2000, 16000),     # room for no whole document
            case("batch_kv_quota", M, G, 0.030, 230, 2000, 16000),     # the chats fill the cache: no batch KV
            case("batch_kv_quota", M, G, 1.0, 0, 0, 8000),             # time for all: the cache alone binds
            case("batch_kv_quota", LLAMA2_7B, H200, 0.050, 8, 1000, 64000),
            # the target exactly equal to the step time of 10 documents beside the chats: "at most" admits the 10th
            case("batch_kv_quota", M, G, _step([2000] * 64 + [16000] * 10), 64, 2000, 16000),
            case("batch_kv_quota", M, G, 1.0, 240, 2000, 1)]   # the chats need more than the cache: no room at all


def _quota_random(rng: random.Random):
    out = []
    for _ in range(40):
        out.append(case("batch_kv_quota", rng.choice(MODELS), rng.choice(GPUS),
                        round(rng.choice([0.005, 0.010, 0.015, 0.020, 0.030, 0.050, rng.uniform(0.004, 0.06)]), 4),
                        rng.randint(0, 128), rng.choice([0, 500, 2000, rng.randint(1, 8000)]),
                        rng.choice([2000, 8000, 16000, 32000, rng.randint(500, 64000)])))
    return out


# ------------------------------------------------------------------------------------------------
# request_fair_shares


def _shares_fixed():
    w = roofline_weights()
    doc = round(fairness.document_len_for_share(0.96, (300, 200), 200, w))
    return [case("request_fair_shares", {"docs": (30000, 200), "chat": (300, 200)}, W15),
            case("request_fair_shares", {"docs": (doc, 200), "chat": (300, 200)}, w),
            case("request_fair_shares", {"a": (1000, 10), "b": (10, 1000), "c": (500, 500)}, W15),
            case("request_fair_shares", {"solo": (100, 10)}, w),
            case("request_fair_shares", {"x": (500, 500), "y": (500, 500)}, w),
            case("request_fair_shares", {"prompt-only": (4000, 0), "output-only": (0, 500)}, W18)]


def _shares_random(rng: random.Random):
    out = []
    for _ in range(100):
        names = rng.sample(["acme", "beta", "chat", "docs", "eval", "fin"], rng.randint(2, 5))
        reqs = {t: (rng.choice([0, 50, 300, 2000, 30000, rng.randint(1, 60000)]),
                    rng.choice([1, 50, 200, 1000, rng.randint(1, 4000)])) for t in names}
        w = TokenWeights(rng.uniform(5e-6, 30e-6), rng.uniform(50e-6, 300e-6))
        out.append(case("request_fair_shares", reqs, w))
    return out


# ------------------------------------------------------------------------------------------------
# next_tenant


def _pick_fixed():
    return [case("next_tenant", {"A": 100.0, "B": 90.0, "C": 5.0}, {"B": (20, 1)}, W18, {"A", "B", "C"}, {"C"}),
            case("next_tenant", {"A": 10.0, "B": 50.0}, {}, W18, {"A", "B"}, {"B"}),
            case("next_tenant", {"A": 0.0, "B": 0.0}, {"A": (100, 0), "B": (0, 20)}, W18, {"A", "B"}, set()),
            case("next_tenant", {"A": 1.0}, {"A": (5, 0)}, W18, {"A"}, set()),
            case("next_tenant", {"A": 500.0, "B": 400.0}, {"A": (10, 2)}, W18, {"A", "B", "C"}, {"C"}),  # new: 0
            case("next_tenant", {"A": 3.0, "B": 7.0}, {}, W18, {"A", "B"}, {"A", "B"}),   # nobody stayed
            case("next_tenant", {"A": 60.0, "B": 20.0, "C": 20.0}, {"B": (0, 5)}, W18, {"B", "C"}, set()),
            case("next_tenant", {"docs": 9.0, "chat": 0.001}, {"docs": (2048, 0), "chat": (0, 3)}, W15,
                 {"docs", "chat"}, set()),
            case("next_tenant", {"A": 0.0}, {}, W18, {"A", "B"}, set()),   # B has no counter yet: 0, a tie A wins
            case("next_tenant", {"A": 0.5}, {}, W18, {"A", "B"}, set())]   # ... and B, at 0, is below A's 0.5


def _pick_random(rng: random.Random):
    out = []
    for _ in range(150):
        names = rng.sample(list("ABCDEF"), rng.randint(2, 6))
        counters = {t: round(rng.uniform(0, 1000), rng.choice([0, 3])) for t in names if rng.random() < 0.85}
        served = {t: (rng.choice([0, 0, rng.randint(1, 4096)]), rng.choice([0, rng.randint(1, 64)]))
                  for t in names if rng.random() < 0.5}
        backlogged = set(rng.sample(names, rng.randint(1, len(names))))
        returning = {t for t in backlogged if rng.random() < 0.35}
        w = rng.choice([W18, W15, TokenWeights(rng.uniform(0.5, 2), rng.uniform(2, 20))])
        out.append(case("next_tenant", counters, served, w, backlogged, returning))
    return out


# ------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview": every expected value comes from the library

V = {v.name: v for v in ch13.DRILLS}    # each drill's numbers, drawn per learner


def _d1(n) -> tuple:
    return (n.chats, n.chat_ctx, n.batch, n.batch_ctx)


def _d2(n) -> tuple:
    return (n.target_ms / 1e3, n.chats, n.chat_ctx, n.batch_ctx)


def _d3(n) -> float:
    return fairness.document_len_for_share(n.share_pct / 100, (n.chat_prompt, n.chat_out), n.doc_out,
                                           roofline_weights())


def _d4_weights(n) -> TokenWeights:
    return token_weights(M, G, n.prompt, n.batch, n.context)


def _chats(n, batch: int = 0) -> ServingPoint:
    return ServingPoint(M, G, decode_contexts=(n.chat_ctx,) * n.chats + (n.batch_ctx,) * batch)


_MS_HINT = "That is the TPOT in seconds: the drill asks for milliseconds."

DRILLS = Drills("test_drills", (
    Drill("drill_1", "", variant=V["drill_1"], answer=lambda n: fairness.interactive_tpot(M, G, *_d1(n)) * 1e3,
          rel_tol=0.002, points=lambda n: (_chats(n, n.batch),),
          hints=lambda n: ((fairness.interactive_tpot(M, G, *_d1(n)), _MS_HINT),
                           (fairness.interactive_tpot(M, G, n.chats, n.chat_ctx, 0, 0) * 1e3,
                            _pitfall("tpot_ignores_batch")))),
    Drill("drill_2", "", variant=V["drill_2"], answer=lambda n: fairness.batch_kv_quota(M, G, *_d2(n)),
          points=lambda n: (_chats(n, fairness.batch_kv_quota(M, G, *_d2(n)) // n.batch_ctx),),
          hints=lambda n: ((fairness.batch_kv_quota(M, G, n.target_ms / 1e3, 0, 0, n.batch_ctx),
                            _pitfall("quota_ignores_interactive")),
                           (fairness.batch_kv_quota(M, G, *_d2(n)) // n.batch_ctx, _pitfall("quota_in_sequences")))),
    Drill("drill_3", "", variant=V["drill_3"], answer=_d3, rel_tol=0.01, points=no_point,
          hints=lambda n: ((n.share_pct / (100 - n.share_pct) * (n.chat_prompt + n.chat_out) - n.doc_out,
                            _pitfall("shares_weight_alike")),)),
    Drill("drill_4", "", variant=V["drill_4"], answer=lambda n: _d4_weights(n).decode_s / _d4_weights(n).prefill_s,
          rel_tol=0.01, points=lambda n: (ServingPoint.decode(M, G, n.batch, n.context),
                                          ServingPoint(M, G, prefill_chunks=(n.prompt,))),
          hints=lambda n: ((1.0, _pitfall("shares_weight_alike")),
                           (_d4_weights(n).prefill_s / _d4_weights(n).decode_s, _pitfall("drills_ratio_flipped")))),
), read=lambda value, name: ch13.common.as_float(value, name, ch13.common.short_repr(12, 120), finite=True))


CHAPTER = Chapter(
    assignment=ch13.ASSIGNMENT,
    prelude="import math\n\nimport numpy as np\n\nfrom servelab.analytic import costmodel, fairness\n"
            "from servelab.analytic.costmodel import H100_SXM, LLAMA2_7B, LLAMA31_8B\n"
            "from servelab.analytic.fairness import TokenWeights, token_weights\n",
    demos=("setup_2", "setup_3", "setup_4", "setup_5", "setup_6"),
    setup=("setup_drills",),
    references=tuple(f"servelab.analytic.fairness:{n}" for n in (
        "interactive_tpot", "batch_kv_quota", "request_fair_shares", "document_len_for_share", "next_tenant",
        "VirtualTokenCounter.charge", "VirtualTokenCounter.activate", "VirtualTokenCounter.pick")),
    exercises=(
        Exercise(S["interactive_tpot"], "test_interactive_tpot", fixed=_tpot_fixed, random=_tpot_random),
        Exercise(S["batch_kv_quota"], "test_batch_kv_quota", fixed=_quota_fixed, random=_quota_random),
        Exercise(S["request_fair_shares"], "test_request_fair_shares", fixed=_shares_fixed, random=_shares_random),
        Exercise(S["next_tenant"], "test_next_tenant", fixed=_pick_fixed, random=_pick_random),
    ),
    drills=DRILLS,
)
