"""Asynchronous scheduling (servelab.schedulers.async_scheduler) generates what synchronous scheduling generates.

Seeded workloads with end-of-sequence tokens, chunked prefills, preemption and prefix-cache hits run through the
synchronous Scheduler (servelab.engine.driver's loop) and the AsyncScheduler (one step in flight); every request's
tokens are the same. The cost of scheduling ahead is counted exactly on hand-made cases.
"""

from __future__ import annotations

import random

import pytest

from servelab.engine.asynchronous import fake_model, run_async
from servelab.engine.driver import Engine
from servelab.schedulers.async_scheduler import AsyncScheduler, Step
from servelab.schedulers.scheduler import SamplingParams, Scheduler, Sequence

VOCAB, EOS = 8, 3   # a small vocabulary, so that end-of-sequence comes up often


def small_vocab_sync(seqs):
    return [(sum(s.token_ids[:s.num_cached_tokens + s.num_scheduled_tokens]) * 31 + 7) % VOCAB for s in seqs]


def small_vocab_async(step: Step):
    return [None if t is None else t % VOCAB for t in _sums(step)]


def _sums(step: Step):
    return [(sum(seq.token_ids[:start + n]) * 31 + 7) if sample else None
            for seq, start, n, sample in zip(step.seqs, step.starts, step.num_scheduled, step.samples)]


