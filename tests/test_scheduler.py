"""The reference scheduler: the lesson's Step 2 asserts, a step-by-step match with the lesson's code when
prefix caching is off, and the block-hash prefix cache's behaviour when it is on."""

import random

import lesson_step2 as lesson
import pytest

from servelab.engine.driver import Engine, expected, fake_model
from servelab.schedulers.scheduler import (
    BlockManager,
    SamplingParams,
    Scheduler,
    Sequence,
    SequenceStatus,
    needs_new_block,
)


def Seq(name, token_ids, max_tokens, ignore_eos=True, block_size=None):
    return Sequence(token_ids, SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos), name=name,
                    block_size=block_size)


@pytest.mark.parametrize("cache", [False, True])
def test_lesson_shape_table(cache):
    sch = Scheduler(num_blocks=5, block_size=4, max_num_batched_tokens=8, enable_prefix_caching=cache)
    seqs_all = [Seq(n, [ord(n) * 100 + j for j in range(L)], max_tokens=4) for n, L in [("A", 6), ("B", 5), ("C", 3)]]
    for s in seqs_all:
        sch.add(s)
    trace = []
    while not sch.is_finished():
        seqs, is_prefill = sch.schedule()
        trace.append(("P" if is_prefill else "D", [(s.name, s.num_scheduled_tokens) for s in seqs],
                      len(sch.block_manager.free_block_ids)))
        sch.postprocess(seqs, fake_model(seqs), is_prefill)
    assert trace == [("P", [("A", 6)], 3), ("P", [("B", 5), ("C", 3)], 0), ("D", [("A", 1), ("B", 1), ("C", 1)], 0),
                     ("D", [("A", 1), ("B", 1)], 1), ("D", [("A", 1), ("B", 1)], 0), ("P", [("C", 5)], 3),
                     ("D", [("C", 1)], 3)]
    assert all(s.token_ids[s.num_prompt_tokens:] == expected(s.token_ids[:s.num_prompt_tokens], 4) for s in seqs_all)
    assert len(sch.block_manager.free_block_ids) == 5


