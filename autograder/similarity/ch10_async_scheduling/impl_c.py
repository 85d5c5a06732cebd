# %% postprocess
def _stopped(sched, seq, token):
    eos_stop = (not seq.ignore_eos) and token == sched.eos
    return eos_stop or seq.num_completion_tokens == seq.max_tokens


def _retire(sched, seq):
    # a decode for this sequence is already in the next step: count what it burns
    if seq.num_placeholders > 0:
        sched.wasted_slots += 1
        sched.wasted_blocks += 1 if seq.new_block_last_step else 0
    seq.status = SequenceStatus.FINISHED
    sched.block_manager.deallocate(seq)
    try:
        sched.running.remove(seq)
    except ValueError:
        sched.waiting.remove(seq)


def postprocess(self, step):
    if len(step.seqs) != len(step.tokens):
        raise ValueError("step not executed: tokens missing")
    result = []
    for k, seq in enumerate(step.seqs):
        if seq.is_finished:
            seq.num_placeholders -= int(bool(step.samples[k]))
            continue
        in_epoch = step.epochs[k] == seq.num_preemptions
        if in_epoch:
            seq.num_done_tokens = step.starts[k] + step.num_scheduled[k]
        if step.samples[k]:
            seq.num_placeholders -= 1
            seq.append_token(step.tokens[k])
            if in_epoch:
                self._hash_done_blocks(seq)
            if _stopped(self, seq, step.tokens[k]):
                _retire(self, seq)
                result.append(seq)
        else:
            self._hash_done_blocks(seq)
    return result
# %% wasted_work
def wasted_work(trace, requests, eos, block_size):
    # first pass: the step index at which each request stops
    tokens_out = {}
    stop_step = {}
    for idx, step in enumerate(trace):
        for name, _start, _n, tok in step:
            if name in stop_step or tok is None:
                continue
            tokens_out[name] = tokens_out.get(name, 0) + 1
            max_tokens, ignore_eos = requests[name]
            if tokens_out[name] == max_tokens or (tok == eos and not ignore_eos):
                stop_step[name] = idx
    # second pass: every slot after the stop is wasted
    late = [(start, n) for idx, step in enumerate(trace) for name, start, n, _tok in step
            if name in stop_step and idx > stop_step[name]]
    blocks = sum(1 for start, n in late if n == 1 and start % block_size == 0)
    return len(late), blocks
# %% overlap_speedup
def overlap_speedup(cpu_s, gpu_s):
    longer, shorter = sorted((cpu_s, gpu_s), reverse=True)
    return 1 + shorter / longer
