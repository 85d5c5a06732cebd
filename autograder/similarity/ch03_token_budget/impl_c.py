# %% kv_bytes_per_token
def kv_bytes_per_token(model):
    one_vector = model.head_dim * model.bytes_per_kv_element
    k_and_v = 2 * one_vector * model.num_kv_heads
    return k_and_v * model.num_layers
# %% step_time
import numpy as _np


def step_time(model, gpu, chunks=(), decodes=(), overhead_s=DEFAULT_STEP_OVERHEAD_S):
    ck = _np.array([c for c, _ in chunks], dtype=_np.int64)
    pf = _np.array([p for _, p in chunks], dtype=_np.int64)
    dc = _np.array(list(decodes), dtype=_np.int64)
    computed = int(ck.sum()) + dc.size
    sequences = ck.size + dc.size
    pair_count = int((ck * pf + ck * (ck + 1) // 2).sum()) + int((dc + 1).sum())
    work = (2 * model.matmul_params * computed
            + 2 * model.vocab_size * model.hidden_size * sequences
            + 4 * model.num_layers * model.num_heads * model.head_dim * pair_count)
    cached = int(pf.sum()) + int(dc.sum())
    traffic = model.weight_bytes + model.kv_bytes_per_token * (cached + computed)
    return max(work / gpu.peak_flops, traffic / gpu.hbm_bandwidth) + overhead_s
# %% schedule
def schedule(self, state):
    cap = self.max_num_batched_tokens

    # phase 1: every decoding sequence needs a free KV slot; evict from the tail until they all have one
    def n_decoding():
        return sum(1 for x in state.running if state.reserved[x] < state.seq_len[x])

    while n_decoding() > state.kv_free:
        state.preempt_tail()
    for x in state.running:
        if state.reserved[x] < state.seq_len[x]:
            state.reserved[x] += 1
            state.kv_free -= 1

    # phase 2: one token each, then prompts in running order grow into what is left
    seqs = list(map(int, state.running))
    left_over = cap - len(seqs)
    alloc = []
    for x in seqs:
        want = int(state.seq_len[x]) - int(state.computed[x])
        more = min(want - 1, left_over) if want > 1 else 0
        more = max(more, 0)
        alloc.append(1 + more)
        left_over -= more

    # phase 3: admissions, only when nobody was preempted
    if state.preempted_this_step:
        state.running = np.array(seqs, dtype=np.int64)
        return seqs, alloc
    max_running = min(self.max_num_seqs, cap)
    while left_over > 0 and state.waiting:
        if len(seqs) >= max_running or not state.can_admit(state.waiting[0]):
            break
        x = state.waiting.popleft()
        state.admit(x)
        n = min(int(state.seq_len[x]), left_over)
        seqs.append(x)
        alloc.append(n)
        left_over -= n
    state.running = np.array(seqs, dtype=np.int64)
    return seqs, alloc
# %% v1_schedule
class _StepPlan:
    def __init__(self, budget):
        self.budget = budget
        self.new, self.resumed, self.running, self.preempted = [], [], [], []
        self.tokens, self.hits = {}, {}

    def schedule(self, rid, n, bucket):
        bucket.append(rid)
        self.tokens[rid] = n
        self.budget -= n

    def unschedule(self, rid):
        if rid in self.tokens:
            self.budget += self.tokens.pop(rid)
            self.running.remove(rid)


def v1_schedule(self):
    kv = self.kv_cache_manager
    plan = _StepPlan(self.max_num_batched_tokens)
    thr = self.long_prefill_token_threshold if len(self.running) + len(self.waiting) > 1 else 0
    prio = self.policy == "priority"

    def size(n):
        return min(thr if 0 < thr < n else n, plan.budget)

    idx = 0
    while idx < len(self.running) and plan.budget > 0:
        req = self.running[idx]
        n = size(req.num_tokens - req.num_computed_tokens)
        if not n:
            idx += 1
            continue
        ok = kv.allocate_slots(req, n) is not None
        gave_up = False
        while not ok:
            victim = max(self.running, key=lambda r: (r.priority, r.arrival_time)) if prio else self.running[-1]
            where = self.running.index(victim)
            del self.running[where]
            if where < idx:
                idx -= 1
            plan.unschedule(victim.request_id)
            self._preempt_request(victim)
            plan.preempted.append(victim.request_id)
            if victim is req:
                gave_up = True
                break
            ok = kv.allocate_slots(req, n) is not None
        if gave_up:
            if prio:
                continue
            break
        plan.schedule(req.request_id, n, plan.running)
        idx += 1

    if not plan.preempted:
        while plan.budget > 0 and self.waiting and len(self.running) < self.max_num_seqs:
            req = self.waiting.peek_request()
            blocks, hit = kv.get_computed_blocks(req)
            n = size(req.num_tokens - hit)
            got = kv.allocate_slots(req, n, hit, blocks, full_sequence_must_fit=self.reserve_full_prompt)
            if got is None:
                break
            self.waiting.pop_request()
            self.running.append(req)
            bucket = plan.resumed if req.status == RequestStatus.PREEMPTED else plan.new
            req.status = RequestStatus.RUNNING
            req.num_computed_tokens = req.num_cached_tokens = hit
            plan.hits[req.request_id] = hit
            plan.schedule(req.request_id, n, bucket)
    return self.output(plan.new, plan.resumed, plan.running, plan.preempted, plan.tokens, plan.hits)
# %% max_chunk
import bisect as _bisect
import functools as _functools


def max_chunk(model, gpu, tpot_target_s, decodes, prefix=0, overhead_s=DEFAULT_STEP_OVERHEAD_S):
    price = _functools.partial(costmodel.step_time, model, gpu, decode_context_lens=decodes,
                               prefill_context=prefix, overhead_s=overhead_s)
    bound = 1
    while price(prefill_tokens=bound) <= tpot_target_s:
        bound *= 2
    # first chunk size in 1..bound that misses; the answer is the one before it
    first_miss = _bisect.bisect_left(range(1, bound + 1), True,
                                     key=lambda c: price(prefill_tokens=c) > tpot_target_s) + 1
    return first_miss - 1
# %% max_backlog
from fractions import Fraction as _F


def max_backlog(budget, num_decodes, step_s, ttft_target_s):
    q = _F(ttft_target_s).limit_denominator(10**9) / _F(step_s).limit_denominator(10**9)
    n_steps = q.numerator // q.denominator
    tokens = (n_steps - 1) * (budget - num_decodes)
    return tokens if tokens > 0 else 0
# %% mlfq_level
def mlfq_level(first_iteration, attained, first_quantum, levels):
    quanta = [first_quantum * (1 << k) for k in range(levels)]
    lvl = 0
    for lvl, q in enumerate(quanta):
        if q >= first_iteration:
            break
    served = 0
    for k in range(lvl, levels):
        served += quanta[k]
        if attained <= served or k == levels - 1:
            return k
    return levels - 1
