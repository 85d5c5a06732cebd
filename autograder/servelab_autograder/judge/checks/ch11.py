"""Chapter 11's grading table: each test cell, the exercise it grades and its cases; the drills' answers.

Fixed cases come first (the notebook's and the visible asserts', then one for each pitfall, then edge cases): the
pitfall atlas of the learner-facing module is made from them. The random ones are drawn from the run's seed.

``may_append`` and ``rollback`` are graded from block-manager states (``ch11.block_case``): a decoding sequence
before its verification step (holding the blocks for its KV, carrying its drafts) for ``may_append``; the same
sequence after the step (accepted drafts and the bonus appended, `num_cached_tokens` advanced by 1 + accepted,
drafts cleared, look-ahead blocks still held) for ``rollback``, as ``SpecScheduler.postprocess`` calls it.

What the sandbox's library lacks while this chapter grades (``references``), and what stays:

- every function of ``servelab.schedulers.spec_decode`` and ``servelab.analytic.speculation`` an exercise is:
  ``fit_drafts``, ``expected_tokens_per_step``,
  ``speculative_speedup``, ``crossover_batch``, ``LookaheadBlockManager.may_append`` / ``rollback``; and those that
  would answer one in a call: ``LookaheadBlockManager.blocks_short`` / ``can_append`` (may_append's count),
  ``verify_step_time`` and ``draft_time`` (speculative_speedup's two prices).
- ``costmodel`` stays whole: the speedup is written with ``step_time`` (pricing a verification as a chunk of
  k + 1 on each context, with its logits at all k + 1 positions, ``logit_rows``, is the exercise);
  ``BlockManager._allocate_block`` / ``_deallocate_block`` stay (the methods take and give back blocks through
  them).

The walkthrough's cells that call the library's references (the worked trace, the closed forms, the simulator, the
plots, the engine) are demos: not run while grading. setup_1 (imports) runs as it is.
"""

from __future__ import annotations

import dataclasses
import random

from servelab.analytic import costmodel, speculation
from servelab.analytic.costmodel import H100_SXM, H200, LLAMA2_7B, LLAMA3_8B
from servelab.analytic.serving import ServingPoint
from servelab_autograder import paths
from servelab_autograder.exercises import ch11
from servelab_autograder.judge import known_wrong
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise, no_point, unless_right

S = ch11.SPECS
case = ch11.case

DRAFT_1B = speculation.DRAFT_1B
H100_DERATED = dataclasses.replace(H100_SXM, name="H100 at 70% of peak FLOPs, 85% of bandwidth",
                                   peak_flops=0.7 * H100_SXM.peak_flops, hbm_bandwidth=0.85 * H100_SXM.hbm_bandwidth)
MODELS = (LLAMA3_8B, LLAMA2_7B)
GPUS = (H100_SXM, H200, H100_DERATED)
DRAFTS = (None, None, DRAFT_1B)


def _pitfall(name: str) -> str:
    """A pitfall's message as its patch writes it."""
    return known_wrong.load(known_wrong.folder(paths.repo_root(), ch11.ASSIGNMENT) / f"{name}.diff").message


