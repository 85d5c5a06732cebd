# %% needs_new_block
def needs_new_block(seq_len, block_size):
    return seq_len % block_size == 1 % block_size
# %% preempt
def preempt(self, seq):
    seq.is_prefill, seq.status = True, SequenceStatus.WAITING
    self.block_manager.deallocate(seq)
    self.waiting.insert(0, seq)
# %% schedule
def schedule(self):
    bm = self.block_manager
    cap = self.max_num_batched_tokens
    batch = []
    spent = 0
    while True:
        if not self.waiting or len(batch) >= self.max_num_seqs or spent == cap:
            break
        s = self.waiting[0]
        fresh = len(s.block_table) == 0
        if fresh:
            cached_blocks = bm.can_allocate(s)
            if cached_blocks == -1:
                break
            todo = s.num_tokens - cached_blocks * self.block_size
        else:
            todo = s.num_tokens - s.num_cached_tokens
        if batch and todo > cap - spent:
            break
        if fresh:
            bm.allocate(s, cached_blocks)
        s.num_scheduled_tokens = min(todo, cap - spent)
        spent += s.num_scheduled_tokens
        batch.append(s)
        if s.num_cached_tokens + s.num_scheduled_tokens != s.num_tokens:
            continue          # chunk: it stays first in line
        s.status = SequenceStatus.RUNNING
        self.running.append(self.waiting.popleft())
    if len(batch) > 0:
        return batch, True

    limit = self.max_num_seqs
    while len(self.running) > 0 and len(batch) < limit:
        s = self.running.popleft()
        victim = None
        while not bm.can_append(s):
            victim = self.running.pop() if self.running else s
            self.preempt(victim)
            if victim is s:
                break
        if victim is s:
            continue
        s.num_scheduled_tokens = 1
        s.is_prefill = False
        bm.may_append(s)
        batch.append(s)
    if len(batch) == 0:
        raise RuntimeError("KV cache too small for any running sequence")
    self.running.extendleft(batch[::-1])
    return batch, False
# %% postprocess
def postprocess(self, seqs, token_ids, is_prefill):
    def finish(seq):
        seq.status = SequenceStatus.FINISHED
        self.block_manager.deallocate(seq)
        self.running.remove(seq)

    def is_done(seq, tok):
        if tok == self.eos and not seq.ignore_eos:
            return True
        return seq.num_completion_tokens == seq.max_tokens

    out = []
    for seq, tok in zip(seqs, token_ids):
        self.block_manager.hash_blocks(seq)
        seq.num_cached_tokens += seq.num_scheduled_tokens
        seq.num_scheduled_tokens = 0
        if not is_prefill or seq.num_cached_tokens >= seq.num_tokens:
            seq.append_token(tok)
            if is_done(seq, tok):
                finish(seq)
                out.append(seq)
    return out
# %% can_allocate
def can_allocate(self, seq):
    def walk(i, parent_hash):
        """Count the consecutive cached blocks from block i on, and how many of them are in use."""
        if i >= seq.num_blocks - 1:
            return 0, 0
        content = seq.block(i)
        h = self.compute_hash(content, parent_hash)
        if h not in self.hash_to_block_id:
            return 0, 0
        block_id = self.hash_to_block_id[h]
        if block_id == -1 or self.blocks[block_id].token_ids != content:
            return 0, 0
        more_hits, more_used = walk(i + 1, h)
        return 1 + more_hits, (block_id in self.used_block_ids) + more_used

    if seq.num_blocks > 800:
        import sys
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * seq.num_blocks))
    cached, in_use = walk(0, -1)
    return cached if seq.num_blocks - in_use <= len(self.free_block_ids) else -1