def workload(rng: random.Random):
    shared = [rng.randrange(1, 50) for _ in range(rng.choice([0, 4, 9]))]
    reqs = []
    for k in range(rng.randint(1, 12)):
        prompt = (shared if rng.random() < 0.5 else []) + [rng.randrange(1, 50) for _ in range(rng.randint(1, 20))]
        reqs.append((f"r{k}", prompt, rng.randint(1, 12), rng.random() < 0.2))
    config = dict(block_size=rng.choice([1, 2, 4]), max_num_batched_tokens=rng.choice([4, 8, 64]),
                  max_num_seqs=rng.choice([1, 3, 8]), eos=EOS, enable_prefix_caching=rng.random() < 0.7)
    need = max(-(-(len(p) + m - 1) // config["block_size"]) for _, p, m, _ in reqs)
    config["num_blocks"] = need + rng.choice([0, 1, 3, 40])
    return config, reqs


def seqs_of(reqs):
    return [Sequence(p, SamplingParams(max_tokens=m, ignore_eos=ig), name=n) for n, p, m, ig in reqs]


def run_both(config, reqs):
    sync = Scheduler(**config)
    engine = Engine(sync, model=small_vocab_sync)
    mine = seqs_of(reqs)
    engine.run(mine)
    ahead = AsyncScheduler(**config)
    theirs = seqs_of(reqs)
    for s in theirs:
        ahead.add(s)
    steps = run_async(ahead, small_vocab_async)
    return engine.trace, mine, steps, ahead, theirs


def test_every_request_generates_what_it_generates_synchronously():
    seen = {"eos": 0, "chunk": 0, "preempt": 0, "hit": 0, "wasted slot": 0, "wasted block": 0}
    for seed in range(300):
        config, reqs = workload(random.Random(seed))
        trace, sync_seqs, steps, ahead, async_seqs = run_both(config, reqs)
        for a, b in zip(sync_seqs, async_seqs):
            assert b.completion_token_ids == a.completion_token_ids, (seed, a.name)
        assert ahead.block_manager.num_free_blocks == config["num_blocks"], seed    # every block came back
        assert not any(s.num_placeholders for s in async_seqs), seed
        seen["eos"] += any(s.completion_token_ids[-1] == EOS and not s.ignore_eos for s in async_seqs)
        seen["chunk"] += any(s.is_prefill and not s.samples[i] for s in steps for i in range(len(s.seqs)))
        seen["preempt"] += any(s.num_preemptions for s in async_seqs)
        seen["hit"] += any(start > 0 for start in first_starts(steps).values())     # began past a cached prefix
        seen["wasted slot"] += ahead.wasted_slots > 0
        seen["wasted block"] += ahead.wasted_blocks > 0
    assert all(v >= 10 for v in seen.values()), seen


def first_starts(steps):
    """(sequence, preemption count) -> the position its first step started at."""
    out = {}
    for st in steps:
        for seq, start, epoch in zip(st.seqs, st.starts, st.epochs):
            out.setdefault((seq.name, epoch), start)
    return out


def test_a_stop_on_eos_wastes_one_slot_and_a_stop_at_max_tokens_none():
    # the fake model's first token after [1, 2] is (3 * 31 + 7) % 1000 = 100; make that the eos token
    sch = AsyncScheduler(num_blocks=4, block_size=4, max_num_batched_tokens=8, eos=100)
    a = Sequence([1, 2], SamplingParams(max_tokens=5), name="A")
    sch.add(a)
    steps = run_async(sch, fake_model)
    assert a.completion_token_ids == [100]
    assert [st.kind for st in steps] == ["P", "D"]          # the decode of the eos token was already scheduled
    assert sch.wasted_slots == 1 and sch.wasted_blocks == 0  # position 2 sits in block 0: no block taken for it
    sch = AsyncScheduler(num_blocks=4, block_size=4, max_num_batched_tokens=8)
    b = Sequence([1, 2], SamplingParams(max_tokens=3), name="B")
    sch.add(b)
    steps = run_async(sch, fake_model)
    assert len(b.completion_token_ids) == 3 and [st.kind for st in steps] == ["P", "D", "D"]
    assert sch.wasted_slots == 0


def test_the_wasted_decode_may_hold_a_block_taken_for_nothing():
    # prompt of 4 fills block 0: the eos token sampled after it sits at position 4, which opens block 1
    prompt = [1, 2, 3, 4]
    eos = (sum(prompt) * 31 + 7) % 1000
    sch = AsyncScheduler(num_blocks=4, block_size=4, max_num_batched_tokens=8, eos=eos)
    a = Sequence(prompt, SamplingParams(max_tokens=5), name="A")
    sch.add(a)
    run_async(sch, fake_model)
    assert sch.wasted_slots == 1 and sch.wasted_blocks == 1
    assert sch.block_manager.num_free_blocks == 4


def test_the_next_step_is_scheduled_before_the_tokens_exist():
    sch = AsyncScheduler(num_blocks=8, block_size=4, max_num_batched_tokens=16, max_num_seqs=4)
    a = Sequence([5, 6, 7], SamplingParams(max_tokens=4), name="A")
    sch.add(a)
    first = sch.schedule()
    assert first.is_prefill and first.samples == [True] and a.num_placeholders == 1
    second = sch.schedule()                      # step 0 has not returned: decode its placeholder, position 3
    assert not second.is_prefill and second.starts == [3] and a.num_placeholders == 2
    assert len(a) == 3                           # no token id is known yet
    first.tokens = fake_model(first)
    sch.postprocess(first)
    assert len(a) == 4 and a.num_placeholders == 1
    with pytest.raises(ValueError, match="run the model on it first"):
        sch.postprocess(second)


def test_a_preempted_sequence_waits_for_its_token_in_flight():
    # two prompts of 4 tokens fill the 4 blocks of 2: B is preempted while its first token is in flight
    sch = AsyncScheduler(num_blocks=4, block_size=2, max_num_batched_tokens=16, max_num_seqs=4)
    a = Sequence([1, 2, 3, 4], SamplingParams(max_tokens=3), name="A")
    b = Sequence([4, 5, 6, 7], SamplingParams(max_tokens=3), name="B")
    sch.add(a), sch.add(b)
    prefill = sch.schedule()
    assert prefill.is_prefill and [s.name for s in prefill.seqs] == ["A", "B"]
    decode = sch.schedule()                      # A's placeholder at position 4 opens a block: B makes room
    assert [s.name for s in decode.seqs] == ["A"] and b.num_preemptions == 1 and b.num_placeholders == 1
    assert list(sch.waiting) == [b]
    prefill.tokens = fake_model(prefill)
    sch.postprocess(prefill)
    assert len(b) == 5 and b.num_placeholders == 0 and b.num_cached_tokens == 0   # its token arrived, no KV kept
    steps = [prefill, decode, *run_async(sch, fake_model, in_flight=decode)]
    assert any(st.is_prefill and b in st.seqs and st.starts[st.seqs.index(b)] == 0 for st in steps[2:])
    assert a.completion_token_ids == _alone([1, 2, 3, 4], 3) and b.completion_token_ids == _alone([4, 5, 6, 7], 3)


def _alone(prompt, n):
    from servelab.engine.driver import expected

    return expected(prompt, n)


def test_it_refuses_what_can_never_fit_like_the_synchronous_scheduler():
    sch = AsyncScheduler(num_blocks=2, block_size=2, max_num_batched_tokens=8)
    with pytest.raises(ValueError, match="could never finish"):
        sch.add(Sequence([1, 2, 3, 4], SamplingParams(max_tokens=2)))


def test_overlap_speedup_is_the_sum_over_the_longer_of_cpu_and_gpu_time():
    from servelab.schedulers.async_scheduler import overlap_speedup

    assert overlap_speedup(1.0, 1.0) == 2.0 and overlap_speedup(0.0, 3.0) == 1.0
    for r in (0.1, 0.5, 2.0, 10.0):
        assert overlap_speedup(r, 1.0) == pytest.approx(1 + min(r, 1 / r))
    with pytest.raises(ValueError, match="cpu_s must be"):
        overlap_speedup(-1, 1)
    with pytest.raises(ValueError, match="both be 0"):
        overlap_speedup(0, 0)


def test_the_module_examples_hold():
    import doctest

    from servelab.engine import asynchronous
    from servelab.schedulers import async_scheduler

    ran = [doctest.testmod(async_scheduler), doctest.testmod(asynchronous)]
    assert all(r.failed == 0 for r in ran) and ran[0].attempted >= 3 and ran[1].attempted >= 6


def test_wasted_work_of_a_trace_is_what_the_scheduler_counted():
    from servelab.engine.asynchronous import trace_of
    from servelab.schedulers.async_scheduler import wasted_work

    for seed in range(0, 300, 5):
        config, reqs = workload(random.Random(seed))
        _, _, steps, ahead, _ = run_both(config, reqs)
        got = wasted_work(trace_of(steps), {n: [m, ig] for n, _, m, ig in reqs}, config["eos"], config["block_size"])
        assert got == (ahead.wasted_slots, ahead.wasted_blocks), seed
    # a slot after a max_tokens stop would be wasted too, but the scheduler never places one
    assert wasted_work([[["A", 0, 2, 1]], [["A", 2, 1, 5]]], {"A": [1, False]}, 9, 2) == (1, 1)
    with pytest.raises(ValueError, match="block_size"):
        wasted_work([], {}, 9, 0)


def test_walk_shows_the_placeholders_and_the_wasted_slot():
    from servelab.engine.asynchronous import walk

    # the fake model's first token after [1, 2] is 100: make it eos; the decode scheduled for it is wasted
    sch = AsyncScheduler(num_blocks=4, block_size=4, max_num_batched_tokens=8, eos=100)
    sch.add(Sequence([1, 2], SamplingParams(max_tokens=5), name="A"))
    rows = walk(sch)
    assert [r["scheduled"] for r in rows] == ["0 P: A@0", "1 D: A@2?", "-"]
    assert rows[1]["placeholders"] == "A:2" and rows[1]["filled"] == "0: A=100" and rows[1]["finished"] == "A"
    assert rows[1]["wasted"] == 1 and rows[2]["filled"] == "1: A=200 (dropped)"