def _blocks(n: int, bs: int) -> int:
    return -(-n // bs)


# ------------------------------------------------------------------------------------------------
# fit_drafts


def _fit_fixed():
    return [([3, 3, 3], 8), ([4, 4], 2), ([4, 4, 4, 4], 100), ([0, 2, 4], 5), ([], 10), ([2, 2, 2], 1),
            ([4] * 8, 16), ([1, 5, 2], 7)]


def _fit_random(rng: random.Random):
    out = []
    for _ in range(150):
        n = rng.randint(0, 12)
        wanted = [rng.randint(0, 6) for _ in range(n)]
        out.append((wanted, rng.randint(1, max(1, 8 * n))))
    return out


# ------------------------------------------------------------------------------------------------
# may_append and rollback: a decoding sequence before its step, and after it


before, after = ch11.before, ch11.after


def _append_fixed():
    return [before("the worked trace, step 1", 4, 4, 3),          # positions 3..6: one look-ahead block
            before("small blocks", 2, 4, 3),                         # positions 3..6: blocks 2 and 3 are new
            before("drafts over two new blocks", 4, 5, 4, spare=1),  # positions 4..8: blocks 2 and 3 are new
            before("no drafts, a new block", 4, 9, 0, others=2),
            before("no drafts, room in the block", 4, 7, 0, spare=2),
            before("drafts inside the last block", 16, 10, 5, others=3, spare=1),
            before("the last draft fills the block", 4, 6, 2, spare=1),    # positions 5..7
            before("one past it", 4, 6, 3, spare=1),                       # positions 5..8
            before("block size 1", 1, 5, 3, others=1)]


def _rollback_fixed():
    return [after("the worked trace, step 1", 4, 4, 3, 0),        # KV for 4 tokens: the look-ahead block goes
            after("KV ends inside a block", 4, 5, 3, 0),          # 5 with KV: both blocks stay
            after("two blocks go back", 2, 3, 4, 0, others=1),
            after("all accepted", 4, 4, 3, 3, spare=1),
            after("KV ends on a boundary", 4, 7, 4, 0, spare=1),  # 8 with KV: two blocks, the third goes
            after("no drafts", 4, 8, 0, 0, spare=1),
            after("block size 1", 1, 5, 3, 1, others=2)]


def _append_random(rng: random.Random):
    return [before("random", rng.choice([1, 2, 4, 8, 16]), rng.randint(2, 70), rng.randint(0, 7),
                   rng.randint(0, 3), rng.randint(0, 3)) for _ in range(60)] + [
        before("1,100 drafts at block size 1", 1, 5, 1100, others=1)]   # past a loop capped at 32 or 1024 blocks


def _rollback_random(rng: random.Random):
    out = []
    for _ in range(60):
        d = rng.randint(0, 7)
        out.append(after("random", rng.choice([1, 2, 4, 8, 16]), rng.randint(2, 70), d, rng.randint(0, d),
                         rng.randint(0, 3), rng.randint(0, 3)))
    return out + [after("1,100 drafts at block size 1, none accepted", 1, 5, 1100, 0, others=1)]


# ------------------------------------------------------------------------------------------------
# expected_tokens_per_step, speculative_speedup, crossover_batch


def _expected_fixed():
    return [(0.8, 4), (0.0, 4), (1.0, 4), (0.5, 0), (0.7, 1), (0.9, 10), (1.0, 0), (0.6, 3)]


def _expected_random(rng: random.Random):
    return [(rng.choice([0.0, 1.0, round(rng.random(), 4), rng.random()]), rng.randint(0, 12)) for _ in range(150)]


def _speed_fixed():
    return [case("speculative_speedup", LLAMA3_8B, H100_SXM, 1, 1024, 4, 0.8),
            case("speculative_speedup", LLAMA3_8B, H100_SXM, 1, 1024, 4, 0.7, DRAFT_1B),
            case("speculative_speedup", LLAMA3_8B, H100_SXM, 256, 256, 4, 0.7),
            case("speculative_speedup", LLAMA3_8B, H100_SXM, 512, 256, 4, 0.7),     # past the crossover
            case("speculative_speedup", LLAMA3_8B, H200, 64, 4096, 3, 0.6, DRAFT_1B),
            case("speculative_speedup", LLAMA2_7B, H100_SXM, 16, 512, 0, 0.5),      # k = 0: plain decoding
            case("speculative_speedup", LLAMA3_8B, H100_SXM, 128, 128, 6, 0.9)]


def _speed_random(rng: random.Random):
    out = []
    for _ in range(60):
        out.append(case("speculative_speedup", rng.choice(MODELS), rng.choice(GPUS), rng.choice([1, 4, 32, 128,
                        rng.randint(1, 600)]), rng.choice([0, 128, 512, 2048, rng.randint(0, 8192)]),
                        rng.randint(0, 8), round(rng.uniform(0.3, 0.99), 3), rng.choice(DRAFTS)))
    return out


def _cross_fixed():
    return [case("crossover_batch", LLAMA3_8B, H100_SXM, 256, 4, 0.7),
            case("crossover_batch", LLAMA3_8B, H100_SXM, 1024, 4, 0.7, max_batch=600),   # none: KV-bound too
            case("crossover_batch", LLAMA3_8B, H100_SXM, 128, 4, 0.7, DRAFT_1B),
            case("crossover_batch", LLAMA3_8B, H200, 256, 2, 0.5),
            case("crossover_batch", LLAMA2_7B, H100_SXM, 64, 4, 0.8, max_batch=600),
            case("crossover_batch", LLAMA3_8B, H100_SXM, 256, 4, 0.0, max_batch=50),   # alpha 0: at batch 1
            case("crossover_batch", LLAMA3_8B, H100_SXM, 256, 0, 0.7)]                # k = 0: a speedup of exactly 1


# A GPU with four times H200's FLOPs: Llama-3-8B stays memory-bound past 1,024 sequences at 64 tokens of context
GPU_4X_FLOPS = dataclasses.replace(H200, name="H200 with 4x its FLOPs", peak_flops=4 * H200.peak_flops)


def _cross_edges():
    """Crossovers at the edge of max_batch (the first batch that does not pay is max_batch itself, or one past
    it) and one past 1,024 (a search capped there answers None)."""
    at = speculation.crossover_batch(LLAMA3_8B, H100_SXM, 256, 4, 0.7)
    return [case("crossover_batch", LLAMA3_8B, H100_SXM, 256, 4, 0.7, max_batch=at),
            case("crossover_batch", LLAMA3_8B, H100_SXM, 256, 4, 0.7, max_batch=at - 1),
            case("crossover_batch", LLAMA3_8B, GPU_4X_FLOPS, 64, 4, 0.9)]


def _cross_random(rng: random.Random):
    out = _cross_edges()
    for _ in range(12):
        out.append(case("crossover_batch", LLAMA3_8B, rng.choice(GPUS), rng.choice([64, 128, 256, 384]),
                        rng.randint(1, 6), round(rng.uniform(0.4, 0.95), 2), rng.choice(DRAFTS), max_batch=500))
    return out


# ------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview": every expected value comes from the library

V = {v.name: v for v in ch11.DRILLS}    # each drill's numbers, drawn per learner


def d5_answer(n) -> int:
    """Blocks a rollback gives back: the look-ahead blocks past the KV that is kept."""
    return _blocks(n.seq_len + n.drafts, n.block) - _blocks(n.seq_len + n.accepted, n.block)


def d5_taken(n) -> int:
    return _blocks(n.seq_len + n.drafts, n.block) - _blocks(n.seq_len - 1, n.block)


def _d3(n, gpu=H100_SXM) -> float:
    return speculation.speculative_speedup(LLAMA3_8B, gpu, n.batch, n.context, n.k, n.alpha)


def _d3_one_logit_row(n) -> float:
    """Drill 3's speedup with the verification's LM head priced at one row a sequence (a prefill chunk's)."""
    plain = costmodel.step_time(LLAMA3_8B, H100_SXM, decode_context_lens=[n.context] * n.batch)
    verify = costmodel.step_time(LLAMA3_8B, H100_SXM, prefill_tokens=[n.k + 1] * n.batch, prefill_context=n.context)
    return speculation.expected_tokens_per_step(n.alpha, n.k) * plain / verify


def _d2(n, draft=DRAFT_1B) -> float:
    return speculation.speculative_speedup(LLAMA3_8B, H100_SXM, 1, n.context, n.k, n.alpha, draft=draft)


def _e(n) -> float:
    return speculation.expected_tokens_per_step(n.alpha, n.k)


def _verify(batch, context, k) -> ServingPoint:
    return ServingPoint.decode(LLAMA3_8B, H100_SXM, batch, context, draft_tokens=k)


DRILLS = Drills("test_drills", (
    Drill("drill_1", "", variant=V["drill_1"], answer=_e, rel_tol=1e-3, points=no_point,
          hints=lambda n: ((1 + n.alpha * n.k, _pitfall("expected_independent")),
                           (_e(n) - 1, _pitfall("expected_no_bonus")),
                           (n.k + 1.0, _pitfall("expected_counts_rejected")))),
    Drill("drill_2", "", variant=V["drill_2"], answer=_d2, rel_tol=0.005,
          points=lambda n: (_verify(1, n.context, n.k),),
          hints=lambda n: ((_d2(n, None), _pitfall("speedup_free_draft")),)),
    Drill("drill_3", "", variant=V["drill_3"], answer=_d3, rel_tol=0.005,
          points=lambda n: (_verify(n.batch, n.context, n.k),),
          hints=lambda n: ((_e(n), _pitfall("speedup_one_token_verify")),
                           (_d3_one_logit_row(n), _pitfall("speedup_one_logit_row")),
                           (_d3(n, H200), "That is the H200's speedup: this drill is about an H100 (3.35 TB/s, not "
                                          "4.8)."))),
    Drill("drill_4", "", variant=V["drill_4"], answer=lambda n: n.batch * (n.k + 1),
          points=lambda n: (_verify(n.batch, 1024, n.k),),
          hints=lambda n: ((n.batch, _pitfall("fit_outside_budget")), (n.batch * n.k, _pitfall("drills_drafts_only")))),
    Drill("drill_5", "", variant=V["drill_5"], answer=d5_answer, points=no_point,
          hints=lambda n: ((0, _pitfall("rollback_keeps_lookahead")), (d5_answer(n) + 1, _pitfall("rollback_floor")),
                           *unless_right(d5_answer(n), ((d5_taken(n), "That is how many look-ahead blocks the step "
                                                                      "took: the accepted drafts keep theirs."),)))),
), read=lambda value, name: ch11.common.as_float(value, name, ch11.common.short_repr(12, 120), finite=True))


CHAPTER = Chapter(
    assignment=ch11.ASSIGNMENT,
    prelude="import dataclasses\nimport math\n\nfrom servelab.analytic import costmodel, speculation\n"
            "from servelab.schedulers import spec_decode\n"
            "from servelab.analytic.costmodel import H100_SXM, H200, LLAMA3_8B, ModelSpec\n"
            "from servelab.analytic.speculation import DRAFT_1B\n"
            "from servelab.schedulers.spec_decode import LookaheadBlockManager, Sequence\n",
    demos=("setup_2", "setup_3", "setup_4", "setup_5", "setup_6"),
    setup=("setup_drills",),
    references=("servelab.schedulers.spec_decode:fit_drafts",
                *(f"servelab.analytic.speculation:{n}" for n in (
                    "expected_tokens_per_step", "speculative_speedup", "crossover_batch", "verify_step_time",
                    "draft_time")),
        *(f"servelab.schedulers.spec_decode:LookaheadBlockManager.{n}" for n in (
            "may_append", "rollback", "blocks_short", "can_append"))),
    exercises=(
        Exercise(S["fit_drafts"], "test_fit_drafts", fixed=_fit_fixed, random=_fit_random),
        Exercise(S["may_append"], "test_may_append", fixed=_append_fixed, random=_append_random),
        Exercise(S["rollback"], "test_rollback", fixed=_rollback_fixed, random=_rollback_random),
        Exercise(S["expected_tokens_per_step"], "test_expected_tokens_per_step", fixed=_expected_fixed,
                 random=_expected_random),
        Exercise(S["speculative_speedup"], "test_speculative_speedup", fixed=_speed_fixed, random=_speed_random),
        Exercise(S["crossover_batch"], "test_crossover_batch", fixed=_cross_fixed, random=_cross_random),
    ),
    drills=DRILLS,
)
