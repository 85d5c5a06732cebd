"""Speculative decoding in the simulator (simulate(..., speculation=Speculation(k, alpha, draft, seed))).

Checked against spec_decode's closed forms: tokens per verification step against expected_tokens_per_step, and
the batch where speculation stops paying against crossover_batch (within 10%: the simulated contexts grow over
the run while the closed form holds one). The KV accounting: look-ahead slots taken before the step, rejected
ones given back, every slot home at the end; drafts never push a step past the token budget; off by default.
"""

from __future__ import annotations

import numpy as np
import pytest

from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B
from servelab.analytic.speculation import DRAFT_1B, crossover_batch, expected_tokens_per_step, speculative_speedup
from servelab.simulator import V1, MixedBudget, Requests, Traced, fixed_lengths, simulate
from servelab.simulator.speculative import SpecRun, Speculation
from servelab.simulator.speedup import simulated_speedup
from servelab.simulator.state import ServingState


def _batch(n, prompt=64, output=200):
    return Requests(np.zeros(n), fixed_lengths(n, prompt), fixed_lengths(n, output))


@pytest.mark.parametrize("alpha,k", [(0.5, 2), (0.7, 4), (0.9, 6)])
def test_tokens_per_verification_match_the_closed_form(alpha, k):
    res = simulate(_batch(64), MixedBudget(), LLAMA3_8B, H100_SXM, speculation=Speculation(k, alpha, seed=1))
    st = res.speculation
    assert st.counts[k].sum() > 1000             # near output_len a sequence drafts fewer than k: left out
    assert st.tokens_per_verify_at(k) == pytest.approx(expected_tokens_per_step(alpha, k), rel=0.03)
    assert (res.generated == 200).all()          # never past output_len
    assert st.accepted_tokens + st.released_slots == st.draft_tokens      # each draft accepted or rolled back
    d, e = np.nonzero(st.counts)
    assert (e >= 1).all() and (e <= d + 1).all()                          # the bonus token always comes
    assert st.counts[0].sum() == 0 and st.counts.sum() == st.verify_steps


def test_alpha_one_emits_k_plus_one_and_alpha_zero_only_the_bonus():
    reqs = Requests([0.0] * 4, [64] * 4, [33] * 4)
    every = simulate(reqs, MixedBudget(), LLAMA3_8B, H100_SXM, speculation=Speculation(4, 1.0))
    # 32 tokens after the prefill's: 6 steps of 5 for each sequence, then one drafts 1 and emits 2
    assert every.speculation.counts[4, 5] == 24 and every.speculation.counts[1, 2] == 4
    assert every.speculation.counts.sum() == 28 and every.speculation.released_slots == 0
    none = simulate(reqs, MixedBudget(), LLAMA3_8B, H100_SXM, speculation=Speculation(4, 0.0))
    plain = simulate(reqs, MixedBudget(), LLAMA3_8B, H100_SXM)
    # all drafts rejected: one token a step, as plain decoding, but each step computed five
    assert none.step_end_s.size == plain.step_end_s.size and (none.token_step == plain.token_step).all()
    assert none.speculation.released_slots == none.speculation.draft_tokens > 0
    assert none.step_tokens.sum() > plain.step_tokens.sum()


@pytest.mark.parametrize("context,draft", [(256, None), (320, DRAFT_1B)])
def test_the_simulated_crossover_batch_is_the_closed_forms(context, draft):
    spec = Speculation(4, 0.7, draft=draft, seed=0)
    prompt, output = context - 48, 128           # the full-batch decode steps run at contexts near `context`
    batch = crossover_batch(LLAMA3_8B, H100_SXM, context, 4, 0.7, draft=draft)
    assert batch is not None
    assert simulated_speedup(LLAMA3_8B, H100_SXM, int(batch * 0.9), prompt, output, spec) > 1
    assert simulated_speedup(LLAMA3_8B, H100_SXM, int(batch * 1.1), prompt, output, spec) < 1
    small = simulated_speedup(LLAMA3_8B, H100_SXM, 32, prompt, output, spec)
    assert small == pytest.approx(speculative_speedup(LLAMA3_8B, H100_SXM, 32, context, 4, 0.7, draft), rel=0.05)


