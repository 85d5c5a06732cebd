"""Decodes were mixed into a prefill step: running sequences decode, then prefills join the same batch."""

REPLACE = {
    "schedule": '''
def schedule(self):
    picked, num_batched = [], 0
    # decode everything that is running, then add whatever prefill fits: one big batch
    while self.running and len(picked) < self.max_num_seqs:
        seq = self.running.popleft()
        while not self.block_manager.can_append(seq):
            if self.running:
                self.preempt(self.running.pop())
            else:
                self.preempt(seq)
                break
        else:
            seq.num_scheduled_tokens = 1
            seq.is_prefill = False
            self.block_manager.may_append(seq)
            picked.append(seq)
    self.running.extendleft(reversed(picked))
    num_batched = len(picked)
    has_prefill = False
    while self.waiting and len(picked) < self.max_num_seqs:
        seq = self.waiting[0]
        remaining = self.max_num_batched_tokens - num_batched
        if remaining == 0:
            break
        if seq.block_table:
            need = seq.num_tokens - seq.num_cached_tokens
        else:
            hits = self.block_manager.can_allocate(seq)
            if hits == -1:
                break
            need = seq.num_tokens - hits * self.block_size
        if need > remaining and picked:
            break
        if not seq.block_table:
            self.block_manager.allocate(seq, hits)
        seq.num_scheduled_tokens = min(need, remaining)
        num_batched += seq.num_scheduled_tokens
        if seq.num_cached_tokens + seq.num_scheduled_tokens == seq.num_tokens:
            seq.status = SequenceStatus.RUNNING
            self.running.append(self.waiting.popleft())
        picked.append(seq)
        has_prefill = True
    if not picked:
        raise RuntimeError("nothing could be scheduled")
    return picked, has_prefill
''',
}
FAILS = ["test_schedule", "test_lesson_step2"]
MESSAGE = "Pitfall: decodes were mixed into a prefill step"
