# %% kv_bytes_per_token
import math as _m


def kv_bytes_per_token(model):
    factors = (2, model.num_layers, model.num_kv_heads, model.head_dim, model.bytes_per_kv_element)
    return _m.prod(factors)
# %% step_time
def step_time(model, gpu, chunks=(), decodes=(), overhead_s=DEFAULT_STEP_OVERHEAD_S):
    chunks, decodes = list(chunks), list(decodes)
    sizes, prefixes = (list(col) for col in zip(*chunks)) if chunks else ([], [])

    def triangle(n):
        return n * (n + 1) // 2

    T = sum(sizes) + len(decodes)
    attention_pairs = sum(map(lambda n, p: n * p + triangle(n), sizes, prefixes)) + sum(decodes) + len(decodes)
    per_token_flops = 2 * model.matmul_params
    per_seq_flops = 2 * model.vocab_size * model.hidden_size
    per_pair_flops = 4 * model.num_layers * model.num_heads * model.head_dim
    total = per_token_flops * T + per_seq_flops * (len(sizes) + len(decodes)) + per_pair_flops * attention_pairs
    resident = sum(prefixes) + sum(decodes)
    t_mem = (model.weight_bytes + model.kv_bytes_per_token * (resident + T)) / gpu.hbm_bandwidth
    return max(total / gpu.peak_flops, t_mem) + overhead_s
# %% schedule
def _reserve_decode_slots(state):
    while True:
        needy = [s for s in state.running if state.reserved[s] < state.seq_len[s]]
        if len(needy) <= state.kv_free:
            break
        state.preempt_tail()
    for s in needy:
        state.reserved[s] += 1
        state.kv_free -= 1


def schedule(self, state):
    _reserve_decode_slots(state)
    B = self.max_num_batched_tokens
    batch = {}
    for s in state.running:
        batch[int(s)] = 1
    free = B - len(batch)
    for s in list(batch):
        todo = int(state.seq_len[s] - state.computed[s])
        if todo > 1 and free > 0:
            extra = min(todo - 1, free)
            batch[s] += extra
            free -= extra
    ceiling = min(self.max_num_seqs, B)
    while (not state.preempted_this_step and free > 0 and state.waiting
           and len(batch) < ceiling and state.can_admit(state.waiting[0])):
        s = state.waiting.popleft()
        state.admit(s)
        batch[s] = min(int(state.seq_len[s]), free)
        free -= batch[s]
    order = list(batch)
    state.running = np.array(order, dtype=np.int64)
    return order, [batch[s] for s in order]
# %% v1_schedule
def _v1_victim(self):
    if self.policy == "priority":
        best = self.running[0]
        for r in self.running[1:]:
            if (r.priority, r.arrival_time) > (best.priority, best.arrival_time):
                best = r
        return best
    return self.running[-1]


def v1_schedule(self):
    mgr = self.kv_cache_manager
    budget = self.max_num_batched_tokens
    out_new, out_resumed, out_running, out_preempted = [], [], [], []
    tokens, hit_tokens = {}, {}
    many = len(self.running) + len(self.waiting) > 1
    limit = self.long_prefill_token_threshold if many else 0

    i = 0
    while i < len(self.running):
        if budget <= 0:
            break
        r = self.running[i]
        n = r.num_tokens - r.num_computed_tokens
        if limit and n > limit:
            n = limit
        if n > budget:
            n = budget
        if n == 0:
            i += 1
            continue
        lost_self = False
        while mgr.allocate_slots(r, n) is None:
            v = _v1_victim(self)
            j = self.running.index(v)
            self.running.remove(v)
            i -= 1 if j < i else 0
            if v.request_id in tokens:
                budget += tokens[v.request_id]
                del tokens[v.request_id]
                out_running.remove(v.request_id)
            self._preempt_request(v)
            out_preempted.append(v.request_id)
            if v is r:
                lost_self = True
                break
        if lost_self:
            if self.policy != "priority":
                break
            continue
        out_running.append(r.request_id)
        tokens[r.request_id] = n
        budget -= n
        i += 1

    while len(out_preempted) == 0 and budget > 0 and len(self.waiting) > 0 \
            and len(self.running) < self.max_num_seqs:
        r = self.waiting.peek_request()
        blocks, hit = mgr.get_computed_blocks(r)
        n = r.num_tokens - hit
        if limit and n > limit:
            n = limit
        n = min(n, budget)
        if mgr.allocate_slots(r, n, hit, blocks, full_sequence_must_fit=self.reserve_full_prompt) is None:
            break
        self.waiting.pop_request()
        self.running.append(r)
        was_preempted = r.status == RequestStatus.PREEMPTED
        (out_resumed if was_preempted else out_new).append(r.request_id)
        r.status = RequestStatus.RUNNING
        r.num_computed_tokens = hit
        r.num_cached_tokens = hit
        hit_tokens[r.request_id] = hit
        tokens[r.request_id] = n
        budget -= n
    return self.output(out_new, out_resumed, out_running, out_preempted, tokens, hit_tokens)
# %% max_chunk
def max_chunk(model, gpu, tpot_target_s, decodes, prefix=0, overhead_s=DEFAULT_STEP_OVERHEAD_S):
    def t(c):
        return costmodel.step_time(model, gpu, c, decodes, prefix, overhead_s)

    if t(1) > tpot_target_s:
        return 0
    hi = 4
    while t(hi) <= tpot_target_s:
        hi *= 4
    lo = 1                          # invariant: t(lo) meets the target, t(hi) misses it
    while lo + 1 < hi:
        mid = lo + (hi - lo) // 2
        if t(mid) <= tpot_target_s:
            lo = mid
        else:
            hi = mid
    return lo
# %% max_backlog
def max_backlog(budget, num_decodes, step_s, ttft_target_s):
    eps = 1e-9 * step_s
    k = 0
    while (k + 1) * step_s <= ttft_target_s + eps:
        k += 1
    return (k - 1) * (budget - num_decodes) if k >= 1 and budget > num_decodes else 0
# %% mlfq_level
from bisect import bisect_left as _bl
from itertools import accumulate as _accumulate


def mlfq_level(first_iteration, attained, first_quantum, levels):
    start = next((k for k in range(levels) if first_quantum * 2 ** k >= first_iteration), levels - 1)
    ends = list(_accumulate(first_quantum * 2 ** k for k in range(start, levels)))
    return min(start + _bl(ends, attained), levels - 1)
