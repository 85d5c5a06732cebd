# %% needs_new_block
def needs_new_block(seq_len, block_size):
    position = seq_len - 1
    return position % block_size == 0
# %% preempt
def preempt(self, seq):
    self.block_manager.deallocate(seq)
    seq.is_prefill = True
    seq.status = SequenceStatus.WAITING
    self.waiting.extendleft((seq,))
# %% schedule
def schedule(self):
    def tokens_needed(seq):
        if seq.block_table:
            return seq.num_tokens - seq.num_cached_tokens, None
        hits = self.block_manager.can_allocate(seq)
        if hits < 0:
            return None, None
        return seq.num_tokens - hits * self.block_size, hits

    def prefill_phase():
        chosen, used = [], 0
        while self.waiting and len(chosen) < self.max_num_seqs:
            room = self.max_num_batched_tokens - used
            if room <= 0:
                break
            head = self.waiting[0]
            had_blocks = bool(head.block_table)
            need, hits = tokens_needed(head)
            if need is None or (chosen and need > room):
                break
            if not had_blocks:
                self.block_manager.allocate(head, hits)
            head.num_scheduled_tokens = need if need < room else room
            used += head.num_scheduled_tokens
            if head.num_tokens == head.num_cached_tokens + head.num_scheduled_tokens:
                head.status = SequenceStatus.RUNNING
                self.waiting.popleft()
                self.running.append(head)
            chosen.append(head)
        return chosen

    def decode_phase():
        chosen = []
        while self.running and len(chosen) < self.max_num_seqs:
            cur = self.running.popleft()
            ok = True
            while not self.block_manager.can_append(cur):
                if not self.running:
                    self.preempt(cur)
                    ok = False
                    break
                self.preempt(self.running.pop())
            if ok:
                cur.num_scheduled_tokens = 1
                cur.is_prefill = False
                self.block_manager.may_append(cur)
                chosen.append(cur)
        return chosen

    batch = prefill_phase()
    if batch:
        return batch, True
    batch = decode_phase()
    if not batch:
        raise RuntimeError("no sequence fits in the KV cache")
    for s in reversed(batch):
        self.running.appendleft(s)
    return batch, False
# %% postprocess
def postprocess(self, seqs, token_ids, is_prefill):
    done = []
    for i in range(len(seqs)):
        seq, tok = seqs[i], token_ids[i]
        self.block_manager.hash_blocks(seq)
        seq.num_cached_tokens = seq.num_cached_tokens + seq.num_scheduled_tokens
        seq.num_scheduled_tokens = 0
        mid_prompt = is_prefill and seq.num_cached_tokens < seq.num_tokens
        if mid_prompt:
            continue
        seq.append_token(tok)
        hit_eos = tok == self.eos and not seq.ignore_eos
        hit_limit = seq.num_completion_tokens == seq.max_tokens
        if hit_eos or hit_limit:
            seq.status = SequenceStatus.FINISHED
            self.block_manager.deallocate(seq)
            self.running.remove(seq)
            done.append(seq)
    return done
# %% can_allocate
def can_allocate(self, seq):
    hits = 0
    from_free = seq.num_blocks
    prev = -1
    for i in range(seq.num_blocks - 1):
        toks = seq.block(i)
        prev = self.compute_hash(toks, prev)
        bid = self.hash_to_block_id.get(prev)
        if bid is None or bid < 0 or list(self.blocks[bid].token_ids) != list(toks):
            break
        hits += 1
        if bid in self.used_block_ids:
            from_free -= 1
    if len(self.free_block_ids) < from_free:
        return -1
    return hits
