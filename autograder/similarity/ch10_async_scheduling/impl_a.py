# %% postprocess
def postprocess(self, step):
    if len(step.tokens) != len(step.seqs):
        raise ValueError("the step has not run yet: no token for every sequence")
    done = []
    for i in range(len(step.seqs)):
        seq = step.seqs[i]
        samples = step.samples[i]
        if seq.is_finished:
            if samples:
                seq.num_placeholders -= 1
            continue
        current = step.epochs[i] == seq.num_preemptions
        if current:
            seq.num_done_tokens = step.starts[i] + step.num_scheduled[i]
        if not samples:
            self._hash_done_blocks(seq)
            continue
        tok = step.tokens[i]
        seq.num_placeholders -= 1
        seq.append_token(tok)
        if current:
            self._hash_done_blocks(seq)
        hit_eos = tok == self.eos and not seq.ignore_eos
        if not (hit_eos or seq.num_completion_tokens == seq.max_tokens):
            continue
        if seq.num_placeholders > 0:
            self.wasted_slots += 1
            if seq.new_block_last_step:
                self.wasted_blocks += 1
        seq.status = SequenceStatus.FINISHED
        self.block_manager.deallocate(seq)
        if seq in self.running:
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)
        done.append(seq)
    return done
# %% wasted_work
def wasted_work(trace, requests, eos, block_size):
    count = dict.fromkeys(requests, 0)
    finished_at = {}
    wasted_slots = wasted_blocks = 0
    for step_no, step in enumerate(trace):
        for name, start, n, token in step:
            if name in finished_at and finished_at[name] < step_no:
                wasted_slots += 1
                if n == 1 and start % block_size == 0:
                    wasted_blocks += 1
                continue
            if token is None or name in finished_at:
                continue
            count[name] += 1
            limit, ignore = requests[name]
            if count[name] == limit or (token == eos and not ignore):
                finished_at[name] = step_no
    return wasted_slots, wasted_blocks
# %% overlap_speedup
def overlap_speedup(cpu_s, gpu_s):
    return (cpu_s + gpu_s) / max(cpu_s, gpu_s)
