# %% needs_new_block
def needs_new_block(seq_len, block_size):
    if block_size == 1:
        return True
    return bool(seq_len > 0 and (seq_len - 1) - ((seq_len - 1) // block_size) * block_size == 0)
# %% preempt
def preempt(self, seq):
    for attr, val in (("status", SequenceStatus.WAITING), ("is_prefill", True)):
        setattr(seq, attr, val)
    self.block_manager.deallocate(seq)
    self.waiting.appendleft(seq)
# %% schedule
def _prefill_need(self, seq):
    """(tokens to compute, cached blocks or None for a chunk continuation); None tokens: no room."""
    if seq.block_table:
        return seq.num_tokens - seq.num_cached_tokens, None
    cached = self.block_manager.can_allocate(seq)
    return (None, None) if cached == -1 else (seq.num_tokens - cached * self.block_size, cached)


def schedule(self):
    picked = []
    used_tokens = 0
    # --- prefill: strictly FCFS on the head of waiting ---
    for _ in range(self.max_num_seqs):
        if not self.waiting:
            break
        left = self.max_num_batched_tokens - used_tokens
        if left == 0:
            break
        head = self.waiting[0]
        need, cached = _prefill_need(self, head)
        if need is None:
            break
        if picked and need > left:
            break
        if cached is not None:
            self.block_manager.allocate(head, cached)
        take = min(need, left)
        head.num_scheduled_tokens = take
        used_tokens += take
        picked.append(head)
        if head.num_cached_tokens + take == head.num_tokens:
            head.status = SequenceStatus.RUNNING
            self.waiting.popleft()
            self.running.append(head)
    if picked:
        return picked, True
    # --- decode ---
    kept = []
    while self.running and len(kept) < self.max_num_seqs:
        seq = self.running.popleft()
        scheduled = False
        while True:
            if self.block_manager.can_append(seq):
                scheduled = True
                break
            if self.running:
                self.preempt(self.running.pop())
            else:
                self.preempt(seq)
                break
        if scheduled:
            seq.num_scheduled_tokens = 1
            seq.is_prefill = False
            self.block_manager.may_append(seq)
            kept.append(seq)
    if not kept:
        raise RuntimeError("out of KV blocks: cannot schedule anything")
    for seq in reversed(kept):
        self.running.appendleft(seq)
    return kept, False
# %% postprocess
def postprocess(self, seqs, token_ids, is_prefill):
    finished_now = []
    for k, seq in enumerate(seqs):
        self.block_manager.hash_blocks(seq)
        seq.num_cached_tokens, seq.num_scheduled_tokens = seq.num_cached_tokens + seq.num_scheduled_tokens, 0
        if is_prefill and seq.num_cached_tokens < seq.num_tokens:
            continue
        token = token_ids[k]
        seq.append_token(token)
        stop = False
        if not seq.ignore_eos:
            stop = token == self.eos
        if seq.num_completion_tokens == seq.max_tokens:
            stop = True
        if not stop:
            continue
        seq.status = SequenceStatus.FINISHED
        self.block_manager.deallocate(seq)
        self.running.remove(seq)
        finished_now.append(seq)
    return finished_now
# %% can_allocate
def can_allocate(self, seq):
    matched = []
    chain = -1
    for idx in range(max(0, seq.num_blocks - 1)):
        data = seq.block(idx)
        chain = self.compute_hash(data, chain)
        candidate = self.hash_to_block_id.get(chain, -1)
        if candidate != -1 and self.blocks[candidate].token_ids == data:
            matched.append(candidate)
        else:
            break
    reused_live = sum(1 for b in matched if b in self.used_block_ids)
    fresh_needed = seq.num_blocks - reused_live
    enough = len(self.free_block_ids) >= fresh_needed
    return len(matched) if enough else -1
