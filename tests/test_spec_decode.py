"""Speculative decoding in the nano-vllm Scheduler (servelab.schedulers.spec_decode): the accounting, look-ahead slots
and rollback, and greedy verification that appends exactly what plain decoding appends.

Seeded workloads with end-of-sequence tokens, chunked prefills, preemption and prefix-cache hits run with and
without speculation (drafts right with a seeded probability); every request's tokens are the same, every block
comes back, and the bookkeeping is checked step by step on hand-made cases.
"""

from __future__ import annotations

import random

import pytest

from servelab.analytic import costmodel
from servelab.engine.driver import Engine, expected
from servelab.engine.speculative import accept_greedy, fake_target, oracle_proposer, run_speculative, trace_speculative
from servelab.schedulers.scheduler import SamplingParams, Scheduler, Sequence
from servelab.schedulers.spec_decode import SpecScheduler, fit_drafts

VOCAB, EOS = 8, 3


def small_target(tokens):
    return fake_target(tokens) % VOCAB


def small_vocab_sync(seqs):
    return [small_target(s.token_ids[:s.num_cached_tokens + s.num_scheduled_tokens]) for s in seqs]


def random_proposer(rng: random.Random, alpha: float):
    """Each draft equals the target's token with probability alpha, given the drafts before it were right."""
    def propose(seq, k):
        context, out = list(seq.token_ids), []
        for _ in range(k):
            t = small_target(context)
            d = t if rng.random() < alpha else (t + 1) % VOCAB
            out.append(d)
            context.append(d)
        return out
    return propose


