"""servelab.schedulers.radix_scheduler: the token-slot KV pool and the scheduler that serves requests through the radix
cache.

Worked cases pin SGLang's request lifecycle (match and lock on admission, insert and move the lock after the
prefill, evict when the pool is short, retract the last admitted request when nothing is evictable, insert and
unlock on finish and preemption); seeded random workloads check, after every step, that every slot is in exactly
one place, that every request reads its own tokens back through its KV slots, and that each request generates
what it generates alone.
"""

import doctest
import random

import pytest

import servelab.engine.radix as radix_engine_module
import servelab.schedulers.radix_scheduler as radix_scheduler_module
from servelab.engine.driver import expected
from servelab.engine.radix import RadixEngine, lpm_starvation, radix_table
from servelab.schedulers.radix_cache import RadixCache
from servelab.schedulers.radix_scheduler import (
    CLIP_MAX_NEW_TOKENS,
    RadixScheduler,
    Req,
    TokenToKVPoolAllocator,
    decode_reservation,
    ratio_after_retract,
)

SYSTEM = list(range(100, 110))


def test_docstring_examples():
    ran = [doctest.testmod(radix_scheduler_module), doctest.testmod(radix_engine_module)]
    assert all(r.failed == 0 for r in ran) and ran[0].attempted >= 7 and ran[1].attempted >= 9


# ---- the pool and the request -----------------------------------------------------------------------------

def test_pool_hands_out_the_first_free_slots_and_takes_them_back_at_the_end():
    pool = TokenToKVPoolAllocator(5)
    assert pool.alloc(2) == [0, 1] and pool.alloc(4) is None and pool.available_size() == 3
    pool.free([1, 0])
    assert pool.alloc(4) == [2, 3, 4, 1] and pool.alloc(0) == []


def test_pool_refuses_double_frees_and_foreign_slots():
    pool = TokenToKVPoolAllocator(4)
    pool.alloc(2)
    with pytest.raises(ValueError, match="slot 3 is freed twice"):
        pool.free([3])
    with pytest.raises(ValueError, match="slot 1 is freed twice"):
        pool.free([1, 1])
    with pytest.raises(ValueError, match="slot 9 is not in this pool"):
        pool.free([9])
    assert pool.available_size() == 2
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ValueError, match="size must be an int >= 1"):
            TokenToKVPoolAllocator(bad)
    with pytest.raises(ValueError, match="need_size must be an int >= 0"):
        pool.alloc(-1)


def test_request_validation():
    with pytest.raises(ValueError, match="at least one prompt token"):
        Req([], 1)
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 1"):
        Req([1], 0)
    r = Req([1, 2], 3, name="A")
    r.output_ids += [7, 8]
    assert r.token_ids == [1, 2, 7, 8] and len(r) == 4 and r.completion_token_ids == [7, 8]


def test_scheduler_validation():
    with pytest.raises(ValueError, match="policy must be one of"):
        RadixScheduler(kv_capacity_tokens=8, max_num_batched_tokens=8, policy="lifo")
    with pytest.raises(ValueError, match="max_num_batched_tokens must be an int >= 1"):
        RadixScheduler(kv_capacity_tokens=8, max_num_batched_tokens=0)
    with pytest.raises(ValueError, match="max_num_seqs must be an int >= 1"):
        RadixScheduler(kv_capacity_tokens=8, max_num_batched_tokens=8, max_num_seqs=0)
    for bad in (0, 1.5, -0.1, True, "0.7"):
        with pytest.raises(ValueError, match=r"new_token_ratio must be None or a number in \(0, 1\]"):
            RadixScheduler(kv_capacity_tokens=8, max_num_batched_tokens=8, new_token_ratio=bad)
    sch = RadixScheduler(kv_capacity_tokens=8, max_num_batched_tokens=8)
    with pytest.raises(ValueError, match="can grow to 9 tokens with KV but the pool has only 8 slots"):
        sch.add(Req(list(range(6)), 4, name="big"))
    sch.add(Req(list(range(6)), 3, name="fits"))


# ---- the lifecycle, step by step -----------------------------------------------------------------------------

