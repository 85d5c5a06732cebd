# %% postprocess
def postprocess(self, step):
    if len(step.tokens) - len(step.seqs):
        raise ValueError("run the model on this step before postprocessing it")
    finished_now = []
    slots = list(zip(step.seqs, step.starts, step.num_scheduled, step.samples, step.epochs, step.tokens))
    while slots:
        seq, start, n, sample, epoch, token = slots.pop(0)
        if seq.is_finished:
            # scheduled before we knew it had stopped
            if sample:
                seq.num_placeholders = seq.num_placeholders - 1
            continue
        kv_valid = epoch == seq.num_preemptions
        if kv_valid:
            seq.num_done_tokens = start + n
        if not sample:
            self._hash_done_blocks(seq)
            continue
        seq.num_placeholders = seq.num_placeholders - 1
        seq.append_token(token)
        if kv_valid:
            self._hash_done_blocks(seq)
        reached_max = seq.num_completion_tokens == seq.max_tokens
        if reached_max or (token == self.eos and not seq.ignore_eos):
            lookahead_pending = seq.num_placeholders != 0
            self.wasted_slots += 1 if lookahead_pending else 0
            self.wasted_blocks += 1 if lookahead_pending and seq.new_block_last_step else 0
            seq.status = SequenceStatus.FINISHED
            self.block_manager.deallocate(seq)
            home = self.running if seq in self.running else self.waiting
            home.remove(seq)
            finished_now += [seq]
    return finished_now
# %% wasted_work
def wasted_work(trace, requests, eos, block_size):
    class Req:
        def __init__(self, limit, ignore):
            self.limit, self.ignore, self.made, self.dead, self.dying = limit, ignore, 0, False, False

    reqs = {name: Req(*spec) for name, spec in requests.items()}
    slots_lost = blocks_lost = 0
    for step in trace:
        for name, start, n, token in step:
            r = reqs[name]
            if r.dead:
                slots_lost += 1
                blocks_lost += n == 1 and start % block_size == 0
            elif token is not None:
                r.made += 1
                if r.made == r.limit or (token == eos and not r.ignore):
                    r.dying = True
        for r in reqs.values():
            if r.dying:
                r.dead, r.dying = True, False
    return slots_lost, int(blocks_lost)
# %% overlap_speedup
def overlap_speedup(cpu_s, gpu_s):
    if cpu_s >= gpu_s:
        return 1.0 + gpu_s / cpu_s
    return 1.0 + cpu_s / gpu_s
