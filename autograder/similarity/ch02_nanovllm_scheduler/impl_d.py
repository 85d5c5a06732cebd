# %% needs_new_block
def needs_new_block(seq_len, block_size):
    blocks_before = (seq_len - 1 + block_size - 1) // block_size
    blocks_after = (seq_len + block_size - 1) // block_size
    return blocks_after > blocks_before
# %% preempt
def preempt(self, seq):
    bm = self.block_manager
    seq.status, seq.is_prefill = SequenceStatus.WAITING, True
    bm.deallocate(seq)
    self.waiting.appendleft(seq)
# %% schedule
def schedule(self):
    MAXSEQ, BUDGET = self.max_num_seqs, self.max_num_batched_tokens
    out, total = [], 0
    while len(out) < MAXSEQ and len(self.waiting) > 0 and total < BUDGET:
        nxt = self.waiting[0]
        hit_blocks = -2
        if len(nxt.block_table):
            required = nxt.num_tokens - nxt.num_cached_tokens
        else:
            hit_blocks = self.block_manager.can_allocate(nxt)
            if hit_blocks == -1:
                break
            required = nxt.num_tokens - self.block_size * hit_blocks
        spare = BUDGET - total
        if out and required > spare:
            break
        if hit_blocks != -2:
            self.block_manager.allocate(nxt, hit_blocks)
        nxt.num_scheduled_tokens = required if required <= spare else spare
        total += nxt.num_scheduled_tokens
        out.append(nxt)
        complete = nxt.num_cached_tokens + nxt.num_scheduled_tokens == nxt.num_tokens
        if complete:
            nxt.status = SequenceStatus.RUNNING
            self.running.append(self.waiting.popleft())
    if out:
        return out, True

    decoded = []
    while len(decoded) < MAXSEQ and self.running:
        cand = self.running.popleft()
        preempted_self = False
        while not self.block_manager.can_append(cand):
            if len(self.running) == 0:
                self.preempt(cand)
                preempted_self = True
                break
            tail = self.running.pop()
            self.preempt(tail)
        if preempted_self:
            continue
        cand.num_scheduled_tokens = 1
        cand.is_prefill = False
        self.block_manager.may_append(cand)
        decoded.append(cand)
    if not decoded:
        raise RuntimeError("scheduler stuck: not even one sequence can decode")
    self.running = type(self.running)(decoded + list(self.running))
    return decoded, False
# %% postprocess
def postprocess(self, seqs, token_ids, is_prefill):
    result = []
    pairs = list(zip(seqs, token_ids))
    while pairs:
        seq, tid = pairs.pop(0)
        self.block_manager.hash_blocks(seq)
        step = seq.num_scheduled_tokens
        seq.num_scheduled_tokens = 0
        seq.num_cached_tokens = seq.num_cached_tokens + step
        if is_prefill and seq.num_tokens > seq.num_cached_tokens:
            continue
        seq.append_token(tid)
        stop_reasons = []
        if tid == self.eos and not seq.ignore_eos:
            stop_reasons.append("eos")
        if seq.num_completion_tokens == seq.max_tokens:
            stop_reasons.append("length")
        if stop_reasons:
            seq.status = SequenceStatus.FINISHED
            self.block_manager.deallocate(seq)
            self.running.remove(seq)
            result.append(seq)
    return result
# %% can_allocate
def can_allocate(self, seq):
    n_full = seq.num_blocks - 1
    i, h, live_hits = 0, -1, 0
    while i < n_full:
        tokens = seq.block(i)
        h = self.compute_hash(tokens, h)
        block_id = self.hash_to_block_id.get(h, -1)
        valid = block_id != -1 and self.blocks[block_id].token_ids == tokens
        if not valid:
            break
        live_hits += block_id in self.used_block_ids
        i += 1
    return i if seq.num_blocks - live_hits <= len(self.free_block_ids) else -1