def test_admission_matches_locks_and_allocates_only_what_missed():
    sch = RadixScheduler(kv_capacity_tokens=64, max_num_batched_tokens=64)
    engine = RadixEngine(sch)
    engine.run([Req(SYSTEM + [1], 1, name="A")])                 # A is cached whole (it has 11 tokens with KV)
    tree, pool = sch.tree_cache, sch.token_to_kv_pool_allocator
    assert (tree.total_size(), tree.protected_size(), pool.available_size()) == (11, 0, 53)
    b = Req(SYSTEM + [2, 3], 3, name="B")
    sch.add(b)
    reqs, is_prefill = sch.schedule()
    assert is_prefill and reqs == [b]
    # the hit is the system prompt; the lock covers exactly it; only the 2 missed tokens got new slots
    assert (b.num_cached_tokens, b.num_scheduled_tokens, len(b.prefix_indices)) == (10, 2, 10)
    assert b.prefix_indices == tree.path_device_indices(b.last_node) and b.kv_indices[:10] == b.prefix_indices
    assert (tree.protected_size(), tree.evictable_size(), pool.available_size()) == (10, 1, 51)


def test_after_the_prefill_the_prompt_is_in_the_tree_and_the_lock_moves_to_its_end():
    sch = RadixScheduler(kv_capacity_tokens=64, max_num_batched_tokens=64)
    a = Req(SYSTEM + [1, 2], 3, name="A")
    sch.add(a)
    reqs, is_prefill = sch.schedule()
    assert sch.tree_cache.total_size() == 0 and a.last_node is sch.tree_cache.root_node
    sch.postprocess(reqs, [7], is_prefill)
    assert sch.tree_cache.protected_size() == 12 and a.prefix_indices == a.kv_indices
    assert a.last_node.key == tuple(SYSTEM + [1, 2]) and a.last_node.lock_ref == 1


def test_two_requests_with_one_prompt_in_one_step_share_nothing_until_the_second_is_cached():
    sch = RadixScheduler(kv_capacity_tokens=64, max_num_batched_tokens=64)
    a, b = Req(SYSTEM, 2, name="A"), Req(SYSTEM, 2, name="B")
    trace = RadixEngine(sch).run([a, b], arrivals={1: [Req(SYSTEM + [5], 1, name="C")]})
    assert trace[0].scheduled == [("A", 10), ("B", 10)] and trace[0].cached == [("A", 0), ("B", 0)]
    # A's prompt went into the tree first in that postprocess: B's 10 prompt slots were duplicates, freed at once,
    # and B reads A's from then on
    assert b.output_ids == a.output_ids
    assert trace[1].cached == [("C", 10)]
    # the tree: the prompt, A's first answer token (B's was the same), C's last token: 12 slots
    assert sch.tree_cache.protected_size() == 0 and sch.tree_cache.total_size() == 12
    assert sch.token_to_kv_pool_allocator.available_size() == 64 - 12


def test_finish_caches_the_answer_so_a_follow_up_turn_hits_it():
    sch = RadixScheduler(kv_capacity_tokens=64, max_num_batched_tokens=64)
    a = Req([1, 2, 3, 4], 6, name="A")
    RadixEngine(sch).run([a])
    follow_up = a.token_ids + [9, 9]
    trace = RadixEngine(sch).run([Req(follow_up, 1, name="B")])
    assert trace[0].cached == [("B", 4 + 6 - 1)]      # the last answer token was sampled but has no KV


def test_the_walk_through_evicts_then_preempts_and_the_preempted_request_hits_its_own_kv():
    first = [Req(SYSTEM + [1, 2], 6, name="A")]
    later = {1: [Req(SYSTEM + [3], 6, name="B")], 2: [Req([7] * 8, 8, name="C")]}
    sch = RadixScheduler(kv_capacity_tokens=32, max_num_batched_tokens=64, max_num_seqs=3)
    trace = RadixEngine(sch).run(first, arrivals=later)
    rows = [(r.kind, r.scheduled, r.cached, r.preempted, r.available, r.evictable, r.protected) for r in trace]
    assert rows[1] == ("P", [("B", 1)], [("B", 10)], [], 19, 0, 12)
    assert rows[3][-1] == 21                                           # A 12 + B 1 + C 8 protected
    assert rows[6] == ("D", [("A", 1), ("B", 1)], [("A", 15), ("B", 14)], ["C"], 0, 11, 13)
    assert rows[8] == ("P", [("C", 4)], [("C", 8)], [], 2, 18, 8)     # C's prompt survived eviction
    assert all(r.output_ids == expected(r.origin_input_ids, r.max_new_tokens) for r in first + later[1] + later[2])


