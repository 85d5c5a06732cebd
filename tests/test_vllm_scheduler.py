"""vLLM V1's scheduler (servelab.schedulers.vllm_scheduler): hand-made traces whose expected values are worked out from
vLLM 0.33.0's code in the comments, then seeded random workloads checked against running each request alone, with
block accounting and the KV each request reads checked after every step.

In the comments, "free queue [4, 2]" lists block ids front first. "hashed" means the block is in the prefix cache.
Block ids start at 1 because block 0 is the null block.
"""

import random
from functools import partial

import pytest

from servelab.engine.v1 import fake_model, fake_next_token, run
from servelab.schedulers.vllm_scheduler import (
    BlockPool,
    Request,
    RequestStatus,
    Scheduler,
    hash_block_tokens,
)


def req(rid, n, max_tokens=1, base=None, **kw):
    """A request with n prompt tokens of its own (base defaults to a number derived from its id)."""
    base = (sum(map(ord, rid)) * 1000) if base is None else base
    return Request(rid, list(range(base, base + n)), max_tokens, ignore_eos=True, **kw)


def step(sch, model=fake_model):
    out = sch.schedule()
    return out, sch.update_from_output(out, model(sch, out))


def expected_outputs(prompt, max_tokens, eos=None, ignore_eos=True, max_model_len=None, vocab=1000):
    """What the fake model generates for a request that runs alone."""
    toks = list(prompt)
    while True:
        toks.append(fake_next_token(toks, vocab))
        if ((not ignore_eos and eos is not None and toks[-1] == eos) or len(toks) - len(prompt) >= max_tokens
                or (max_model_len is not None and len(toks) >= max_model_len)):
            return toks[len(prompt):]