@pytest.mark.parametrize("cache", [False, True])
@pytest.mark.parametrize("bs", [4, 16, 256])
def test_lesson_tight_memory(bs, cache):
    prompts = [list(range(i * 10000, i * 10000 + n)) for i, n in enumerate([3 * bs, 1, bs + 1, 2 * bs - 1, bs])]
    sch = Scheduler(num_blocks=5, block_size=bs, max_num_batched_tokens=bs + bs // 2, enable_prefix_caching=cache)
    seqs_all = [Seq(str(i), p, max_tokens=bs + 2) for i, p in enumerate(prompts)]
    for s in seqs_all:
        sch.add(s)
    n_prefill_steps = 0
    while not sch.is_finished():
        seqs, is_prefill = sch.schedule()
        assert not is_prefill or sum(s.num_scheduled_tokens for s in seqs) <= bs + bs // 2
        n_prefill_steps += is_prefill
        sch.postprocess(seqs, fake_model(seqs), is_prefill)
    assert all(s.token_ids[len(p):] == expected(p, bs + 2) for s, p in zip(seqs_all, prompts))
    assert len(sch.block_manager.free_block_ids) == 5 and n_prefill_steps > len(prompts)


def _trace(sch, seqs_by_step, make):
    """Run to completion; arrivals keyed by step. Returns per-step state that must match exactly."""
    rows, seqs, step, pending = [], [], 0, {k: list(v) for k, v in seqs_by_step.items()}
    while True:
        for name, prompt, mt in pending.pop(step, []):
            seqs.append(make(name, prompt, mt))
            sch.add(seqs[-1])
        if sch.is_finished():
            if not pending:
                return rows, [s.token_ids for s in seqs]
            step = min(pending)
            continue
        out, is_prefill = sch.schedule()
        row = (is_prefill, [(s.name, s.num_scheduled_tokens, s.num_cached_tokens, tuple(s.block_table)) for s in out])
        sch.postprocess(out, fake_model(out), is_prefill)
        rows.append(row + (tuple(sch.block_manager.free_block_ids), [s.name for s in sch.running],
                           [s.name for s in sch.waiting]))
        step += 1


def _ours(nb, bs, budget, mns, cache):
    return Scheduler(num_blocks=nb, block_size=bs, max_num_batched_tokens=budget, max_num_seqs=mns,
                     enable_prefix_caching=cache)


def _random_case(rng, max_bs=8, min_bs=2):
    bs = rng.randint(min_bs, max_bs)
    nb = rng.randint(3, 12)
    budget, mns = rng.randint(1, 3 * bs + 4), rng.randint(1, 5)
    prefix = [rng.randint(0, 3) for _ in range(rng.randint(0, 3 * bs))]
    arrivals = {}
    for i in range(rng.randint(1, 6)):
        shared = prefix[:rng.randint(0, len(prefix))] if rng.random() < 0.7 else []
        prompt = shared + [rng.randint(0, 3) for _ in range(rng.randint(1, 2 * bs))]
        mt = rng.randint(1, 2 * bs)
        if -(-(len(prompt) + mt - 1) // bs) <= nb:
            arrivals.setdefault(rng.choice([0, 0, 1, 2, 3, 5, 8]), []).append((f"r{i}", prompt, mt))
    return bs, nb, budget, mns, arrivals


def test_cache_off_equals_lesson_step2_step_by_step():
    rng = random.Random(0)
    compared = 0
    for _ in range(400):
        bs, nb, budget, mns, arrivals = _random_case(rng)
        if not arrivals:
            continue
        lesson.Seq.block_size = bs
        try:
            want = _trace(lesson.Scheduler(nb, bs, budget, mns), arrivals, lambda n, p, mt: lesson.Seq(n, p, mt))
        except AssertionError:  # the lesson's scheduler found nothing to run: ours must say so too
            with pytest.raises(RuntimeError, match="do not fit"):
                _trace(_ours(nb, bs, budget, mns, False), arrivals, Seq)
            continue
        got = _trace(_ours(nb, bs, budget, mns, False), arrivals, Seq)
        assert got == want
        compared += 1
    assert compared > 300


@pytest.mark.parametrize("cache", [False, True])
def test_any_block_size_generates_what_each_request_generates_alone(cache):
    rng = random.Random(1)
    for _ in range(150):
        bs, nb, budget, mns, arrivals = _random_case(rng, max_bs=5, min_bs=1)
        sch = _ours(nb, bs, budget, mns, cache)
        _, outputs = _trace(sch, arrivals, Seq)
        prompts = [(p, mt) for k in sorted(arrivals) for _, p, mt in arrivals[k]]
        assert [o[len(p):] for o, (p, _) in zip(outputs, prompts)] == [expected(p, mt) for p, mt in prompts]
        assert sch.block_manager.num_free_blocks == nb
        assert all(b.ref_count == 0 for b in sch.block_manager.blocks)


def test_decode_block_rule():
    assert [needs_new_block(n, 4) for n in range(1, 10)] == [True, False, False, False, True, False, False,
                                                             False, True]
    assert all(needs_new_block(n, 1) for n in range(1, 6))   # block size 1: every token opens a block
    # for block sizes >= 2 the rule is the lesson's len % bs == 1
    assert all(needs_new_block(n, bs) == (n % bs == 1) for bs in range(2, 9) for n in range(1, 40))


# ---- prefix caching ---------------------------------------------------------------------------------

def _prefill(sch, seq):
    sch.add(seq)
    out, is_prefill = sch.schedule()
    assert is_prefill
    sch.postprocess(out, fake_model(out), is_prefill)
    return out


def test_second_request_hits_whole_blocks_of_a_finished_prefix():
    sch = Scheduler(num_blocks=10, block_size=4, max_num_batched_tokens=64)
    system = list(range(100, 110))                      # 10 tokens: 2 full blocks + 2
    a = Seq("A", system + [1, 2], max_tokens=1)
    _prefill(sch, a)                                    # A finishes at prefill (max_tokens=1)
    assert a.is_finished
    a_prefix_blocks = a_blocks_after_free(sch.block_manager, system)
    b = Seq("B", system + [7, 8, 9], max_tokens=2, block_size=4)
    assert sch.block_manager.can_allocate(b) == 2       # blocks 0, 1 hit; block 2 differs (10, 11 vs 1, 2)
    sch.add(b)
    out, _ = sch.schedule()
    assert out == [b] and b.num_cached_tokens == 8 and b.num_scheduled_tokens == 5
    assert b.block_table[:2] == a_prefix_blocks


def a_blocks_after_free(bm, system):
    h0 = bm.compute_hash(system[:4])
    h1 = bm.compute_hash(system[4:8], h0)
    return [bm.hash_to_block_id[h0], bm.hash_to_block_id[h1]]


def test_last_block_is_never_a_hit_even_when_full():
    sch = Scheduler(num_blocks=10, block_size=4, max_num_batched_tokens=64)
    prompt = list(range(8))                              # exactly two full blocks
    _prefill(sch, Seq("A", prompt, max_tokens=1))
    b = Seq("B", prompt, max_tokens=1, block_size=4)
    assert sch.block_manager.can_allocate(b) == 1        # block 1 is full and cached, but it is the last block
    sch.add(b)
    out, _ = sch.schedule()
    assert b.num_cached_tokens == 4 and b.num_scheduled_tokens == 4   # at least one token is computed


def test_two_requests_admitted_in_the_same_step_share_nothing():
    sch = Scheduler(num_blocks=10, block_size=4, max_num_batched_tokens=64)
    prompt = list(range(9))
    a, b = Seq("A", prompt, max_tokens=2), Seq("B", prompt, max_tokens=2)
    sch.add(a)
    sch.add(b)
    out, is_prefill = sch.schedule()
    assert out == [a, b] and is_prefill
    assert b.num_cached_tokens == 0                      # A's blocks are hashed only in postprocess
    assert not set(a.block_table) & set(b.block_table)
    sch.postprocess(out, fake_model(out), is_prefill)
    c = Seq("C", prompt, max_tokens=2, block_size=4)
    assert sch.block_manager.can_allocate(c) == 2        # one step later the prefix is there


def test_preempted_sequence_hits_its_own_freed_blocks():
    # A needs a block while decoding and none is free: B, the tail of running, is preempted. When A
    # finishes, B is re-admitted and hits the two full blocks it freed, since nothing reused them.
    sch = Scheduler(num_blocks=5, block_size=4, max_num_batched_tokens=16)
    a, b = Seq("A", list(range(7)), max_tokens=3), Seq("B", list(range(50, 58)), max_tokens=3)
    eng = Engine(sch)
    trace = eng.run([a, b])
    preempting = [r for r in trace if r.preempted]
    assert preempting and preempting[0].preempted == ["B"]
    readmit = next(r for r in trace[trace.index(preempting[0]) + 1:] if r.is_prefill)
    assert dict(readmit.cached)["B"] == 8                # two full blocks of B came back from the cache
    assert dict(readmit.scheduled)["B"] == 2             # only the rest is recomputed: 10 tokens - 8
    assert a.completion_token_ids == expected(list(range(7)), 3)
    assert b.completion_token_ids == expected(list(range(50, 58)), 3)


def test_same_block_content_at_another_position_is_not_a_hit():
    sch = Scheduler(num_blocks=10, block_size=2, max_num_batched_tokens=64)
    _prefill(sch, Seq("A", [1, 2, 3, 4, 5], max_tokens=1))
    # [3, 4] is cached as the second block of A; as a first block its chained hash differs
    assert sch.block_manager.can_allocate(Seq("B", [3, 4, 9], max_tokens=1, block_size=2)) == 0
    assert sch.block_manager.can_allocate(Seq("C", [1, 2, 3, 4, 9], max_tokens=1, block_size=2)) == 2


def test_shared_blocks_are_reference_counted_and_freed_last_first():
    bm = BlockManager(num_blocks=6, block_size=2)
    a = Sequence([1, 2, 3, 4, 5], name="A", block_size=2)
    bm.allocate(a, 0)
    a.num_scheduled_tokens = 5
    bm.hash_blocks(a)
    a.num_cached_tokens, a.num_scheduled_tokens = 5, 0
    b = Sequence([1, 2, 3, 4, 6], name="B", block_size=2)
    assert bm.can_allocate(b) == 2
    bm.allocate(b, 2)
    assert b.block_table[:2] == a.block_table[:2]
    assert [bm.blocks[i].ref_count for i in a.block_table] == [2, 2, 1]
    bm.deallocate(a)
    assert [bm.blocks[i].ref_count for i in b.block_table] == [1, 1, 1]
    b_blocks = list(b.block_table)
    bm.deallocate(b)
    # B frees its last block first, so the shared prefix blocks are the last to be reused
    assert list(bm.free_block_ids)[-3:] == b_blocks[::-1]
    assert bm.num_free_blocks == 6


def test_freed_blocks_are_evicted_lazily_in_free_list_order():
    sch = Scheduler(num_blocks=3, block_size=2, max_num_batched_tokens=64)
    _prefill(sch, Seq("A", [1, 2, 3], max_tokens=1))      # blocks hashed: [1, 2]; freed
    assert sch.block_manager.can_allocate(Seq("X", [1, 2, 9], max_tokens=1, block_size=2)) == 1
    _prefill(sch, Seq("B", [7, 8, 9, 10, 11], max_tokens=1))   # needs all 3 blocks: reuses A's
    assert sch.block_manager.can_allocate(Seq("Y", [1, 2, 9], max_tokens=1, block_size=2)) == 0


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="block manager's blocks hold 4"):
        BlockManager(num_blocks=4, block_size=4).can_allocate(Sequence([1, 2, 3]))
    with pytest.raises(ValueError, match="block_size"):
        Scheduler(num_blocks=4, block_size=0, max_num_batched_tokens=8)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        Scheduler(num_blocks=4, block_size=4, max_num_batched_tokens=0)
    with pytest.raises(ValueError, match="at least one prompt token"):
        Sequence([])
    with pytest.raises(ValueError, match="could never finish"):
        Scheduler(num_blocks=2, block_size=4, max_num_batched_tokens=8).add(Seq("big", list(range(8)), 2))


def test_engine_adds_requests_between_steps_and_records_the_trace():
    sch = Scheduler(num_blocks=8, block_size=4, max_num_batched_tokens=8)
    a, b = Seq("A", list(range(6)), 3), Seq("B", list(range(20, 25)), 2)
    trace = Engine(sch).run([a], arrivals={2: [b]})
    assert trace[0].scheduled == [("A", 6)] and trace[0].kind == "P"
    assert trace[1].scheduled == [("A", 1)] and trace[1].kind == "D"
    assert trace[2].scheduled == [("B", 5)] and trace[2].is_prefill    # B arrived before step 2
    assert [r.step for r in trace] == list(range(len(trace)))
    assert a.completion_token_ids == expected(list(range(6)), 3)
    assert b.completion_token_ids == expected(list(range(20, 25)), 2)
    assert sch.block_manager.num_free_blocks == 8 and trace[-1].running == [] and trace[-1].waiting == []


def test_engine_trace_reproduces_the_lesson_table():
    sch = Scheduler(num_blocks=5, block_size=4, max_num_batched_tokens=8, enable_prefix_caching=False)
    reqs = [Seq(n, [ord(n) * 100 + j for j in range(L)], max_tokens=4) for n, L in [("A", 6), ("B", 5), ("C", 3)]]
    trace = Engine(sch).run(reqs)
    assert [(r.kind, r.scheduled, r.free_blocks) for r in trace] == [
        ("P", [("A", 6)], 3), ("P", [("B", 5), ("C", 3)], 0), ("D", [("A", 1), ("B", 1), ("C", 1)], 0),
        ("D", [("A", 1), ("B", 1)], 1), ("D", [("A", 1), ("B", 1)], 0), ("P", [("C", 5)], 3), ("D", [("C", 1)], 3)]
    assert [r.preempted for r in trace] == [[], [], [], ["C"], [], [], []]
    assert [r.finished for r in trace] == [[], [], [], [], ["A", "B"], [], ["C"]]
    assert trace[3].lengths == [("A", 8), ("B", 7)]


# ---- the fast forms are the plain ones --------------------------------------------------------------

def _streamed_hash(token_ids, prefix=-1):
    """compute_hash as first written: xxh64 fed the prefix's 8 bytes, then the tokens as a numpy int64 array."""
    import numpy as np
    import xxhash
    h = xxhash.xxh64()
    if prefix != -1:
        h.update(prefix.to_bytes(8, "little"))
    h.update(np.array(token_ids, dtype=np.int64).astype("<i8").tobytes())
    return h.intdigest()


def test_compute_hash_is_the_streamed_xxh64_of_prefix_and_int64_tokens():
    rng = random.Random(5)
    for n in (1, 2, 4, 16, 256):
        bm = BlockManager(num_blocks=2, block_size=n)
        prefix = -1
        for _ in range(5):
            tokens = [rng.randrange(-2**40, 2**40) for _ in range(n)]
            want = _streamed_hash(tokens, prefix)
            assert BlockManager.compute_hash(tokens, prefix) == want == bm._hash_block(tokens, prefix)
            prefix = want


class PlainBlockManager(BlockManager):
    """can_allocate, allocate, deallocate, can_append, may_append and hash_blocks written the plain way, with the
    helpers the fast forms inline (as the chapter's solution and nano-vllm write them)."""

    def can_allocate(self, seq):
        self._check(seq)
        if not self.enable_prefix_caching:
            return 0 if len(self.free_block_ids) >= seq.num_blocks else -1
        h, hits, needed = -1, 0, seq.num_blocks
        for i in range(seq.num_blocks - 1):
            tokens = seq.block(i)
            h = self.compute_hash(tokens, h)
            block_id = self.hash_to_block_id.get(h, -1)
            if block_id == -1 or self.blocks[block_id].token_ids != tokens:
                break
            hits += 1
            needed -= block_id in self.used_block_ids
        return hits if len(self.free_block_ids) >= needed else -1

    def allocate(self, seq, num_cached_blocks):
        assert not seq.block_table
        if not self.enable_prefix_caching:
            num_cached_blocks = 0
        h = -1
        for i in range(num_cached_blocks):
            h = self.compute_hash(seq.block(i), h)
            block_id = self.hash_to_block_id[h]
            block = self.blocks[block_id]
            if block_id in self.used_block_ids:
                block.ref_count += 1
            else:
                block.ref_count = 1
                self.free_block_ids.remove(block_id)
                self.used_block_ids.add(block_id)
            seq.block_table.append(block_id)
        for _ in range(num_cached_blocks, seq.num_blocks):
            seq.block_table.append(self._allocate_block())
        seq.num_cached_tokens = num_cached_blocks * self.block_size

    def deallocate(self, seq):
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self._deallocate_block(block_id)
        seq.num_cached_tokens = 0
        seq.block_table.clear()

    def can_append(self, seq):
        return len(self.free_block_ids) >= needs_new_block(len(seq), self.block_size)

    def may_append(self, seq):
        if needs_new_block(len(seq), self.block_size):
            seq.block_table.append(self._allocate_block())

    def hash_blocks(self, seq):
        if not self.enable_prefix_caching:
            return
        start = seq.num_cached_tokens // self.block_size
        end = (seq.num_cached_tokens + seq.num_scheduled_tokens) // self.block_size
        h = self.blocks[seq.block_table[start - 1]].hash if 0 < start < end else -1
        for i in range(start, end):
            block = self.blocks[seq.block_table[i]]
            h = self.compute_hash(seq.block(i), h)
            block.update(h, seq.block(i))
            self.hash_to_block_id[h] = block.block_id


class PlainScheduler(Scheduler):
    """Scheduler with the plain block manager and the solution's postprocess (append_token, num_tokens,
    num_completion_tokens, an unconditional hash_blocks)."""

    def __init__(self, *args, enable_prefix_caching=True, **kwargs):
        super().__init__(*args, enable_prefix_caching=enable_prefix_caching, **kwargs)
        bm = self.block_manager
        self.block_manager = PlainBlockManager(num_blocks=len(bm.blocks), block_size=bm.block_size,
                                              enable_prefix_caching=enable_prefix_caching)

    def postprocess(self, seqs, token_ids, is_prefill):
        finished = []
        for seq, token_id in zip(seqs, token_ids):
            self.block_manager.hash_blocks(seq)
            seq.num_cached_tokens += seq.num_scheduled_tokens
            seq.num_scheduled_tokens = 0
            if is_prefill and seq.num_cached_tokens < seq.num_tokens:
                continue
            seq.append_token(token_id)
            if (not seq.ignore_eos and token_id == self.eos) or seq.num_completion_tokens == seq.max_tokens:
                seq.status = SequenceStatus.FINISHED
                self.block_manager.deallocate(seq)
                self.running.remove(seq)
                finished.append(seq)
        return finished


class MixedBlockManager(BlockManager):
    """The library's block manager with only can_allocate replaced (as a learner's is): allocate must then
    hash for itself, never reuse a lookup it did not see."""
    can_allocate = PlainBlockManager.can_allocate


class MixedScheduler(Scheduler):
    def __init__(self, *args, enable_prefix_caching=True, **kwargs):
        super().__init__(*args, enable_prefix_caching=enable_prefix_caching, **kwargs)
        bm = self.block_manager
        self.block_manager = MixedBlockManager(num_blocks=len(bm.blocks), block_size=bm.block_size,
                                              enable_prefix_caching=enable_prefix_caching)


@pytest.mark.parametrize("cache", [False, True])
@pytest.mark.parametrize("cls", [PlainScheduler, MixedScheduler])
def test_fast_forms_schedule_like_the_plain_ones(cls, cache):
    rng = random.Random(7)
    compared = 0
    for _ in range(200):
        bs, nb, budget, mns, arrivals = _random_case(rng, max_bs=6, min_bs=1)
        if not arrivals:
            continue
        try:
            want = _trace(cls(num_blocks=nb, block_size=bs, max_num_batched_tokens=budget, max_num_seqs=mns,
                              enable_prefix_caching=cache), arrivals, Seq)
        except RuntimeError:
            with pytest.raises(RuntimeError, match="do not fit"):
                _trace(_ours(nb, bs, budget, mns, cache), arrivals, Seq)
            continue
        assert _trace(_ours(nb, bs, budget, mns, cache), arrivals, Seq) == want
        compared += 1
    assert compared > 150


def test_allocate_never_reuses_a_stale_lookup():
    bm = BlockManager(num_blocks=12, block_size=2)
    for prompt in ([1, 2, 9], [3, 4, 9]):       # two cached first blocks: [1, 2] and [3, 4]
        s = Sequence(prompt, block_size=2)
        bm.allocate(s, 0)
        s.num_scheduled_tokens = 3
        bm.hash_blocks(s)
        s.num_cached_tokens, s.num_scheduled_tokens = 3, 0
    one, three = bm.hash_to_block_id[bm.compute_hash([1, 2])], bm.hash_to_block_id[bm.compute_hash([3, 4])]
    # the same sequence, its tokens changed in place after the lookup (as a grader sets a state)
    s = Sequence([1, 2, 5], block_size=2)
    assert bm.can_allocate(s) == 1
    s.token_ids[:] = [3, 4, 5]
    bm.allocate(s, 1)
    assert s.block_table[0] == three
    # another sequence than the one looked up
    a, b = Sequence([1, 2, 7], block_size=2), Sequence([3, 4, 7], block_size=2)
    assert bm.can_allocate(a) == 1
    bm.allocate(b, 1)
    assert b.block_table[0] == three
    # the lookup's own sequence, unchanged: its hashes are used and give the same blocks
    assert bm.can_allocate(a) == 1
    bm.allocate(a, 1)
    assert a.block_table[0] == one