def test_admission_evicts_when_the_pool_is_short_and_waits_when_even_that_is_not_enough():
    sch = RadixScheduler(kv_capacity_tokens=20, max_num_batched_tokens=64, max_num_seqs=4)
    engine = RadixEngine(sch)
    engine.run([Req(list(range(12)), 1, name="old")])                # 12 tokens stay in the tree, unlocked
    assert sch.token_to_kv_pool_allocator.available_size() == 8
    engine.run([Req(list(range(50, 60)), 2, name="new")])            # needs 10: evicts the old prompt
    assert sch.tree_cache.match_prefix(list(range(12)))[0] == []
    # a running request locks its prompt: the next one does not fit and waits, the step decodes instead
    sch2 = RadixScheduler(kv_capacity_tokens=20, max_num_batched_tokens=64, max_num_seqs=4)
    sch2.add(Req(list(range(12)), 3, name="R"))
    sch2.postprocess(*(lambda r: (r[0], [1], r[1]))(sch2.schedule()))
    sch2.add(Req(list(range(30, 40)), 1, name="W"))
    reqs, is_prefill = sch2.schedule()
    assert not is_prefill and [r.name for r in reqs] == ["R"] and [r.name for r in sch2.waiting] == ["W"]


def test_the_first_request_of_a_step_may_exceed_the_budget_later_ones_must_fit():
    sch = RadixScheduler(kv_capacity_tokens=64, max_num_batched_tokens=8, max_num_seqs=4)
    trace = RadixEngine(sch).run([Req(list(range(12)), 1, name="A"), Req([50, 51], 1, name="B"),
                                  Req([60], 1, name="C")])
    assert trace[0].scheduled == [("A", 12)] and trace[1].scheduled == [("B", 2), ("C", 1)]


def test_lpm_sorts_by_matched_length_and_starves_a_request_that_shares_nothing():
    assert lpm_starvation("fcfs", n_hot=4)[1] == 3 and lpm_starvation("lpm", n_hot=4)[1] == 15
    assert lpm_starvation("lpm", n_hot=8)[1] == 27
    trace, _ = lpm_starvation("lpm", n_hot=4)
    assert [n for r in trace if r.is_prefill for n, _ in r.scheduled] == ["H0", "H1", "H2", "H3", "H4", "L"]


def test_page_size_keeps_unaligned_tails_private_and_frees_them():
    sch = RadixScheduler(kv_capacity_tokens=40, max_num_batched_tokens=64, max_num_seqs=3, page_size=2)
    a = Req([1, 2, 3, 4, 5], 4, name="A")
    trace = RadixEngine(sch).run([a], arrivals={1: [Req([1, 2, 3, 4, 6, 6, 6], 3, name="B")]})
    assert trace[1].cached == [("B", 4)]
    assert sch.tree_cache.total_size() % 2 == 0 and sch.tree_cache.protected_size() == 0
    assert sch.token_to_kv_pool_allocator.available_size() + sch.tree_cache.total_size() == 40


def test_disabled_cache_reuses_nothing_and_frees_everything():
    sch = RadixScheduler(kv_capacity_tokens=64, max_num_batched_tokens=64, enable_prefix_caching=False)
    trace = RadixEngine(sch).run([Req(SYSTEM, 2, name="A")], arrivals={1: [Req(SYSTEM + [1], 2, name="B")]})
    assert all(k == 0 for r in trace if r.is_prefill for _, k in r.cached)
    assert sch.token_to_kv_pool_allocator.available_size() == 64 and sch.tree_cache.total_size() == 0


def test_a_request_that_stops_at_eos():
    prompt = [5, 6, 7]
    eos = expected(prompt, 3)[1]
    sch = RadixScheduler(kv_capacity_tokens=32, max_num_batched_tokens=32, eos=eos)
    a = Req(prompt, 5, name="A", ignore_eos=False)
    RadixEngine(sch).run([a])
    assert a.output_ids == expected(prompt, 2) and a.is_finished


