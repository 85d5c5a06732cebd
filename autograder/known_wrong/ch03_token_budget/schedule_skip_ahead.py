"""A later request jumped the head of waiting: admission skips a request that does not fit and takes the next."""

REPLACE = {
    "schedule": '''
def schedule(self, state):
    B = self.max_num_batched_tokens
    while True:
        decoding = [i for i in state.running if state.reserved[i] < state.seq_len[i]]
        if state.kv_free >= len(decoding):
            break
        state.preempt_tail()
    for i in decoding:
        state.reserved[i] += 1
        state.kv_free -= 1
    running = [int(i) for i in state.running]
    tokens = [1] * len(running)
    budget = B - len(running)
    for k, i in enumerate(running):
        left = int(state.seq_len[i] - state.computed[i])
        if left > 1 and budget > 0:
            tokens[k] = min(left, 1 + budget)
            budget -= tokens[k] - 1
    if not state.preempted_this_step:
        for i in list(state.waiting):                 # whoever fits, in queue order
            if budget == 0 or len(running) >= min(self.max_num_seqs, B):
                break
            if state.can_admit(i):
                state.waiting.remove(i)
                state.admit(i)
                running.append(i)
                tokens.append(min(int(state.seq_len[i]), budget))
                budget -= tokens[-1]
    state.running = np.array(running, dtype=np.int64)
    return running, tokens
''',
}
FAILS = ["test_schedule"]
MESSAGE = "Pitfall: a later request jumped the head of waiting"
