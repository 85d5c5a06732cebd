# %% kv_bytes_per_token
def kv_bytes_per_token(model):
    elements = 1
    for dim in (model.num_layers, model.num_kv_heads, model.head_dim):
        elements *= dim
    return 2 * elements * model.bytes_per_kv_element
# %% step_time
def step_time(model, gpu, chunks=(), decodes=(), overhead_s=DEFAULT_STEP_OVERHEAD_S):
    # every request as (tokens computed now, tokens cached before)
    work = [(c, p) for c, p in chunks] + [(1, ctx) for ctx in decodes]
    computed = sum(t for t, _ in work)
    # a chunk of t tokens on p cached ones has t*p + t(t+1)/2 (query, key) pairs; a decode is t=1
    pairs = sum(t * p + t * (t + 1) // 2 for t, p in work)
    flops = 2 * model.matmul_params * computed
    flops += 2 * model.vocab_size * model.hidden_size * len(work)
    flops += 4 * model.num_layers * model.num_heads * model.head_dim * pairs
    moved = model.weight_bytes + model.kv_bytes_per_token * sum(t + p for t, p in work)
    return overhead_s + max(flops / gpu.peak_flops, moved / gpu.hbm_bandwidth)
# %% schedule
def schedule(self, state):
    def want_slot(i):
        return state.reserved[i] < state.seq_len[i]

    while sum(map(want_slot, state.running)) > state.kv_free:
        state.preempt_tail()
    reserved_now = [i for i in state.running if want_slot(i)]
    for i in reserved_now:
        state.reserved[i] = state.reserved[i] + 1
    state.kv_free = state.kv_free - len(reserved_now)

    step_ids, step_tokens = [], []
    room = self.max_num_batched_tokens - len(state.running)
    for i in state.running:
        i = int(i)
        rest = int(state.seq_len[i]) - int(state.computed[i])
        take = 1
        if rest > 1 and room > 0:
            take = 1 + min(rest - 1, room)
            room -= take - 1
        step_ids.append(i)
        step_tokens.append(take)

    allowed = min(self.max_num_seqs, self.max_num_batched_tokens)
    admitting = not state.preempted_this_step
    while admitting:
        admitting = (room > 0 and len(state.waiting) > 0 and len(step_ids) < allowed
                     and state.can_admit(state.waiting[0]))
        if admitting:
            new = state.waiting.popleft()
            state.admit(new)
            grant = int(state.seq_len[new])
            if grant > room:
                grant = room
            step_ids.append(new)
            step_tokens.append(grant)
            room -= grant
    state.running = np.asarray(step_ids, dtype=np.int64)
    return step_ids, step_tokens
# %% v1_schedule
def v1_schedule(self):
    kvm = self.kv_cache_manager
    remaining_budget = self.max_num_batched_tokens
    news, resumes, runs, preempts = [], [], [], []
    scheduled, hit_map = {}, {}
    long_cap = 0
    if len(self.running) + len(self.waiting) > 1:
        long_cap = self.long_prefill_token_threshold

    def capped(n):
        if long_cap > 0:
            n = min(n, long_cap)
        return min(n, remaining_budget)

    def evict_one():
        nonlocal remaining_budget, cursor
        if self.policy == "priority":
            victim = max(self.running, key=lambda q: (q.priority, q.arrival_time))
        else:
            victim = self.running[-1]
        k = self.running.index(victim)
        self.running.pop(k)
        if k < cursor:
            cursor -= 1
        if victim.request_id in scheduled:
            remaining_budget += scheduled.pop(victim.request_id)
            runs.remove(victim.request_id)
        self._preempt_request(victim)
        preempts.append(victim.request_id)
        return victim

    cursor = 0
    stop = False
    while not stop and cursor < len(self.running) and remaining_budget > 0:
        req = self.running[cursor]
        n = capped(req.num_tokens - req.num_computed_tokens)
        if n == 0:
            cursor += 1
            continue
        while kvm.allocate_slots(req, n) is None:
            if evict_one() is req:
                break
        else:
            runs.append(req.request_id)
            scheduled[req.request_id] = n
            remaining_budget -= n
            cursor += 1
            continue
        stop = self.policy != "priority"

    def admit(req, hit, n):
        nonlocal remaining_budget
        self.waiting.pop_request()
        self.running.append(req)
        (resumes if req.status == RequestStatus.PREEMPTED else news).append(req.request_id)
        req.status = RequestStatus.RUNNING
        req.num_computed_tokens = req.num_cached_tokens = hit
        hit_map[req.request_id], scheduled[req.request_id] = hit, n
        remaining_budget -= n

    admitting = not preempts
    while admitting:
        if remaining_budget <= 0 or not self.waiting or len(self.running) >= self.max_num_seqs:
            break
        head = self.waiting.peek_request()
        computed_blocks, hit = kvm.get_computed_blocks(head)
        n = capped(head.num_tokens - hit)
        granted = kvm.allocate_slots(head, n, hit, computed_blocks, full_sequence_must_fit=self.reserve_full_prompt)
        admitting = granted is not None
        if admitting:
            admit(head, hit, n)
    return self.output(news, resumes, runs, preempts, scheduled, hit_map)
# %% max_chunk
def max_chunk(model, gpu, tpot_target_s, decodes, prefix=0, overhead_s=DEFAULT_STEP_OVERHEAD_S):
    def cost(c):
        return costmodel.step_time(model, gpu, prefill_tokens=c, decode_context_lens=decodes,
                                   prefill_context=prefix, overhead_s=overhead_s)

    def search(lo, hi):
        # cost(lo) <= target < cost(hi)
        if hi - lo <= 1:
            return lo
        mid = (lo + hi) // 2
        return search(mid, hi) if cost(mid) <= tpot_target_s else search(lo, mid)

    if cost(1) > tpot_target_s:
        return 0
    upper = 2
    while cost(upper) <= tpot_target_s:
        upper <<= 1
    return search(upper >> 1, upper)
# %% max_backlog
def max_backlog(budget, num_decodes, step_s, ttft_target_s):
    spare = budget - num_decodes
    steps_fit = int(ttft_target_s / step_s + 1e-9)
    extra_steps = steps_fit - 1
    if spare <= 0 or extra_steps <= 0:
        return 0
    return spare * extra_steps
# %% mlfq_level
import math as _math


def mlfq_level(first_iteration, attained, first_quantum, levels):
    top = levels - 1
    if first_iteration <= first_quantum:
        entry = 0
    else:
        entry = max(0, _math.ceil(_math.log2(first_iteration) - _math.log2(first_quantum)))
        # guard the log against rounding on exact powers of two
        while entry > 0 and first_quantum * 2 ** (entry - 1) >= first_iteration:
            entry -= 1
        while first_quantum * 2 ** entry < first_iteration:
            entry += 1
    entry = min(entry, top)
    # service through the end of level L (entry <= L) is q * (2**(L+1) - 2**entry)
    level = entry
    while level < top and attained > first_quantum * (2 ** (level + 1) - 2 ** entry):
        level += 1
    return level