def test_cache_class_swaps_the_tree():
    class Counting(RadixCache):
        calls = 0

        def evict(self, num_tokens):
            Counting.calls += 1
            return super().evict(num_tokens)

    class Sch(RadixScheduler):
        cache_class = Counting

    sch = Sch(kv_capacity_tokens=16, max_num_batched_tokens=16)
    RadixEngine(sch).run([Req(list(range(10)), 1, name="A"), Req(list(range(20, 30)), 1, name="B")])
    assert isinstance(sch.tree_cache, Counting) and Counting.calls >= 1


# ---- the checks catch book-keeping bugs ------------------------------------------------------------------------

def test_the_slot_model_and_the_invariants_catch_a_slot_with_two_owners():
    class Leaky(RadixScheduler):
        def cache_finished_req(self, req):          # frees the tree's slots too
            super().cache_finished_req(req)
            self.token_to_kv_pool_allocator.free(self.tree_cache.all_values_flatten()[:1])

    with pytest.raises(RuntimeError, match="slot 0 is both"):
        RadixEngine(Leaky(kv_capacity_tokens=32, max_num_batched_tokens=32)).run([Req([1, 2, 3], 1, name="A")])

    class Forgetful(RadixScheduler):
        def cache_finished_req(self, req):          # drops its slots on the floor
            self.tree_cache.dec_lock_ref(req.last_node)
            req.kv_indices, req.prefix_indices, req.last_node = [], [], None

    with pytest.raises(RuntimeError, match="3 slots leaked"):
        RadixEngine(Forgetful(kv_capacity_tokens=32, max_num_batched_tokens=32)).run([Req([1, 2, 3], 1, name="A")])

    sch = RadixScheduler(kv_capacity_tokens=32, max_num_batched_tokens=32)
    sch.add(Req([1, 2, 3], 2, name="A"))
    engine = RadixEngine(sch)
    engine.step()
    sch.token_to_kv_pool_allocator.kv[0] = 99                       # someone overwrote A's first slot
    with pytest.raises(RuntimeError, match="slot 0 holds the KV of token 99 but position 0 of A is token 1"):
        engine.step()


def test_radix_table_renders_text_and_html():
    sch = RadixScheduler(kv_capacity_tokens=16, max_num_batched_tokens=16)
    trace = RadixEngine(sch).run([Req([1, 2], 1, name="A")])
    table = radix_table(trace)
    assert str(table).splitlines()[2].split(" | ")[:3] == ["0   ", "P   ", "A:2                    "]
    assert "<th>free slots</th>" in table._repr_html_()
    with pytest.raises(ValueError, match="unknown columns"):
        radix_table(trace, ["step", "free blocks"])


# ---- SGLang's reservation for future decode tokens (new_token_ratio) --------------------------------------

def _prompts(n, length, max_new):
    return [Req([1000 * i + j for j in range(length)], max_new, name=f"R{i}") for i in range(n)]


def test_without_the_reservation_nothing_is_held_back():
    sch = RadixScheduler(kv_capacity_tokens=64, max_num_batched_tokens=64)
    assert sch.new_token_ratio is None and sch.reserved_tokens() == 0
    trace = RadixEngine(sch).run([Req([1] * 10, 50, name="A"), Req([2] * 10, 50, name="B")])
    assert trace[0].scheduled == [("A", 10), ("B", 10)] and sch.new_token_ratio is None


def test_the_reservation_holds_back_the_running_requests_future_tokens():
    # A: 10 + min(50, 4096) = 60 < 100, admitted, and its 60 are held back for the rest of the pass: B (60) waits.
    # Next pass: A has generated 1, so 49 x 0.5 = 24.5 are held back; 90 free - 24.5 = 65.5 > 60: B is admitted.
    sch = RadixScheduler(kv_capacity_tokens=100, max_num_batched_tokens=100, new_token_ratio=0.5)
    engine = RadixEngine(sch)
    for r in (Req([1] * 10, 50, name="A"), Req([2] * 10, 50, name="B")):
        engine.add_request(r)
    assert engine.step().scheduled == [("A", 10)]
    assert sch.reserved_tokens() == 24.5 == decode_reservation([49], 0.5)
    assert engine.step().scheduled == [("B", 10)]
    assert decode_reservation([10, 10_000], 1.0) == 10 + CLIP_MAX_NEW_TOKENS


