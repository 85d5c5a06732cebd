"""servelab.engine.prefix_compare: the block-hash cache (nano-vllm's BlockManager) against the radix cache, on the
lesson's shared system prompt, multi-turn chats and few-shot prompts."""

import doctest

import pytest

import servelab.engine.prefix_compare as prefix_compare_module
from servelab.analytic.costmodel import LLAMA2_7B, KiB
from servelab.engine.driver import expected
from servelab.engine.prefix_compare import (
    Request,
    Workload,
    compare,
    few_shot_prompts,
    min_cache_tokens,
    multi_turn_chats,
    run_block_hash,
    run_radix,
    shared_system_prompt,
    sweep_cache_sizes,
)


def test_docstring_examples():
    result = doctest.testmod(prefix_compare_module)
    assert result.attempted >= 2 and result.failed == 0


def test_the_lessons_figures():
    """100 requests sharing a 2000-token prompt skip 99 * 2000 = 198,000 prefill tokens; one copy of the prompt is
    2000 x 512 KiB = 1000 MiB of LLaMA-2-7B KV. Blocks of 16 tile the prompt exactly; blocks of 256 reuse 7."""
    w = shared_system_prompt(n_requests=100, prompt_len=2000, seed=0)
    radix, block16, block256 = compare(w, cache_tokens=8192, block_sizes=(16, 256))
    assert radix.label == "radix (page 1)" and radix.skipped == 198_000 == 99 * 2000
    assert block16.skipped == 198_000 and block256.skipped == 99 * 7 * 256 == 177_408
    assert radix.requested == block16.requested == block256.requested == w.prompt_tokens
    assert radix.preemptions == block16.preemptions == 0
    assert 2000 * LLAMA2_7B.kv_bytes_per_token / (KiB * KiB) == 1000


def test_workloads_are_deterministic_and_shaped_as_described():
    assert shared_system_prompt(5, 40, seed=3) == shared_system_prompt(5, 40, seed=3)
    w = shared_system_prompt(n_requests=50, prompt_len=30, seed=1)
    assert len({r.prompt[:30] for r in w.requests}) == 1 and len({r.prompt[30] for r in w.requests}) == 50
    assert [r.arrival for r in w.requests] == list(range(50))

    chats = multi_turn_chats(n_chats=3, turns=3, seed=2)
    by_name = {r.name: r for r in chats.requests}
    for c in range(3):
        for t in range(1, 3):
            prev, cur = by_name[f"c{c}t{t - 1}"], by_name[f"c{c}t{t}"]
            history = list(prev.prompt) + expected(list(prev.prompt), prev.max_tokens)
            assert list(cur.prompt[:len(history)]) == history and cur.after == prev.name
    shots = few_shot_prompts(n_requests=20, instruction_len=10, seed=0)
    assert len({r.prompt[:10] for r in shots.requests}) == 1


def test_radix_reuses_at_least_as_much_as_blocks_and_pages_behave_like_blocks():
    for w in (multi_turn_chats(seed=0), few_shot_prompts(seed=0)):
        radix1, radix16, block16, block256 = compare(w, 4096, block_sizes=(16, 256), page_sizes=(1, 16))
        assert radix1.skipped > block16.skipped > block256.skipped == 0    # these prompts are below one 256 block
        assert radix16.skipped <= radix1.skipped
        assert abs(radix16.skipped - block16.skipped) <= 16 * len(w)


def test_a_follow_up_turn_arrives_after_its_predecessor_finished():
    run = run_radix(multi_turn_chats(n_chats=2, turns=3, think=5, seed=0), cache_tokens=4096)
    assert run.hit_rate > 0.5 and run.preemptions == 0


def test_sweep_skips_sizes_too_small_and_hit_rate_grows_with_the_cache():
    w = multi_turn_chats(n_chats=8, turns=5, seed=0)
    floor = min_cache_tokens(w, 16)
    sweep = sweep_cache_sizes(w, [floor - 16, 256, 1024, 4096], block_size=16)
    assert set(sweep) == {"radix (page 1)", "block hash (16)"}
    for runs in sweep.values():
        assert [r.cache_tokens for r in runs] == [256, 1024, 4096]
        assert runs[0].hit_rate < runs[-1].hit_rate
    assert sweep["radix (page 1)"][0].preemptions > 0


def test_bad_workloads_are_refused():
    with pytest.raises(ValueError, match="request names must be unique"):
        run_radix(Workload("dup", (Request("a", (1, 2), 1), Request("a", (3,), 1))), 64)
    with pytest.raises(ValueError, match="follows 'nobody', which is not in the workload"):
        run_radix(Workload("orphan", (Request("a", (1, 2), 1, after="nobody"),)), 64)
    with pytest.raises(RuntimeError, match="was chunked; raise the budget"):
        run_block_hash(Workload("long", (Request("a", tuple(range(40)), 1),)), 64, block_size=4,
                       max_num_batched_tokens=16)
