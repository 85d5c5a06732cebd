"""Prefill was scheduled before the decodes: prompts take the budget first, decoders get what is left."""

REPLACE = {
    "schedule": '''
def schedule(self, state):
    B = self.max_num_batched_tokens
    while True:                                       # KV slots for the decodes, preempting as needed
        decoding = [i for i in state.running if state.reserved[i] < state.seq_len[i]]
        if state.kv_free >= len(decoding):
            break
        state.preempt_tail()
    for i in decoding:
        state.reserved[i] += 1
        state.kv_free -= 1
    running = [int(i) for i in state.running]
    batch, budget = {}, B
    # the prompts first: running ones still in prefill, then new admissions
    for i in running:
        left = int(state.seq_len[i] - state.computed[i])
        if i not in decoding and budget > 0:
            batch[i] = min(left, budget)
            budget -= batch[i]
    if not state.preempted_this_step:
        while (budget > 0 and state.waiting and len(running) < min(self.max_num_seqs, B)
               and state.can_admit(state.waiting[0])):
            i = state.waiting.popleft()
            state.admit(i)
            running.append(i)
            batch[i] = min(int(state.seq_len[i]), budget)
            budget -= batch[i]
    state.running = np.array(running, dtype=np.int64)
    # then the decodes, while budget is left
    for i in decoding:
        if budget > 0:
            batch[i] = 1
            budget -= 1
    return list(batch), list(batch.values())
''',
}
FAILS = ["test_schedule"]
MESSAGE = "Pitfall: prefill was scheduled before the decodes"