class KVMemory:
    """A stand-in for the GPU's KV memory: (block id, slot) -> the prefix whose KV was written there.

    run_step writes the KV of every scheduled range, then checks what each scheduled request reads: every
    position before its scheduled range (computed earlier or hit in the prefix cache) must hold its own prefix.
    It returns the (request id, position) pairs that would read KV never computed for them.
    """

    def __init__(self, block_size):
        self.block_size = block_size
        self.slots = {}

    @staticmethod
    def prefix_ids(tokens):
        ids, h = [], 0
        for t in tokens:
            h = hash((h, t))
            ids.append(h)
        return ids

    def run_step(self, sch, out):
        bs, ids = self.block_size, {}
        for rid, n in out.num_scheduled_tokens.items():
            r = sch.requests[rid]
            ids[rid] = self.prefix_ids(r.all_token_ids)
            start = out.num_computed_tokens_before[rid]
            for p in range(start, start + n):
                self.slots[r.block_ids[p // bs], p % bs] = ids[rid][p]
        return [(rid, p) for rid in out.num_scheduled_tokens
                for p in range(out.num_computed_tokens_before[rid])
                if self.slots.get((sch.requests[rid].block_ids[p // bs], p % bs)) != ids[rid][p]]


# ---------------------------------------------------------------------------------------------------------------
# 1-2. one mixed batch per step, running first; every request can be chunked; a request mid-prefill is running


def test_one_mixed_batch_running_first_then_admissions_chunked_by_the_budget_left():
    # Scheduler.schedule: the RUNNING loop walks self.running, then the WAITING loop admits with what is left.
    sch = Scheduler(block_size=4, num_blocks=33, max_num_batched_tokens=8, max_num_seqs=8)
    a, b, c = req("A", 6, max_tokens=3), req("B", 10, max_tokens=2), req("C", 5, max_tokens=2)
    sch.add_request(a)
    out, _ = step(sch)                      # A alone: all 6 prompt tokens, samples its first output
    assert out.num_scheduled_tokens == {"A": 6} and out.scheduled_new_reqs == ["A"]
    sch.add_request(b)
    out, _ = step(sch)                      # A decodes 1; B is admitted with the 7 tokens left and is cut there
    assert list(out.num_scheduled_tokens.items()) == [("A", 1), ("B", 7)]
    assert out.scheduled_running_reqs == ["A"] and out.scheduled_new_reqs == ["B"]
    assert b.status == RequestStatus.RUNNING and b.num_computed_tokens == 7 and b.output_token_ids == []
    assert [r.request_id for r in sch.running] == ["A", "B"]
    sch.add_request(c)
    out, fin = step(sch)
    # A 1, then B's last 3 prompt tokens (B is a running request now), then C with 8 - 1 - 3 = 4
    assert list(out.num_scheduled_tokens.items()) == [("A", 1), ("B", 3), ("C", 4)]
    assert out.scheduled_running_reqs == ["A", "B"] and out.scheduled_new_reqs == ["C"]
    assert fin == {"A": "length"}           # A's third output
    out, _ = step(sch)                      # B decodes; C, a running request mid-prefill, computes its last token
    assert list(out.num_scheduled_tokens.items()) == [("B", 1), ("C", 1)]
    assert out.scheduled_running_reqs == ["B", "C"] and out.total_num_scheduled_tokens == 2
    assert c.output_token_ids == expected_outputs(c.prompt_token_ids, 1)


def test_a_running_request_waiting_for_its_sample_gets_no_tokens():
    # Scheduler.schedule: a running request with num_new_tokens == 0 is skipped with `continue`.
    sch = Scheduler(block_size=4, num_blocks=9, max_num_batched_tokens=16, max_num_seqs=4)
    sch.add_request(req("A", 5, max_tokens=3))
    sch.add_request(req("B", 9, max_tokens=3))
    first = sch.schedule()                  # both prompts whole: 5 + 9 = 14 tokens
    assert first.num_scheduled_tokens == {"A": 5, "B": 9}
    second = sch.schedule()                 # no update_from_output in between: every token is computed already
    assert second.num_scheduled_tokens == {}
    sch.update_from_output(first, fake_model(sch, first))
    assert sch.schedule().num_scheduled_tokens == {"A": 1, "B": 1}


# ---------------------------------------------------------------------------------------------------------------
# 3. long_prefill_token_threshold caps running and waiting requests, and is off when only one request exists


def test_threshold_is_off_for_a_lone_request():
    # Scheduler.schedule: threshold = long_prefill_token_threshold if num_running + num_waiting > 1 else 0.
    sch = Scheduler(block_size=16, num_blocks=17, max_num_batched_tokens=53, max_num_seqs=4,
                    long_prefill_token_threshold=32)
    sch.add_request(req("A", 76))
    assert step(sch)[0].num_scheduled_tokens == {"A": 53}    # alone: the whole budget
    assert step(sch)[0].num_scheduled_tokens == {"A": 23}    # still alone: the rest


def test_threshold_caps_running_and_waiting_requests_alike():
    sch = Scheduler(block_size=16, num_blocks=17, max_num_batched_tokens=53, max_num_seqs=4,
                    long_prefill_token_threshold=32)
    sch.add_request(req("A", 76))
    sch.add_request(req("B", 40, max_tokens=2))
    # 2 requests: A gets min(76, 32) = 32, B min(40, 32, 53 - 32) = 21
    assert step(sch)[0].num_scheduled_tokens == {"A": 32, "B": 21}
    # A (running) is capped again: min(44, 32) = 32; B gets its 19 left (budget 21 left)
    assert step(sch)[0].num_scheduled_tokens == {"A": 32, "B": 19}
    # A's last 12, B's decode
    assert step(sch)[0].num_scheduled_tokens == {"A": 12, "B": 1}


def test_threshold_counts_waiting_requests_when_the_step_starts():
    sch = Scheduler(block_size=16, num_blocks=17, max_num_batched_tokens=53, max_num_seqs=4,
                    long_prefill_token_threshold=32)
    a = req("A", 76)
    sch.add_request(a)
    assert step(sch)[0].num_scheduled_tokens == {"A": 53}    # alone
    sch.add_request(req("B", 40))
    # 1 running + 1 waiting > 1: threshold 32 is on. A: min(23, 32) = 23. B: min(40, 32, 53 - 23 = 30) = 30.
    assert step(sch)[0].num_scheduled_tokens == {"A": 23, "B": 30}


# ---------------------------------------------------------------------------------------------------------------
# 4. blocks per step; admission needs the whole current sequence to fit (reserve_full_prompt) or only the chunk


def test_blocks_come_per_step_and_admission_needs_room_for_the_whole_prompt():
    # 5 usable blocks of 4. A: prompt 4, B: prompt 17 (5 blocks). Budget 8.
    sch = Scheduler(block_size=4, num_blocks=6, max_num_batched_tokens=8, max_num_seqs=4)
    a, b = req("A", 4, max_tokens=10), req("B", 17)
    sch.add_request(a)
    sch.add_request(b)
    out, _ = step(sch)
    # A: 4 tokens, 1 block (free 4). B: KVCacheManager.allocate_slots(full_sequence_must_fit=True) needs
    # cdiv(17, 4) = 5 blocks > 4 free, so it returns None and the admissions stop.
    assert out.num_scheduled_tokens == {"A": 4} and out.block_ids == {"A": [1]} and out.num_free_blocks == 4
    out, _ = step(sch)
    # A's decode at position 4 opens its second block (cdiv(5, 4) = 2); B still needs 5 > 3.
    assert out.num_scheduled_tokens == {"A": 1} and a.block_ids == [1, 2] and out.num_free_blocks == 3
    assert b.status == RequestStatus.WAITING and b.block_ids == []


def test_without_the_full_prompt_gate_admission_needs_only_the_chunk_and_can_over_admit():
    sch = Scheduler(block_size=4, num_blocks=6, max_num_batched_tokens=8, max_num_seqs=4,
                    reserve_full_prompt=False)
    a, b = req("A", 4, max_tokens=10), req("B", 17)
    sch.add_request(a)
    sch.add_request(b)
    out, _ = step(sch)            # A 4 tokens [1]; B's chunk min(17, 8 - 4) = 4 needs only 1 block: [2]
    assert out.num_scheduled_tokens == {"A": 4, "B": 4} and out.block_ids == {"A": [1], "B": [2]}
    out, _ = step(sch)            # A 1 (block 3); B min(13, 7) = 7: computed 11, cdiv(11, 4) = 3 blocks: 4, 5
    assert out.num_scheduled_tokens == {"A": 1, "B": 7}
    assert a.block_ids == [1, 3] and b.block_ids == [2, 4, 5] and out.num_free_blocks == 0
    out, _ = step(sch)
    # A 1 (no new block). B's last 6 need 2 more blocks, none free: B, the last of running, is the FCFS victim
    # and is itself, so the loop stops; its 3 blocks go back.
    assert out.num_scheduled_tokens == {"A": 1} and out.preempted_req_ids == ["B"]
    assert b.status == RequestStatus.PREEMPTED and b.num_computed_tokens == 0 and b.block_ids == []
    assert out.num_free_blocks == 3


# ---------------------------------------------------------------------------------------------------------------
# 5-6. blocks are hashed at allocation; a full hit leaves the last token to compute


def test_an_admission_hits_blocks_another_request_is_computing_in_the_same_step():
    # A: no hit, 40 tokens, 3 blocks. allocate_slots caches min(40, 40) // 16 = 2 full blocks at once.
    # B: get_computed_blocks looks at (40 - 1) // 16 = 2 blocks, both hit: 32 tokens, computes 8 in 1 new block.
    sch = Scheduler(block_size=16, num_blocks=11, max_num_batched_tokens=256, max_num_seqs=4)
    prompt = list(range(500, 540))
    a, b = Request("A", prompt, 2, ignore_eos=True), Request("B", prompt, 2, ignore_eos=True)
    sch.add_request(a)
    sch.add_request(b)
    out, _ = step(sch)
    assert out.num_scheduled_tokens == {"A": 40, "B": 8}
    assert out.num_hit_tokens == {"A": 0, "B": 32} and b.num_cached_tokens == 32 and a.num_cached_tokens == 0
    assert out.block_ids == {"A": [1, 2, 3], "B": [1, 2, 4]} and out.num_free_blocks == 10 - 4
    pool = sch.kv_cache_manager.block_pool
    assert [pool.blocks[i].ref_cnt for i in (1, 2, 3, 4)] == [2, 2, 1, 1]
    while sch.has_unfinished_requests():
        step(sch)
    assert a.output_token_ids == b.output_token_ids == expected_outputs(prompt, 2)


def test_a_full_prompt_hit_is_capped_to_leave_the_last_token_rounded_down_to_blocks():
    # get_computed_blocks: max_cache_hit_length = num_tokens - 1; find_longest_cache_hit looks at
    # (num_tokens - 1) // block_size blocks.
    sch = Scheduler(block_size=16, num_blocks=11, max_num_batched_tokens=256, max_num_seqs=8)
    prompt = list(range(700, 732))
    sch.add_request(Request("A", prompt, 1, ignore_eos=True))
    out, fin = step(sch)        # A: 32 tokens in blocks [1, 2], both hashed; A finishes, they go to the back
    assert out.block_ids == {"A": [1, 2]} and fin == {"A": "length"}
    b = Request("B", prompt, 1, ignore_eos=True)              # 32 tokens: 31 // 16 = 1 block may hit
    c = Request("C", prompt + [9], 1, ignore_eos=True)        # 33 tokens: 32 // 16 = 2 blocks
    d = Request("D", prompt[:31], 1, ignore_eos=True)         # 31 tokens, 1 full block: 30 // 16 = 1
    for r in (b, c, d):
        sch.add_request(r)
    out = sch.schedule()
    assert out.num_hit_tokens == {"B": 16, "C": 32, "D": 16}
    assert out.num_scheduled_tokens == {"B": 16, "C": 1, "D": 15}
    # B takes block 3 from the front of the free queue (A's freed blocks wait at its back) and caches it under the
    # same hash as block 2: blocks are not merged, and C's lookup takes the first block cached, block 2.
    assert out.block_ids == {"B": [1, 3], "C": [1, 2, 4], "D": [1, 5]}
    pool = sch.kv_cache_manager.block_pool
    assert pool.blocks[2].block_hash == pool.blocks[3].block_hash is not None
    assert pool.blocks[1].ref_cnt == 3 and pool.blocks[2].ref_cnt == 1


# ---------------------------------------------------------------------------------------------------------------
# 7. block 0 is the null block


def test_block_0_is_the_null_block():
    sch = Scheduler(block_size=4, num_blocks=5, max_num_batched_tokens=64, max_num_seqs=4)
    assert sch.num_free_blocks() == 4 and sch.kv_cache_manager.block_pool.null_block.block_id == 0
    with pytest.raises(ValueError, match="could never finish"):
        sch.add_request(req("big", 20))          # 20 tokens with KV = 5 blocks > 4 usable
    sch.add_request(req("fits", 16))              # 16 tokens with KV = 4 blocks
    trace = run(sch, {0: [req("later", 3, max_tokens=2)]})
    assert all(0 not in ids for rec in trace for ids in rec.output.block_ids.values())
    assert sch.num_free_blocks() == 4


# ---------------------------------------------------------------------------------------------------------------
# 8-9, 12. preemption; no admissions in a step that preempted; head-of-line blocking


def test_fcfs_preempts_the_tail_of_running():
    # 6 usable blocks of 4; A, B, C: prompts of 4, 8 outputs each. Steps 0-1 fill all 6 blocks (2 each).
    sch = Scheduler(block_size=4, num_blocks=7, max_num_batched_tokens=16, max_num_seqs=8)
    a, b, c = req("A", 4, 8), req("B", 4, 8), req("C", 4, 8)
    trace = run(sch, {0: [a, b, c]})
    # Step 5: A's decode at position 8 needs a third block, none is free. The victim is running[-1] = C; its blocks
    # go back tail first, [6, 3], both hashed, to the back of the free queue. A takes 6 and B takes 3, which evicts
    # C's hashes.
    five = trace[5].output
    assert five.num_scheduled_tokens == {"A": 1, "B": 1} and five.preempted_req_ids == ["C"]
    assert five.block_ids == {"A": [1, 4, 6], "B": [2, 5, 3]}
    assert trace[5].waiting == ["C"] and trace[5].running == ["A", "B"]
    # A and B finish at step 7. A frees [6 (unhashed, partial) -> front, 4, 1 -> back], then B frees
    # [3 -> front, 5, 2 -> back]: free queue [3, 6, 4, 1, 5, 2]. C resumes with its 5 outputs and no hit, so it
    # recomputes all 9 tokens in blocks 3, 6, 4.
    assert trace[7].finished == {"A": "length", "B": "length"}
    eight = trace[8].output
    assert eight.scheduled_resumed_reqs == ["C"] and eight.num_hit_tokens == {"C": 0}
    assert eight.num_scheduled_tokens == {"C": 9} and eight.block_ids == {"C": [3, 6, 4]}
    assert c.num_preemptions == 1 and a.num_preemptions == 0
    assert c.output_token_ids == expected_outputs(c.prompt_token_ids, 8)


def test_fcfs_self_preemption_tail_first_free_resume_on_own_blocks_and_head_of_line_blocking():
    # 4 usable blocks of 4, budget 6. A: prompt 4, 5 outputs. V: prompt 12, 1 output. W arrives before step 2.
    sch = Scheduler(block_size=4, num_blocks=5, max_num_batched_tokens=6, max_num_seqs=8)
    a, v, w = req("A", 4, 5), req("V", 12), req("W", 2)
    sch.add_request(a)
    sch.add_request(v)
    out, _ = step(sch)      # A: 4 tokens, block 1 (hashed). V: gate 3 blocks <= 3 free; chunk 2, block 2.
    assert out.num_scheduled_tokens == {"A": 4, "V": 2} and out.block_ids == {"A": [1], "V": [2]}
    out, _ = step(sch)      # A decodes at position 4: block 3. V: min(10, 5) = 5, computed 7: block 4; block 2 hashed.
    assert out.num_scheduled_tokens == {"A": 1, "V": 5} and out.num_free_blocks == 0
    sch.add_request(w)
    out, _ = step(sch)
    # A: 1 token, no new block. V's last 5 need a third block: none free, the FCFS victim running[-1] is V itself
    # (preempted, loop over). V frees tail first: block 4 (partial, no hash) to the front, block 2 (hashed) to the
    # back: free queue [4, 2]. The step preempted, so W is not admitted though it needs 1 block of the 2 free.
    assert out.num_scheduled_tokens == {"A": 1} and out.preempted_req_ids == ["V"]
    assert list(sch.kv_cache_manager.block_pool.free_block_queue) == [4, 2]
    assert v.status == RequestStatus.PREEMPTED and v.num_computed_tokens == 0 and v.num_preemptions == 1
    assert [r.request_id for r in sch.waiting] == ["V", "W"]           # V went back to the front
    out, _ = step(sch)
    # V at the head: it hits block 2 (4 tokens), but the gate needs 3 - 1 = 2 new blocks plus block 2 itself (it is
    # in the free queue) = 3 > 2 free. Admissions stop there: W behind it is not tried (head-of-line blocking).
    assert out.num_scheduled_tokens == {"A": 1} and out.scheduled_new_reqs == []
    out, fin = step(sch)    # A's fifth output: A frees [3, 1], both hashed, to the back: free queue [4, 2, 3, 1]
    assert fin == {"A": "length"} and list(sch.kv_cache_manager.block_pool.free_block_queue) == [4, 2, 3, 1]
    out, _ = step(sch)
    # V resumes on its own block 2 (hit 4), computes min(12 - 4, 6) = 6 tokens in new blocks 4 and 3 (evicting
    # block 3's hash). The budget is spent, so W waits.
    assert out.scheduled_resumed_reqs == ["V"] and out.num_hit_tokens == {"V": 4} and v.num_cached_tokens == 4
    assert out.num_scheduled_tokens == {"V": 6} and out.block_ids == {"V": [2, 4, 3]}
    out, fin = step(sch)    # V's last 2 tokens; W gets the last free block, 1
    assert out.num_scheduled_tokens == {"V": 2, "W": 2} and out.scheduled_new_reqs == ["W"]
    assert out.block_ids["W"] == [1] and fin == {"V": "length", "W": "length"}
    assert v.output_token_ids == expected_outputs(v.prompt_token_ids, 1)


def test_priority_victim_already_scheduled_gives_its_tokens_back():
    # 3 usable blocks of 4. L: priority 1, arrives first. H: priority 0, arrives before step 1.
    sch = Scheduler(block_size=4, num_blocks=4, max_num_batched_tokens=16, max_num_seqs=8, policy="priority")
    low, high = req("L", 4, 4, priority=1, arrival_time=0.0), req("H", 4, 4, priority=0, arrival_time=1.0)
    sch.add_request(low)
    step(sch)                                    # L: block 1
    sch.add_request(high)
    out, _ = step(sch)                           # L decodes into block 2; H is admitted into block 3; none free
    assert out.num_scheduled_tokens == {"L": 1, "H": 4} and [r.request_id for r in sch.running] == ["L", "H"]
    out, _ = step(sch)
    # L is scheduled first (1 token, no new block). H's decode needs a block: the victim is max by
    # (priority, arrival_time) = L, already scheduled, so its token goes back to the budget. L frees [2 (no hash)
    # -> front, 1 (hashed) -> back] and H takes block 2.
    assert out.num_scheduled_tokens == {"H": 1} and out.scheduled_running_reqs == ["H"]
    assert out.preempted_req_ids == ["L"] and out.total_num_scheduled_tokens == 1
    assert low.status == RequestStatus.PREEMPTED and len(low.output_token_ids) == 2 and high.block_ids == [3, 2]
    step(sch)
    out, fin = step(sch)                         # L: hit 4 but needs 2 blocks, only 1 free; H finishes
    assert out.num_scheduled_tokens == {"H": 1} and fin == {"H": "length"}
    out, _ = step(sch)                           # L resumes on its block 1 and recomputes its 2 outputs
    assert out.scheduled_resumed_reqs == ["L"] and out.num_hit_tokens == {"L": 4}
    assert out.num_scheduled_tokens == {"L": 2} and out.block_ids == {"L": [1, 2]}


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_a_request_that_preempts_itself_stops_fcfs_but_priority_moves_on(policy):
    # 3 usable blocks of 4. X: prompt 7, priority 1, first. Y: prompt 3, priority 0, before step 1.
    sch = Scheduler(block_size=4, num_blocks=4, max_num_batched_tokens=16, max_num_seqs=8, policy=policy)
    x, y = req("X", 7, 6, priority=1, arrival_time=0.0), req("Y", 3, 2, priority=0, arrival_time=1.0)
    sch.add_request(x)
    step(sch)                                    # X: 7 tokens in blocks [1, 2]
    sch.add_request(y)
    out, _ = step(sch)                           # X's decode fills block 2 (hashed); Y: 3 tokens in block 3
    assert out.num_scheduled_tokens == {"X": 1, "Y": 3} and out.num_free_blocks == 0
    out, _ = step(sch)                           # X's decode at position 8 needs a third block
    if policy == "fcfs":
        # the victim is running[-1] = Y (block 3, no hash, to the front); X retries and takes it
        assert out.num_scheduled_tokens == {"X": 1} and out.preempted_req_ids == ["Y"] and x.block_ids == [1, 2, 3]
    else:
        # the victim is max by (priority, arrival_time) = X itself: X is preempted, and `continue` goes on to Y
        assert out.num_scheduled_tokens == {"Y": 1} and out.preempted_req_ids == ["X"]
        out, _ = step(sch)                       # Y finished last step; X resumes on its two hashed blocks
        assert out.scheduled_resumed_reqs == ["X"] and out.num_hit_tokens == {"X": 8}
        assert out.num_scheduled_tokens == {"X": 1} and out.block_ids == {"X": [1, 2, 3]}


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_a_priority_victim_can_leave_blocks_hashed_whose_kv_was_never_computed(policy):
    # vLLM 0.33.0 hashes a block in allocate_slots, before the step runs. A PRIORITY victim that was already scheduled
    # gives its tokens back, but _preempt_request frees its blocks with their hashes.
    # 6 usable blocks of 2; threshold 2. V: prompt 10, priority 1, first. H: prompt 2, priority 0, before step 1.
    sch = Scheduler(block_size=2, num_blocks=7, max_num_batched_tokens=5, max_num_seqs=8,
                    long_prefill_token_threshold=2, policy=policy)
    v, h = req("V", 10, 1, priority=1, arrival_time=0.0), req("H", 2, 3, priority=0, arrival_time=1.0)
    kv = KVMemory(2)
    stale = []

    def model(sch, out):
        stale.extend(kv.run_step(sch, out))
        return fake_model(sch, out)

    sch.add_request(v)
    step(sch, model)      # V alone (no threshold): 5 tokens in blocks [1, 2, 3]
    sch.add_request(h)
    out, _ = step(sch, model)   # threshold on. V: 2 tokens, computed 7, block 4 (block 3 hashed). H: 2 in block 5.
    assert out.num_scheduled_tokens == {"V": 2, "H": 2} and out.num_free_blocks == 1
    out, _ = step(sch, model)
    # V: 2 tokens (positions 7, 8), computed 9: block 6, and block 4 (positions 6-7) is hashed. H's decode at
    # position 2 needs a block, none is free.
    if policy == "fcfs":      # the victim is H itself (block 5, hashed, to the back); V's step runs
        assert out.num_scheduled_tokens == {"V": 2} and out.preempted_req_ids == ["H"]
    else:
        # The victim is V (priority 1), already scheduled: its 2 tokens go back to the budget, so position 7 is
        # never computed. V frees [6 (no hash) -> front, 4, 3, 2, 1 (hashed) -> back]. H takes block 6; block 4
        # keeps its hash.
        assert out.num_scheduled_tokens == {"H": 1} and out.preempted_req_ids == ["V"]
        step(sch, model)      # H's last output; V's gate needs 1 new block + 4 hit blocks in the free queue > 4
        out, _ = step(sch, model)
        # V resumes with a hit of (10 - 1) // 2 = 4 blocks = 8 tokens, including position 7 in block 4
        assert out.num_hit_tokens == {"V": 8} and out.block_ids["V"][:4] == [1, 2, 3, 4]
    while sch.has_unfinished_requests():
        step(sch, model)
    # What a real model would read: V's position 7 has no KV under priority. The fake model only looks at token
    # ids, so the outputs match either way.
    assert stale == ([] if policy == "fcfs" else [("V", 7)])
    assert v.output_token_ids == expected_outputs(v.prompt_token_ids, 1)


def test_priority_ties_can_preempt_each_other_forever():
    # The PRIORITY victim is max(running, key=(priority, arrival_time)), and a tie goes to the first in running order.
    # A (prompt 7) and B have equal keys. 4 usable blocks of 2, budget 4, threshold 2, no prefix caching, and
    # reserve_full_prompt=False, so an admission only needs its chunk to fit. Once both hold blocks, the one at
    # running[0] cannot get the block for its last prompt tokens. It is the victim of its own allocation (first of
    # the tie), and `continue` lets the other go on. Then it is admitted again behind the other, from scratch
    # (nothing is cached). Steps 9-12 (worked out below) bring the state back to where step 9 started.
    sch = Scheduler(block_size=2, num_blocks=5, max_num_batched_tokens=4, max_num_seqs=4,
                    long_prefill_token_threshold=2, enable_prefix_caching=False, policy="priority",
                    reserve_full_prompt=False)
    a = Request("A", list(range(7)), 1, ignore_eos=True, arrival_time=0.0)
    b = Request("B", list(range(100, 102)), 7, ignore_eos=True, arrival_time=0.0)
    sch.add_request(a)
    sch.add_request(b)

    def state():
        return [(r.request_id, r.num_computed_tokens, r.num_tokens) for r in sch.running], \
            [r.request_id for r in sch.waiting]

    outs = []
    for _ in range(13):
        if len(outs) == 9:
            at_9 = state()
        outs.append(step(sch)[0])
    # step 9: A 2 (6 of 7 computed, 3 blocks), B re-admitted with 2 (1 block): no block left
    # step 10: A needs a 4th block -> victim A itself (first of the tie); B 2
    # step 11: B 2 (3 blocks), A re-admitted with 2; step 12: B needs a 4th block -> B itself; A 2
    assert [o.num_scheduled_tokens for o in outs[9:13]] == [{"A": 2, "B": 2}, {"B": 2}, {"B": 2, "A": 2}, {"A": 2}]
    assert [o.preempted_req_ids for o in outs[9:13]] == [[], ["A"], [], ["B"]]
    assert state() == at_9 == ([("A", 4, 7)], ["B"])
    with pytest.raises(RuntimeError, match="not finished"):
        run(sch, {}, max_steps=200)


# ---------------------------------------------------------------------------------------------------------------
# 10. max_num_seqs, checked only when admitting


def test_max_num_seqs_limits_admissions_only():
    sch = Scheduler(block_size=4, num_blocks=17, max_num_batched_tokens=100, max_num_seqs=2)
    a, b, c = req("A", 4, 1), req("B", 4, 3), req("C", 4, 1)
    trace = run(sch, {0: [a, b, c]})
    # Step 0: A and B are admitted, then len(running) == 2 stops admissions; C waits with budget to spare.
    assert trace[0].output.num_scheduled_tokens == {"A": 4, "B": 4} and trace[0].waiting == ["C"]
    # A finished in step 0, so step 1 admits C next to B's decode.
    assert trace[1].output.num_scheduled_tokens == {"B": 1, "C": 4}
    assert max(len(rec.output.num_scheduled_tokens) for rec in trace) == 2


# ---------------------------------------------------------------------------------------------------------------
# 11. num_computed_tokens advances at schedule time; stop checks


def test_computed_tokens_advance_at_schedule_time_and_the_sample_arrives_in_update():
    sch = Scheduler(block_size=4, num_blocks=9, max_num_batched_tokens=16, max_num_seqs=4)
    a = req("A", 6, 2)
    sch.add_request(a)
    out = sch.schedule()
    assert a.num_computed_tokens == 6 and a.num_tokens == 6 and out.num_computed_tokens_before == {"A": 0}
    sch.update_from_output(out, {"A": [42]})
    assert a.all_token_ids[-1] == 42 and a.num_tokens == 7 and a.num_computed_tokens == 6
    out = sch.schedule()                          # the sampled token is scheduled next as a 1-token decode
    assert out.num_scheduled_tokens == {"A": 1} and out.num_computed_tokens_before == {"A": 6}


def test_stop_checks_eos_then_max_tokens_then_max_model_len():
    # check_stop: eos (sampling_params.eos_token_id, None under ignore_eos) first, then
    # num_tokens >= max_model_len or num_output_tokens >= max_tokens.
    eos = 7

    def model(sch, out):          # every request samples eos as its second output, 3 otherwise
        return {rid: ([eos if sch.requests[rid].num_output_tokens == 1 else 3] if toks else [])
                for rid, toks in fake_model(sch, out).items()}

    sch = Scheduler(block_size=4, num_blocks=33, max_num_batched_tokens=64, max_num_seqs=8, max_model_len=9,
                    eos=eos)
    reqs = [Request("stop", [1, 2, 3], 5),                     # eos at output 2: "stop", eos kept
            Request("ignore", [1, 2, 3], 4, ignore_eos=True),  # eos does not stop it: 4 outputs, "length"
            Request("both", [1, 2, 3], 2),                     # eos on its 2nd = max_tokens-th output: "stop" first
            Request("mml", [1, 2, 3, 4, 5, 6], 10, ignore_eos=True)]   # 9 tokens = max_model_len after 3
    finished = {}
    for rec in run(sch, {0: reqs}, model=model):
        finished.update(rec.finished)
    assert finished == {"stop": "stop", "ignore": "length", "both": "stop", "mml": "length"}
    assert [r.output_token_ids for r in reqs] == [[3, 7], [3, 7, 3, 3], [3, 7], [3, 7, 3]]
    assert reqs[0].status == RequestStatus.FINISHED_STOPPED and reqs[0].finish_reason == "stop"
    assert reqs[3].status == RequestStatus.FINISHED_LENGTH_CAPPED


# ---------------------------------------------------------------------------------------------------------------
# 12. waiting order and head-of-line blocking


def test_priority_waiting_queue_orders_by_priority_then_arrival():
    sch = Scheduler(block_size=4, num_blocks=17, max_num_batched_tokens=64, max_num_seqs=1, policy="priority")
    reqs = [req("L", 3, priority=2, arrival_time=0.0), req("M", 3, priority=1, arrival_time=2.0),
            req("H", 3, priority=1, arrival_time=1.0), req("T", 3, priority=0, arrival_time=3.0)]
    for r in reqs:
        sch.add_request(r)
    assert [r.request_id for r in sch.waiting] == ["T", "H", "M", "L"]
    admitted = [rid for rec in run(sch, {}) for rid in rec.output.scheduled_new_reqs]
    assert admitted == ["T", "H", "M", "L"]


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_a_failed_admission_blocks_everyone_behind_it(policy):
    # 4 usable blocks. R's decode takes its third; B (prompt 12, 3 blocks) heads waiting and does not fit in the one
    # left; S (1 block) would.
    sch = Scheduler(block_size=4, num_blocks=5, max_num_batched_tokens=64, max_num_seqs=8, policy=policy)
    r = req("R", 8, 3, priority=0, arrival_time=0.0)
    sch.add_request(r)
    step(sch)
    sch.add_request(req("B", 12, priority=1, arrival_time=1.0))
    sch.add_request(req("S", 2, priority=2, arrival_time=2.0))
    out, _ = step(sch)
    assert out.num_scheduled_tokens == {"R": 1} and [q.request_id for q in sch.waiting] == ["B", "S"]


# ---------------------------------------------------------------------------------------------------------------
# the block pool's free queue


def test_block_pool_free_queue_order():
    # free_blocks: blocks whose ref count reaches 0 go to the front if they have no hash (in the order given), to the
    # back if they have one; touch() takes a hit block out of the middle.
    pool = BlockPool(num_blocks=8)
    assert list(pool.free_block_queue) == [1, 2, 3, 4, 5, 6, 7] and pool.null_block.block_id == 0
    blocks = pool.get_new_blocks(4)
    assert [b.block_id for b in blocks] == [1, 2, 3, 4] and list(pool.free_block_queue) == [5, 6, 7]
    blocks[0].block_hash = "h1"
    blocks[1].block_hash = "h2"
    pool.cached_block_hash_to_block = {"h1": {1: blocks[0]}, "h2": {2: blocks[1]}}
    pool.free_blocks(reversed(blocks))          # tail first: 4, 3 (no hash) -> front; 2, 1 (hashed) -> back
    assert list(pool.free_block_queue) == [4, 3, 5, 6, 7, 2, 1]
    pool.touch([blocks[1]])
    assert list(pool.free_block_queue) == [4, 3, 5, 6, 7, 1] and blocks[1].ref_cnt == 1
    pool.get_new_blocks(6)                      # ... 1 is handed out last and loses its hash then
    assert blocks[0].block_hash is None and pool.get_cached_block("h1") is None and pool.get_cached_block("h2")


def test_hash_block_tokens_chains_and_is_deterministic():
    h0 = hash_block_tokens(None, [1, 2])
    assert h0 == hash_block_tokens(None, (1, 2)) and len(h0) == 16
    assert hash_block_tokens(h0, [3, 4]) != hash_block_tokens(None, [3, 4])


# ---------------------------------------------------------------------------------------------------------------
# bad input


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="empty"):
        Request("A", [], 1)
    with pytest.raises(ValueError, match="max_tokens"):
        Request("A", [1], 0)
    for kw in [dict(block_size=0), dict(num_blocks=1), dict(max_num_batched_tokens=0), dict(max_num_seqs=0),
               dict(long_prefill_token_threshold=-1), dict(max_model_len=1)]:
        with pytest.raises(ValueError):
            Scheduler(**{**dict(block_size=4, num_blocks=5, max_num_batched_tokens=8, max_num_seqs=2), **kw})
    with pytest.raises(ValueError, match="unknown scheduling policy"):
        Scheduler(block_size=4, num_blocks=5, max_num_batched_tokens=8, max_num_seqs=2, policy="lpm")
    sch = Scheduler(block_size=4, num_blocks=5, max_num_batched_tokens=8, max_num_seqs=2, max_model_len=10)
    a = req("A", 3)
    sch.add_request(a)
    with pytest.raises(ValueError, match="already"):
        sch.add_request(req("A", 3))
    with pytest.raises(ValueError, match="max_model_len"):
        sch.add_request(req("long", 10))          # vLLM rejects prompt_len == max_model_len
    with pytest.raises(ValueError, match="never finish"):
        Scheduler(block_size=4, num_blocks=3, max_num_batched_tokens=8, max_num_seqs=2).add_request(
            req("grows", 4, max_tokens=6))        # 4 + 6 - 1 = 9 tokens with KV = 3 blocks > 2 usable
    # with max_model_len=9 a request stops at 9 tokens: 8 with KV, 2 blocks, so any max_tokens fits
    Scheduler(block_size=4, num_blocks=3, max_num_batched_tokens=8, max_num_seqs=2,
              max_model_len=9).add_request(req("capped", 4, max_tokens=100))
    out = sch.schedule()
    with pytest.raises(ValueError, match="sampled token"):
        sch.update_from_output(out, {"A": []})    # A's range reached its end: it must get its token
    with pytest.raises(ValueError, match="not scheduled"):
        sch.update_from_output(out, {"A": [1], "B": [2]})
    sch.update_from_output(out, {"A": [1]})
    while sch.has_unfinished_requests():
        step(sch)
    with pytest.raises(ValueError, match="scheduled before"):
        sch.add_request(a)                        # a finished request cannot be added again


# ---------------------------------------------------------------------------------------------------------------
# randomized workloads


def check_invariants(sch):
    """Block accounting and limits; called after schedule() and after update_from_output()."""
    pool = sch.kv_cache_manager.block_pool
    holders = {}
    for r in sch.running:
        assert len(r.block_ids) == len(set(r.block_ids)) and 0 not in r.block_ids
        assert len(r.block_ids) == -(-r.num_computed_tokens // sch.block_size), r   # no block beyond its tokens
        for i in r.block_ids:
            holders[i] = holders.get(i, 0) + 1
    assert all(not r.block_ids and r.num_computed_tokens == 0 for r in sch.waiting)
    free = set(pool.free_block_queue)
    assert not free & set(holders) and 0 not in free
    assert len(free) + len(holders) == sch.num_blocks - 1            # no block leaks
    for block in pool.blocks[1:]:
        assert block.ref_cnt == holders.get(block.block_id, 0)
        if block.block_hash is not None:
            assert pool.cached_block_hash_to_block[block.block_hash][block.block_id] is block
    assert sum(len(v) for v in pool.cached_block_hash_to_block.values()) == sum(
        b.block_hash is not None for b in pool.blocks)
    if not sch.enable_prefix_caching:
        assert not pool.cached_block_hash_to_block
    assert len(sch.running) <= sch.max_num_seqs
    assert len({r.request_id for r in sch.running} | {r.request_id for r in sch.waiting}) == len(sch.requests)


def random_workload(seed):
    rng = random.Random(seed)
    block_size = rng.choice([1, 4, 16])
    usable_tokens = rng.choice([16, 32, 48, 64, 96]) // block_size * block_size   # small caches force preemption
    max_model_len = rng.choice([None, None, 40])
    sch = Scheduler(block_size=block_size, num_blocks=usable_tokens // block_size + 1,
                    max_num_batched_tokens=rng.choice([1, 3, 8, 16, 48]), max_num_seqs=rng.choice([1, 2, 4, 8]),
                    long_prefill_token_threshold=rng.choice([0, 0, 4, 10]),
                    enable_prefix_caching=rng.random() < 0.75, policy=rng.choice(["fcfs", "priority"]),
                    max_model_len=max_model_len, eos=rng.choice([None, 5, 5]),
                    reserve_full_prompt=rng.random() < 0.75)
    prefixes = [[rng.randrange(1000) for _ in range(rng.randint(1, 24))] for _ in range(3)]   # shared prefixes
    arrivals = {}
    for i in range(rng.randint(3, 12)):
        prompt = rng.choice(prefixes)[:rng.randint(1, 24)] + [rng.randrange(1000) for _ in range(rng.randint(0, 12))]
        max_tokens = rng.randint(1, 24)
        # trim to what can finish: KV for final length - 1 tokens within the cache and max_model_len
        cap = min(usable_tokens, (max_model_len or 10**9) - 1)
        prompt = prompt[:max(1, cap - max_tokens + 1)]
        max_tokens = min(max_tokens, usable_tokens - len(prompt) + 1)
        # distinct arrival times, as time.time() gives in vLLM: ties can livelock PRIORITY (see the test above)
        r = Request(f"r{i}", prompt, max_tokens, ignore_eos=rng.random() < 0.3, priority=rng.randint(0, 2),
                    arrival_time=rng.uniform(0, 20))
        arrivals.setdefault(rng.randint(0, 25), []).append(r)
    return sch, arrivals


@pytest.mark.parametrize("seed", range(100))
def test_random_workloads_match_running_alone(seed):
    sch, arrivals = random_workload(seed)
    vocab = 32                                           # small, so eos (5) does stop some requests
    model = partial(fake_model, vocab=vocab)
    kv = KVMemory(sch.block_size)
    requests = [r for rs in arrivals.values() for r in rs]
    pending = dict(arrivals)
    stale, reasons, now = [], {}, 0
    while pending or sch.has_unfinished_requests():
        due = [k for k in pending if k <= now] or ([min(pending)] if not sch.has_unfinished_requests() else [])
        for k in sorted(due):
            for r in pending.pop(k):
                sch.add_request(r)
        out = sch.schedule()
        assert out.total_num_scheduled_tokens <= sch.max_num_batched_tokens
        assert out.total_num_scheduled_tokens > 0                 # every step makes progress
        assert not (out.preempted_req_ids and (out.scheduled_new_reqs or out.scheduled_resumed_reqs))
        check_invariants(sch)
        stale += kv.run_step(sch, out)
        reasons.update(sch.update_from_output(out, model(sch, out)))
        check_invariants(sch)
        now += 1
        assert now < 5000
    assert sch.num_free_blocks() == sch.num_blocks - 1 and not sch.requests
    for r in requests:
        assert r.output_token_ids == expected_outputs(r.prompt_token_ids, r.max_tokens, sch.eos, r.ignore_eos,
                                                      sch.max_model_len, vocab), r.request_id
        assert reasons[r.request_id] == r.finish_reason
    # KV read before it was computed: only the PRIORITY corner case above (none of these seeds hits it)
    assert stale == []


def test_random_workloads_exercise_preemption_chunking_and_hits():
    # the seeds above are worth running: between them they preempt, chunk prompts and hit the prefix cache often
    counts = {"preempted": 0, "hit": 0, "chunk": 0, "stop": 0}

    def counting_model(sch, out):
        sampled = fake_model(sch, out, vocab=32)
        counts["chunk"] += sum(not toks for toks in sampled.values())
        return sampled

    for seed in range(48):
        sch, arrivals = random_workload(seed)
        for rec in run(sch, arrivals, model=counting_model):
            counts["preempted"] += len(rec.output.preempted_req_ids)
            counts["hit"] += sum(n > 0 for n in rec.output.num_hit_tokens.values())
            counts["stop"] += sum(reason == "stop" for reason in rec.finished.values())
    assert min(counts.values()) > 20, counts
