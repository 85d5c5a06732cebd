"""The step overran the token budget: decodes first, but each prompt chunk is cut to the whole budget."""

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
    budget = B                                        # the chunks share the budget among themselves
    for k, i in enumerate(running):
        left = int(state.seq_len[i] - state.computed[i])
        if left > 1 and budget > 0:
            tokens[k] = min(left, budget)
            budget -= tokens[k]
    if not state.preempted_this_step:
        while (budget > 0 and state.waiting and len(running) < min(self.max_num_seqs, B)
               and state.can_admit(state.waiting[0])):
            i = state.waiting.popleft()
            state.admit(i)
            running.append(i)
            tokens.append(min(int(state.seq_len[i]), budget))
            budget -= tokens[-1]
    state.running = np.array(running, dtype=np.int64)
    return running, tokens
''',
}
FAILS = ["test_schedule"]
MESSAGE = "Pitfall: the step overran the token budget"
