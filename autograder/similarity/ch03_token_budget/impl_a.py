# %% kv_bytes_per_token
def kv_bytes_per_token(model):
    per_layer = model.num_kv_heads * model.head_dim * model.bytes_per_kv_element
    return per_layer * model.num_layers * 2
# %% step_time
def step_time(model, gpu, chunks=(), decodes=(), overhead_s=DEFAULT_STEP_OVERHEAD_S):
    n_tokens = 0
    n_seqs = 0
    attn_pairs = 0
    kv_read = 0
    for c, prefix in chunks:
        n_tokens += c
        n_seqs += 1
        attn_pairs += c * prefix + c * (c + 1) // 2
        kv_read += prefix
    for ctx in decodes:
        n_tokens += 1
        n_seqs += 1
        attn_pairs += ctx + 1
        kv_read += ctx
    matmul = 2 * model.matmul_params * n_tokens
    logits = 2 * model.vocab_size * model.hidden_size * n_seqs
    attention = 4 * model.num_layers * model.num_heads * model.head_dim * attn_pairs
    compute_s = (matmul + logits + attention) / gpu.peak_flops
    memory_s = (model.weight_bytes + model.kv_bytes_per_token * (kv_read + n_tokens)) / gpu.hbm_bandwidth
    return max(compute_s, memory_s) + overhead_s
# %% schedule
def schedule(self, state):
    budget_total = self.max_num_batched_tokens

    def decoders():
        return [r for r in state.running if state.reserved[r] < state.seq_len[r]]

    dec = decoders()
    while state.kv_free < len(dec):
        state.preempt_tail()
        dec = decoders()
    for r in dec:
        state.reserved[r] += 1
    state.kv_free -= len(dec)

    ids = [int(r) for r in state.running]
    counts = []
    spare = budget_total - len(ids)
    for r in ids:
        remaining = int(state.seq_len[r]) - int(state.computed[r])
        grant = 1
        if remaining > 1 and spare > 0:
            grant = min(remaining, spare + 1)
            spare -= grant - 1
        counts.append(grant)

    seat_limit = min(self.max_num_seqs, budget_total)
    if not state.preempted_this_step:
        while spare > 0 and len(state.waiting) > 0 and len(ids) < seat_limit:
            head = state.waiting[0]
            if not state.can_admit(head):
                break
            state.waiting.popleft()
            state.admit(head)
            ids.append(head)
            give = min(int(state.seq_len[head]), spare)
            counts.append(give)
            spare -= give
    state.running = np.array(ids, dtype=np.int64)
    return ids, counts
# %% v1_schedule
def v1_schedule(self):
    kv = self.kv_cache_manager
    left = self.max_num_batched_tokens
    admitted_new, admitted_resumed, kept, evicted = [], [], [], []
    sched, hits = {}, {}
    cap = self.long_prefill_token_threshold if len(self.running) + len(self.waiting) > 1 else 0

    def clip(n):
        if cap > 0 and n > cap:
            n = cap
        return min(n, left)

    def pick_victim():
        if self.policy == "priority":
            return max(self.running, key=lambda r: (r.priority, r.arrival_time))
        return self.running[-1]

    pos = 0
    while pos < len(self.running) and left > 0:
        req = self.running[pos]
        want = clip(req.num_tokens - req.num_computed_tokens)
        if want == 0:
            pos += 1
            continue
        got_slots = False
        self_evicted = False
        while True:
            if kv.allocate_slots(req, want) is not None:
                got_slots = True
                break
            victim = pick_victim()
            v_at = self.running.index(victim)
            self.running.pop(v_at)
            if v_at < pos:
                pos -= 1
            rid = victim.request_id
            if rid in sched:
                left += sched.pop(rid)
                kept.remove(rid)
            self._preempt_request(victim)
            evicted.append(rid)
            if victim is req:
                self_evicted = True
                break
        if self_evicted:
            if self.policy == "priority":
                continue
            break
        kept.append(req.request_id)
        sched[req.request_id] = want
        left -= want
        pos += 1

    if not evicted:
        while left > 0 and self.waiting and len(self.running) < self.max_num_seqs:
            req = self.waiting.peek_request()
            blocks, hit = kv.get_computed_blocks(req)
            want = clip(req.num_tokens - hit)
            if kv.allocate_slots(req, want, hit, blocks, full_sequence_must_fit=self.reserve_full_prompt) is None:
                break
            self.waiting.pop_request()
            self.running.append(req)
            if req.status == RequestStatus.PREEMPTED:
                admitted_resumed.append(req.request_id)
            else:
                admitted_new.append(req.request_id)
            req.status = RequestStatus.RUNNING
            req.num_computed_tokens = hit
            req.num_cached_tokens = hit
            hits[req.request_id] = hit
            sched[req.request_id] = want
            left -= want
    return self.output(admitted_new, admitted_resumed, kept, evicted, sched, hits)
# %% max_chunk
def max_chunk(model, gpu, tpot_target_s, decodes, prefix=0, overhead_s=DEFAULT_STEP_OVERHEAD_S):
    def ok(chunk):
        return costmodel.step_time(model, gpu, prefill_tokens=chunk, decode_context_lens=decodes,
                                   prefill_context=prefix, overhead_s=overhead_s) <= tpot_target_s

    if not ok(1):
        return 0
    # build the answer bit by bit, from a power of two above it down
    top = 1
    while ok(top * 2):
        top *= 2
    answer = top
    step = top // 2
    while step >= 1:
        if ok(answer + step):
            answer += step
        step //= 2
    return answer
# %% max_backlog
def max_backlog(budget, num_decodes, step_s, ttft_target_s):
    per_step = budget - num_decodes
    if per_step <= 0:
        return 0
    ratio = ttft_target_s / step_s
    nearest = round(ratio)
    whole = nearest if abs(ratio - nearest) < 1e-9 * max(1.0, abs(ratio)) else math.floor(ratio)
    if whole <= 1:
        return 0
    return per_step * (whole - 1)
# %% mlfq_level
def mlfq_level(first_iteration, attained, first_quantum, levels):
    last = levels - 1
    entry = 0
    quantum = first_quantum
    while entry < last and quantum < first_iteration:
        entry += 1
        quantum *= 2
    level = entry
    budget = quantum
    while level < last and attained > budget:
        level += 1
        quantum *= 2
        budget += quantum
    return level
