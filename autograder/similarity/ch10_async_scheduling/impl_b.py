# %% postprocess
def postprocess(self, step):
    n_slots = len(step.seqs)
    if len(step.tokens) != n_slots:
        raise ValueError(f"{len(step.tokens)} tokens for {n_slots} sequences: run the step first")

    def finish(seq):
        if seq.num_placeholders:
            self.wasted_slots += 1
            self.wasted_blocks += int(seq.new_block_last_step)
        seq.status = SequenceStatus.FINISHED
        self.block_manager.deallocate(seq)
        queue = self.running if seq in self.running else self.waiting
        queue.remove(seq)

    def stops(seq, token):
        if seq.num_completion_tokens == seq.max_tokens:
            return True
        return token == self.eos and not seq.ignore_eos

    out = []
    rows = zip(step.seqs, step.starts, step.num_scheduled, step.samples, step.epochs, step.tokens)
    for seq, first, count, sampled, epoch, token in rows:
        if seq.is_finished:
            seq.num_placeholders -= 1 if sampled else 0
            continue
        fresh = seq.num_preemptions == epoch
        if fresh:
            seq.num_done_tokens = first + count
        if sampled:
            seq.num_placeholders -= 1
            seq.append_token(token)
        if fresh or not sampled:
            self._hash_done_blocks(seq)
        if sampled and stops(seq, token):
            finish(seq)
            out.append(seq)
    return out
# %% wasted_work
def wasted_work(trace, requests, eos, block_size):
    """Replay the trace: once a request has stopped, anything it still has in later steps is waste."""
    produced = {}
    gone = set()
    waste = [0, 0]
    for step in trace:
        newly = set()
        for slot in step:
            who, pos, width, tok = slot
            if who in gone:
                waste[0] += 1
                waste[1] += width == 1 and pos % block_size == 0
            elif tok is not None:
                produced[who] = produced.get(who, 0) + 1
                cap, no_eos = requests[who]
                if produced[who] >= cap or (not no_eos and tok == eos):
                    newly.add(who)
        gone |= newly
    return waste[0], int(waste[1])
# %% overlap_speedup
def overlap_speedup(cpu_s, gpu_s):
    sync_step = cpu_s + gpu_s
    async_step = gpu_s if gpu_s > cpu_s else cpu_s
    return sync_step / async_step