def test_drafts_stay_in_the_budget_and_every_slot_comes_back():
    traced = Traced(MixedBudget(max_num_batched_tokens=96, max_num_seqs=64))
    reqs = Requests(np.linspace(0, 0.5, 80), fixed_lengths(80, 40), np.random.default_rng(2).integers(1, 60, 80))
    res = simulate(reqs, traced, LLAMA3_8B, H100_SXM, kv_capacity_tokens=3000,
                   speculation=Speculation(3, 0.6, seed=2))
    st = res.speculation
    assert res.step_tokens.max() <= 96 and st.cut_drafts > 0          # drafts cut, never the budget exceeded
    assert (res.generated == reqs.output_len).all()
    assert st.released_slots == st.draft_tokens - st.accepted_tokens  # simulate asserts every slot came home
    # the policy's own steps are unchanged in shape: one token per decode before the drafts are added
    assert all(n >= 1 for step in traced.steps for _, n in step)


def test_look_ahead_slots_are_taken_before_the_step_and_short_kv_cuts_drafts():
    # two sequences decoding (prompt 8, 3 tokens out, the last without KV), 3 free slots, a budget of 16
    state = ServingState(np.array([8, 8]), np.array([20, 20]), kv_capacity=23)
    state.seq_len[:] = 11
    state.computed[:] = state.reserved[:] = 10
    state.kv_free = 3
    state.running = np.array([0, 1])
    ids = state.reserve_decode_slots(2)                       # the policy's decode slots: one each
    run = SpecRun(Speculation(4, 0.5), budget=16, gpu=H100_SXM, overhead_s=0.0)
    tokens = run.add_drafts(state, ids, np.ones(2, dtype=np.int64))
    assert tokens.tolist() == [2, 1] and state.kv_free == 0   # one slot left for drafts: the first keeps it
    assert state.reserved.tolist() == [12, 11] and run.stats.cut_drafts == 7 and state.preemptions.sum() == 0


def test_off_by_default_and_a_draft_model_costs_time():
    reqs = _batch(16)
    base = simulate(reqs, MixedBudget(), LLAMA3_8B, H100_SXM)
    assert base.speculation is None
    free = simulate(reqs, MixedBudget(), LLAMA3_8B, H100_SXM, speculation=Speculation(4, 0.7, seed=5))
    paid = simulate(reqs, MixedBudget(), LLAMA3_8B, H100_SXM, speculation=Speculation(4, 0.7, DRAFT_1B, seed=5))
    assert free.speculation.draft_s == 0 < paid.speculation.draft_s
    assert (free.token_step == paid.token_step).all()            # same seed, same acceptances
    assert paid.duration_s == pytest.approx(free.duration_s + paid.speculation.draft_s)
    assert free.duration_s < base.duration_s


@pytest.mark.parametrize("kwargs,match", [
    ({"k": 0, "alpha": 0.5}, "k"), ({"k": 2.0, "alpha": 0.5}, "k"), ({"k": True, "alpha": 0.5}, "k"),
    ({"k": 2, "alpha": 1.5}, "alpha"), ({"k": 2, "alpha": -0.1}, "alpha"), ({"k": 2, "alpha": "0.5"}, "alpha"),
    ({"k": 2, "alpha": 0.5, "draft": "small"}, "draft"), ({"k": 2, "alpha": 0.5, "seed": 1.5}, "seed"),
])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Speculation(**kwargs)


def test_bad_combinations():
    reqs = _batch(2)
    with pytest.raises(ValueError, match="Speculation"):
        simulate(reqs, MixedBudget(), LLAMA3_8B, H100_SXM, speculation=(4, 0.7))
    with pytest.raises(ValueError, match="async_scheduling"):
        simulate(reqs, MixedBudget(), LLAMA3_8B, H100_SXM, speculation=Speculation(4, 0.7), async_scheduling=True)
    with pytest.raises(ValueError, match="V1"):
        simulate(reqs, Traced(V1()), LLAMA3_8B, H100_SXM, speculation=Speculation(4, 0.7))
