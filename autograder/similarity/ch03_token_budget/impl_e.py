# %% kv_bytes_per_token
def kv_bytes_per_token(model):
    key_bytes = model.num_layers * model.num_kv_heads * model.head_dim * model.bytes_per_kv_element
    value_bytes = key_bytes
    return key_bytes + value_bytes
# %% step_time
class _StepCost:
    def __init__(self, model):
        self.model = model
        self.tokens = self.seqs = self.pairs = self.context = 0

    def chunk(self, n, prefix):
        self.tokens += n
        self.seqs += 1
        self.pairs += n * prefix + n * (n + 1) // 2
        self.context += prefix

    def flops(self):
        m = self.model
        return (2 * m.matmul_params * self.tokens + 2 * m.vocab_size * m.hidden_size * self.seqs
                + 4 * m.num_layers * m.num_heads * m.head_dim * self.pairs)

    def bytes(self):
        return self.model.weight_bytes + self.model.kv_bytes_per_token * (self.context + self.tokens)


def step_time(model, gpu, chunks=(), decodes=(), overhead_s=DEFAULT_STEP_OVERHEAD_S):
    cost = _StepCost(model)
    for n, prefix in chunks:
        cost.chunk(n, prefix)
    for L in decodes:
        cost.chunk(1, L)          # a decode is a one-token chunk over its context
    return max(cost.flops() / gpu.peak_flops, cost.bytes() / gpu.hbm_bandwidth) + overhead_s
# %% schedule
def schedule(self, state):
    B = self.max_num_batched_tokens
    # (1) reserve KV for decoders, preempting the newest until enough is free
    decoding = None
    while decoding is None or len(decoding) > state.kv_free:
        if decoding is not None:
            state.preempt_tail()
        decoding = [j for j in state.running if state.reserved[j] < state.seq_len[j]]
    state.kv_free -= len(decoding)
    for j in decoding:
        state.reserved[j] += 1

    # (2) sizes for running sequences
    members = [int(j) for j in state.running]
    left = [int(state.seq_len[j] - state.computed[j]) for j in members]
    pool = B - len(members)
    sizes = []
    for rest in left:
        bonus = 0
        if rest > 1 and pool > 0:
            bonus = min(rest - 1, pool)
        pool -= bonus
        sizes.append(1 + bonus)

    # (3) admit from the queue head
    def may_admit():
        return (pool > 0 and bool(state.waiting) and len(members) < min(self.max_num_seqs, B)
                and state.can_admit(state.waiting[0]))

    if not state.preempted_this_step:
        while may_admit():
            j = state.waiting.popleft()
            grant = int(state.seq_len[j]) if state.seq_len[j] < pool else pool
            pool = pool - grant
            state.admit(j)
            members += [j]
            sizes += [grant]
    state.running = np.array(members, dtype=np.int64)
    return members, sizes
# %% v1_schedule
def v1_schedule(self):
    kv = self.kv_cache_manager
    budget = [self.max_num_batched_tokens]
    ids = {"new": [], "resumed": [], "running": [], "preempted": []}
    n_sched, n_hit = {}, {}
    threshold = self.long_prefill_token_threshold if len(self.running) + len(self.waiting) > 1 else 0

    def amount(total):
        if threshold > 0:
            total = min(total, threshold)
        return min(total, budget[0])

    def book(request, n):
        n_sched[request.request_id] = n
        budget[0] -= n

    i = 0
    while i < len(self.running) and budget[0] > 0:
        request = self.running[i]
        n = amount(request.num_tokens - request.num_computed_tokens)
        if n == 0:
            i += 1
            continue
        outcome = "scheduled"
        while kv.allocate_slots(request, n) is None:
            if self.policy == "priority":
                victim = sorted(self.running, key=lambda r: (r.priority, r.arrival_time))[-1]
                top = (victim.priority, victim.arrival_time)
                victim = next(r for r in self.running if (r.priority, r.arrival_time) == top)
            else:
                victim = self.running[-1]
            at = self.running.index(victim)
            self.running.remove(victim)
            if at < i:
                i -= 1
            vid = victim.request_id
            if vid in n_sched:
                budget[0] += n_sched.pop(vid)
                ids["running"].remove(vid)
            self._preempt_request(victim)
            ids["preempted"].append(vid)
            if victim is request:
                outcome = "self-preempted"
                break
        if outcome == "self-preempted":
            if self.policy == "priority":
                continue
            break
        ids["running"].append(request.request_id)
        book(request, n)
        i += 1

    while self.waiting and budget[0] > 0 and not ids["preempted"] and len(self.running) < self.max_num_seqs:
        request = self.waiting.peek_request()
        computed, hit = kv.get_computed_blocks(request)
        n = amount(request.num_tokens - hit)
        slots = kv.allocate_slots(request, n, hit, computed, full_sequence_must_fit=self.reserve_full_prompt)
        if slots is None:
            break
        self.waiting.pop_request()
        self.running.append(request)
        kind = "resumed" if request.status == RequestStatus.PREEMPTED else "new"
        ids[kind].append(request.request_id)
        request.status = RequestStatus.RUNNING
        request.num_computed_tokens = hit
        request.num_cached_tokens = hit
        n_hit[request.request_id] = hit
        book(request, n)
    return self.output(ids["new"], ids["resumed"], ids["running"], ids["preempted"], n_sched, n_hit)
# %% max_chunk
def max_chunk(model, gpu, tpot_target_s, decodes, prefix=0, overhead_s=DEFAULT_STEP_OVERHEAD_S):
    meets = {}

    def within(c):
        if c not in meets:
            meets[c] = costmodel.step_time(model, gpu, prefill_tokens=c, decode_context_lens=decodes,
                                           prefill_context=prefix, overhead_s=overhead_s) <= tpot_target_s
        return meets[c]

    best = 0
    stride = 1
    # gallop upward with growing strides, then shrink them
    while within(best + stride):
        best += stride
        stride *= 2
    while stride > 1:
        stride //= 2
        if within(best + stride):
            best += stride
    return best
# %% max_backlog
def max_backlog(budget, num_decodes, step_s, ttft_target_s):
    exact = ttft_target_s / step_s
    steps = math.floor(exact)
    if math.isclose(exact, steps + 1, rel_tol=1e-12, abs_tol=1e-12):
        steps += 1
    if budget <= num_decodes or steps < 2:
        return 0
    return (steps - 1) * (budget - num_decodes)
# %% mlfq_level
def mlfq_level(first_iteration, attained, first_quantum, levels):
    level, quantum = 0, first_quantum
    joined = False
    spent = 0
    for level in range(levels):
        quantum = first_quantum * 2 ** level
        if not joined:
            if quantum < first_iteration and level < levels - 1:
                continue
            joined = True
        spent += quantum
        if attained <= spent:
            return level
    return levels - 1
