"""A prefill other than the first was chunked: the break for a later prefill that does not fit is missing."""

REPLACE = {
    "schedule": '''
def schedule(self):
    picked, num_batched = [], 0
    # 1. prefill, first come first served; only the first sequence of the step may be chunked
    while self.waiting and len(picked) < self.max_num_seqs:
        seq = self.waiting[0]
        remaining = self.max_num_batched_tokens - num_batched
        if remaining == 0:
            break
        if seq.block_table:              # the rest of a chunked prefill: its blocks are already there
            need = seq.num_tokens - seq.num_cached_tokens
        else:
            hits = self.block_manager.can_allocate(seq)
            if hits == -1:
                break                    # the head does not fit: nobody behind it jumps the queue
            need = seq.num_tokens - hits * self.block_size
        if not seq.block_table:
            self.block_manager.allocate(seq, hits)
        seq.num_scheduled_tokens = min(need, remaining)
        num_batched += seq.num_scheduled_tokens
        if seq.num_cached_tokens + seq.num_scheduled_tokens == seq.num_tokens:
            seq.status = SequenceStatus.RUNNING
            self.running.append(self.waiting.popleft())
        picked.append(seq)
    if picked:
        return picked, True

    # 2. decode: one token each; free memory by preempting the most recently admitted sequence
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
    if not picked:
        raise RuntimeError("nothing could be scheduled: the requests do not fit in the KV cache")
    self.running.extendleft(reversed(picked))
    return picked, False
''',
}
FAILS = ["test_schedule", "test_lesson_step2"]
MESSAGE = "Pitfall: a prefill other than the first was chunked"