def test_the_ratio_decays_on_clean_decode_steps_and_resets_when_idle():
    sch = RadixScheduler(kv_capacity_tokens=200, max_num_batched_tokens=200, new_token_ratio=0.7)
    engine = RadixEngine(sch)
    engine.run([Req([1] * 4, 11, name="A")])                    # one prefill, then 10 decode steps
    decay = (0.7 - 0.7 * 0.14) / 600
    assert sch.new_token_ratio == pytest.approx(0.7 - 10 * decay)
    assert sch.min_new_token_ratio == pytest.approx(0.098)
    engine.run([Req([2] * 4, 2, name="B")])                     # idle: the ratio starts again at 0.7
    assert sch.new_token_ratio == pytest.approx(0.7 - decay)


def test_a_retraction_sets_the_ratio_from_the_requests_still_running():
    # a low ratio over-commits: running requests are counted at 0.1 of what they may still generate
    sch = RadixScheduler(kv_capacity_tokens=100, max_num_batched_tokens=64, max_num_seqs=8, new_token_ratio=0.1)
    seen = []
    engine = RadixEngine(sch)
    for r in _prompts(6, 6, 40):
        engine.add_request(r)
    while not engine.is_finished():
        running = list(sch.running)
        rec = engine.step()
        if rec.preempted:
            left = [r for r in running if r.name not in rec.preempted]
            seen.append((sch.new_token_ratio, ratio_after_retract([len(r.output_ids) - 1 for r in left],
                                                                  [r.max_new_tokens for r in left])))
    assert seen and all(got == pytest.approx(want) for got, want in seen)
    assert ratio_after_retract([0], [10]) == 1.0                 # (0 + 20) / 11, at most 1


def test_the_reservation_trades_batch_size_for_fewer_retractions():
    runs = {}
    for ratio in (None, 0.7):
        sch = RadixScheduler(kv_capacity_tokens=400, max_num_batched_tokens=4096, max_num_seqs=16,
                             new_token_ratio=ratio)
        trace = RadixEngine(sch).run(_prompts(16, 24, 40))
        runs[ratio] = (sum(len(r.preempted) for r in trace), max(len(r.running) for r in trace), len(trace))
    assert runs[None] == (13, 16, 91) and runs[0.7] == (1, 7, 125)


# ---- seeded random workloads -------------------------------------------------------------------------------

@pytest.mark.parametrize("seed, ratio", [*((s, None) for s in range(6)), (6, 0.7), (7, 0.3), (8, 1.0)])
def test_random_workloads_keep_every_slot_in_one_place_and_reproduce_solo_outputs(seed, ratio):
    rng = random.Random(seed)
    preemptions = hits = 0
    for _ in range(40):
        pool = rng.randint(16, 60)
        sch = RadixScheduler(kv_capacity_tokens=pool, max_num_batched_tokens=rng.randint(1, 40),
                             max_num_seqs=rng.randint(1, 5), page_size=rng.choice([1, 2, 4]),
                             policy=rng.choice(["fcfs", "lpm"]), eviction_policy=rng.choice(["lru", "lfu"]),
                             new_token_ratio=ratio)
        prefix = [rng.randint(0, 2) for _ in range(rng.randint(0, 12))]
        reqs, arrivals = [], {}
        for i in range(rng.randint(1, 8)):
            p = prefix[:rng.randint(0, len(prefix))] + [rng.randint(0, 2) for _ in range(rng.randint(1, 8))]
            mt = rng.randint(1, 8)
            if len(p) + mt - 1 > pool or (ratio is not None and len(p) + mt >= pool):   # could never be admitted
                continue
            r = Req(p, mt, name=f"r{i}")
            reqs.append(r)
            arrivals.setdefault(rng.choice([0, 0, 1, 3, 6]), []).append(r)
        trace = RadixEngine(sch).run(arrivals=arrivals)        # checks the invariants after every step
        for r in reqs:
            assert r.output_ids == expected(r.origin_input_ids, r.max_new_tokens)
        assert sch.tree_cache.protected_size() == 0
        assert sch.token_to_kv_pool_allocator.available_size() + sch.tree_cache.total_size() == pool
        preemptions += sum(len(t.preempted) for t in trace)
        hits += sum(k for t in trace if t.is_prefill for _, k in t.cached)
    assert hits > 0 and (preemptions > 0 or ratio is not None)   # the reservation may avoid every retraction
