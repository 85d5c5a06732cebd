# %% postprocess
def postprocess(self, step):
    if len(step.tokens) != len(step.seqs):
        raise ValueError(f"step {step.index}: no tokens yet")
    finished = []
    for idx, seq in enumerate(step.seqs):
        sampled = bool(step.samples[idx])
        if seq.is_finished:
            if sampled:
                seq.num_placeholders -= 1       # its placeholder is dropped
        else:
            same_epoch = seq.num_preemptions == step.epochs[idx]
            if same_epoch:
                seq.num_done_tokens = step.starts[idx] + step.num_scheduled[idx]
            if not sampled:
                self._hash_done_blocks(seq)
            else:
                token = step.tokens[idx]
                seq.num_placeholders -= 1
                seq.append_token(token)
                if same_epoch:
                    self._hash_done_blocks(seq)
                by_eos = token == self.eos and not seq.ignore_eos
                by_len = seq.num_completion_tokens == seq.max_tokens
                if by_eos or by_len:
                    if seq.num_placeholders:
                        self.wasted_slots, self.wasted_blocks = (self.wasted_slots + 1,
                                                                 self.wasted_blocks + seq.new_block_last_step)
                    seq.status = SequenceStatus.FINISHED
                    self.block_manager.deallocate(seq)
                    for q in (self.running, self.waiting):
                        if seq in q:
                            q.remove(seq)
                            break
                    finished.append(seq)
    return finished
# %% wasted_work
def wasted_work(trace, requests, eos, block_size):
    from collections import Counter
    made = Counter()
    stop_after = {}            # name -> index of the step where it stopped
    lost = Counter()
    for i, step in enumerate(trace):
        for name, start, n, token in step:
            stop = stop_after.get(name)
            if stop is not None and i > stop:
                lost["slots"] += 1
                if n == 1 and not start % block_size:
                    lost["blocks"] += 1
            elif stop is None and token is not None:
                made[name] += 1
                if made[name] == requests[name][0] or (token == eos and not requests[name][1]):
                    stop_after[name] = i
    return lost["slots"], lost["blocks"]
# %% overlap_speedup
def overlap_speedup(cpu_s, gpu_s):
    total = cpu_s + gpu_s
    bottleneck = cpu_s if cpu_s > gpu_s else gpu_s
    return total / bottleneck