def workload(rng: random.Random):
    shared = [rng.randrange(1, 50) for _ in range(rng.choice([0, 4, 9]))]
    reqs = []
    for k in range(rng.randint(1, 10)):
        prompt = (shared if rng.random() < 0.5 else []) + [rng.randrange(1, 50) for _ in range(rng.randint(1, 16))]
        reqs.append((f"r{k}", prompt, rng.randint(1, 14), rng.random() < 0.3))
    config = dict(block_size=rng.choice([1, 2, 4]), max_num_batched_tokens=rng.choice([4, 8, 64]),
                  max_num_seqs=rng.choice([1, 3, 8]), eos=EOS, enable_prefix_caching=rng.random() < 0.7)
    k = rng.choice([1, 2, 4])
    need = max(-(-(len(p) + m - 1 + k) // config["block_size"]) for _, p, m, _ in reqs)
    config["num_blocks"] = need + rng.choice([0, 1, 3, 40])
    return config, k, reqs


def seqs_of(reqs):
    return [Sequence(p, SamplingParams(max_tokens=m, ignore_eos=ig), name=n) for n, p, m, ig in reqs]


def test_speculation_generates_what_plain_decoding_generates():
    seen = {"released": 0, "preempt": 0, "cut": 0, "eos": 0, "accepted": 0, "rejected": 0}
    for seed in range(250):
        rng = random.Random(seed)
        config, k, reqs = workload(rng)
        plain = seqs_of(reqs)
        Engine(Scheduler(**config), model=small_vocab_sync).run(plain)
        spec = SpecScheduler(**config, num_speculative_tokens=k)
        mine = seqs_of(reqs)
        for s in mine:
            spec.add(s)
        preempt = spec.preempt
        count = {"preempt": 0}

        def counting(seq, _real=preempt, _count=count):
            _count["preempt"] += 1
            _real(seq)
        spec.preempt = counting
        steps = run_speculative(spec, random_proposer(rng, rng.choice([0.3, 0.7, 0.95])), small_target)
        for a, b in zip(plain, mine):
            assert b.completion_token_ids == a.completion_token_ids, (seed, a.name)
        assert spec.block_manager.num_free_blocks == config["num_blocks"], seed
        # drafts only fill what the one-token decodes leave of the budget
        assert all(n <= max(config["max_num_batched_tokens"], b) for n, b, prefill in steps if not prefill), seed
        seen["released"] += spec.num_released_blocks > 0
        seen["preempt"] += count["preempt"] > 0
        seen["cut"] += spec.num_cut_draft_tokens > 0
        seen["eos"] += any(s.completion_token_ids and s.completion_token_ids[-1] == EOS and not s.ignore_eos
                           for s in mine)
        seen["accepted"] += spec.num_accepted_tokens > 0
        seen["rejected"] += spec.num_draft_tokens > spec.num_accepted_tokens
    assert all(v >= 10 for v in seen.values()), seen


def test_a_verification_step_schedules_b_times_k_plus_one_tokens_and_cuts_drafts_to_the_budget():
    sch = SpecScheduler(num_blocks=32, block_size=4, max_num_batched_tokens=64, max_num_seqs=4,
                        num_speculative_tokens=3)
    seqs = [Sequence([i + 1, i + 2], SamplingParams(max_tokens=10), name=f"s{i}") for i in range(4)]
    for s in seqs:
        sch.add(s)
    seqs_, is_prefill = sch.schedule()
    sch.postprocess(seqs_, [[fake_target(s.token_ids)] for s in seqs_], True)
    for s in seqs:
        s.draft_token_ids = [7, 7, 7]
    batch, is_prefill = sch.schedule()
    assert not is_prefill and [s.num_scheduled_tokens for s in batch] == [4, 4, 4, 4]   # B * (k + 1) = 16
    sch.postprocess(batch, [accept_greedy(s) for s in batch], False)
    sch.max_num_batched_tokens = 10        # four decode tokens first; the 6 left go to the first two's drafts
    for s in seqs:
        s.draft_token_ids = [7, 7, 7]
    batch, _ = sch.schedule()
    assert [s.num_scheduled_tokens for s in batch] == [4, 4, 1, 1]


def test_look_ahead_blocks_are_taken_before_the_step_and_given_back_on_rejection():
    # prompt of 4 in blocks of 4; after the prefill the last token (position 4) opens block 1, and 3 drafts
    # (positions 5-7) fit in it; with 4 drafts position 8 needs block 2 as well
    truth = expected([1, 2, 3, 4], 12)
    sch = SpecScheduler(num_blocks=8, block_size=4, max_num_batched_tokens=32, num_speculative_tokens=4)
    a = Sequence([1, 2, 3, 4], SamplingParams(max_tokens=12), name="A")
    sch.add(a)
    seqs, _ = sch.schedule()
    sch.postprocess(seqs, [[truth[0]]], True)
    assert len(a.block_table) == 1 and a.num_cached_tokens == 4
    a.draft_token_ids = [truth[1], truth[2] + 1, 0, 0]      # one right, then wrong
    seqs, is_prefill = sch.schedule()
    assert not is_prefill and len(a.block_table) == 3 and a.num_scheduled_tokens == 5   # look-ahead: 2 blocks
    sch.postprocess(seqs, [accept_greedy(a)], False)
    assert a.completion_token_ids == truth[:3]                # the accepted draft and the bonus token
    assert a.num_cached_tokens == 6                            # positions 0-5 have KV; the rest was rolled back
    assert len(a.block_table) == 2 and sch.num_released_blocks == 1
    assert sch.num_draft_tokens == 4 and sch.num_accepted_tokens == 1   # rejected drafts are not generated tokens


def test_only_blocks_of_accepted_tokens_are_hashed():
    truth = expected([5, 6, 7], 8)
    sch = SpecScheduler(num_blocks=8, block_size=2, max_num_batched_tokens=32, num_speculative_tokens=3)
    a = Sequence([5, 6, 7], SamplingParams(max_tokens=8), name="A")
    sch.add(a)
    seqs, _ = sch.schedule()
    sch.postprocess(seqs, [[truth[0]]], True)                  # block 0 = [5, 6] hashed; position 2 in block 1
    a.draft_token_ids = [truth[1] + 1, 0, 0]                    # all wrong: only the last token's KV stays
    seqs, _ = sch.schedule()
    sch.postprocess(seqs, [accept_greedy(a)], False)
    hashed = [b for b in sch.block_manager.blocks if b.hash != -1]
    assert [b.token_ids for b in hashed] == [[5, 6], [7, truth[0]]]   # block 1 holds two accepted tokens
    assert a.num_cached_tokens == 4 and len(a.block_table) == 2


def test_a_stop_inside_the_accepted_tokens_drops_the_rest():
    truth = expected([1, 2], 6)
    sch = SpecScheduler(num_blocks=8, block_size=4, max_num_batched_tokens=32, num_speculative_tokens=3,
                        eos=truth[2])
    a = Sequence([1, 2], SamplingParams(max_tokens=6), name="A")
    sch.add(a)
    steps = run_speculative(sch, oracle_proposer(truth, accept=[3]))
    assert a.completion_token_ids == truth[:3] and [n for n, _, _ in steps] == [2, 4]
    assert sch.block_manager.num_free_blocks == 8


def test_malformed_verification_and_parameters_are_refused():
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        SpecScheduler(num_blocks=4, block_size=4, max_num_batched_tokens=8, num_speculative_tokens=-1)
    sch = SpecScheduler(num_blocks=8, block_size=4, max_num_batched_tokens=16, num_speculative_tokens=2)
    a = Sequence([1, 2], SamplingParams(max_tokens=6), name="A")
    sch.add(a)
    seqs, _ = sch.schedule()
    sch.postprocess(seqs, [[fake_target(a.token_ids)]], True)
    a.draft_token_ids = [4, 5]
    seqs, _ = sch.schedule()
    with pytest.raises(ValueError, match="accepted drafts and one bonus token"):
        sch.postprocess(seqs, [[9, 9, 9, 9]], False)


# ---- the closed forms -----------------------------------------------------------------------------------------

def test_expected_tokens_per_step_is_the_geometric_sum_and_what_a_run_appends():
    from servelab.analytic.speculation import expected_tokens_per_step

    for alpha in (0.0, 0.3, 0.7, 0.95, 1.0):
        for k in (0, 1, 4):
            assert expected_tokens_per_step(alpha, k) == pytest.approx(sum(alpha ** i for i in range(k + 1)))
    # simulated: one long request, drafts right with probability 0.7 each, k = 4, no max_tokens cap in reach
    rng = random.Random(7)
    sch = SpecScheduler(num_blocks=800, block_size=4, max_num_batched_tokens=64, num_speculative_tokens=4)
    a = Sequence([1, 2, 3], SamplingParams(max_tokens=3000, ignore_eos=True), name="A")
    sch.add(a)
    steps = run_speculative(sch, random_proposer(rng, 0.7), small_target)
    decodes = [n for n, _, prefill in steps if not prefill]
    full = decodes[:-3]                               # the last steps propose fewer drafts near max_tokens
    per_step = (sch.num_accepted_tokens + len(decodes)) / len(decodes)
    assert all(n == 5 for n in full)
    assert per_step == pytest.approx(expected_tokens_per_step(0.7, 4), rel=0.05)


def test_speculation_pays_at_batch_one_and_its_crossover_is_the_first_losing_batch():
    from servelab.analytic.costmodel import H100_SXM, LLAMA2_7B, LLAMA3_8B
    from servelab.analytic.speculation import crossover_batch, expected_tokens_per_step, speculative_speedup

    # batch 1 is memory-bound with or without drafts: the step costs the same, so the speedup is E tokens
    assert speculative_speedup(LLAMA3_8B, H100_SXM, 1, 512, 4, 0.7) == pytest.approx(
        expected_tokens_per_step(0.7, 4), rel=1e-3)
    assert speculative_speedup(LLAMA3_8B, H100_SXM, 64, 512, 0, 0.7) == 1.0     # no drafts: no change
    draft = costmodel.ModelSpec("draft", num_layers=4, hidden_size=1024, num_heads=8, num_kv_heads=8, head_dim=128,
                                intermediate_size=2816, vocab_size=128256)
    for model, context, k, alpha, d in [(LLAMA3_8B, 128, 4, 0.7, None), (LLAMA3_8B, 256, 2, 0.6, draft),
                                        (LLAMA2_7B, 128, 4, 0.7, None), (LLAMA3_8B, 2048, 4, 0.7, None)]:
        speedups = [speculative_speedup(model, H100_SXM, b, context, k, alpha, d) for b in range(1, 1500)]
        first = next((b for b, s in enumerate(speedups, start=1) if s <= 1), None)
        assert crossover_batch(model, H100_SXM, context, k, alpha, d, max_batch=1499) == first
        if first is not None:
            assert speedups[0] > 1 and speedups[first - 2] > 1
    assert crossover_batch(LLAMA3_8B, H100_SXM, 2048, 4, 0.7) is None   # long contexts: KV reads keep it memory-bound
    # a draft model's own steps cost time at every batch: speculation loses sooner than with free drafts
    assert crossover_batch(LLAMA3_8B, H100_SXM, 256, 4, 0.7, draft) < crossover_batch(LLAMA3_8B, H100_SXM, 256, 4, 0.7)


def test_a_verification_pays_the_lm_head_at_every_position_it_checks():
    from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B, step_cost
    from servelab.analytic.speculation import crossover_batch, verify_step_time

    # k + 1 logit rows a sequence: the verify step's LM-head FLOPs are (k + 1) x a prefill chunk's
    chunk = step_cost(LLAMA3_8B, H100_SXM, prefill_tokens=[5] * 64, prefill_context=256)
    verify = step_cost(LLAMA3_8B, H100_SXM, prefill_tokens=[5] * 64, prefill_context=256, logit_rows=320)
    assert verify.lm_head_flops == 5 * chunk.lm_head_flops and verify.matmul_flops == chunk.matmul_flops
    assert verify_step_time(LLAMA3_8B, H100_SXM, 64, 256, 4) == verify.seconds()
    # the dearer step loses sooner than one LM-head row a sequence would say (320 at 256 tokens)
    assert crossover_batch(LLAMA3_8B, H100_SXM, 256, 4, 0.7) == 292
    with pytest.raises(ValueError, match="logit_rows"):
        step_cost(LLAMA3_8B, H100_SXM, prefill_tokens=[5] * 2, logit_rows=11)


def test_only_the_batches_the_kv_cache_holds_fit():
    from servelab.analytic import capacity
    from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B
    from servelab.analytic.speculation import fits

    ceiling = capacity.kv_ceiling(LLAMA3_8B, H100_SXM, 1024 + 5)    # each holds its context, token and 4 drafts
    assert fits(LLAMA3_8B, H100_SXM, ceiling, 1024, 4) and not fits(LLAMA3_8B, H100_SXM, ceiling + 1, 1024, 4)
    assert not fits(LLAMA3_8B, H100_SXM, 1025, 64, 4)                # past max_num_seqs


def test_bad_parameters_of_the_closed_forms_are_refused():
    from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B
    from servelab.analytic.speculation import expected_tokens_per_step, speculative_speedup

    with pytest.raises(ValueError, match="alpha"):
        expected_tokens_per_step(1.5, 3)
    with pytest.raises(ValueError, match="k must be"):
        expected_tokens_per_step(0.5, -1)
    with pytest.raises(ValueError, match="batch must be"):
        speculative_speedup(LLAMA3_8B, H100_SXM, 0, 512, 4, 0.7)
    with pytest.raises(ValueError, match="context_len must be"):
        speculative_speedup(LLAMA3_8B, H100_SXM, 1, -5, 4, 0.7)


def test_the_module_examples_hold():
    import doctest

    from servelab.analytic import speculation
    from servelab.engine import speculative
    from servelab.schedulers import spec_decode

    ran = [doctest.testmod(spec_decode), doctest.testmod(speculation), doctest.testmod(speculative)]
    assert all(r.failed == 0 for r in ran) and [r.attempted >= 4 for r in ran] == [True] * 3


def test_fit_drafts_gives_every_decode_its_token_first_then_drafts_in_running_order():
    assert fit_drafts([3, 3, 3], 8) == [3, 2, 0]
    assert fit_drafts([4, 4], 2) == [0, 0] and fit_drafts([], 5) == []
    assert fit_drafts([1, 5, 2], 7) == [1, 3, 0]
    for wanted, budget in (([2, 2, 2, 2], 9), ([5, 0, 5], 6), ([3] * 10, 40)):
        kept = fit_drafts(wanted, budget)
        assert len(wanted) + sum(kept) <= max(budget, len(wanted)) and all(0 <= k <= w for k, w in zip(kept, wanted))


def test_the_worked_trace_records_look_ahead_blocks_taken_and_given_back():
    sch = SpecScheduler(num_blocks=8, block_size=4, max_num_batched_tokens=16, num_speculative_tokens=3)
    sch.add(Sequence([1, 2, 3], SamplingParams(max_tokens=9), name="A"))
    rows = trace_speculative(sch, oracle_proposer(expected([1, 2, 3], 9), accept=[0, 3, 1]))
    assert [(r["drafts"], r["accepted"], r["appended"], r["taken"], r["given_back"]) for r in rows] == [
        (3, 0, 1, 1, 1), (3, 3, 4, 1, 0), (2, 1, 2, 1, 0), (0, 0, 1, 0, 0)]
    assert rows[-1]["finished"] and sch.block_manager.num_free_blocks == 8
    assert sch.num_released_blocks == sum(r["given_back"] for r in rows) == 1
