# %% needs_new_block
def needs_new_block(seq_len, block_size):
    return divmod(seq_len - 1, block_size)[1] == 0
# %% preempt
def preempt(self, seq):
    self.waiting.appendleft(seq)          # first in line for the next prefill
    self.block_manager.deallocate(seq)    # also resets num_cached_tokens
    seq.is_prefill = True
    seq.status = SequenceStatus.WAITING
# %% schedule
class _Prefill:
    """Build the prefill half of a step over the scheduler `sch`."""

    def __init__(self, sch):
        self.sch = sch
        self.seqs = []
        self.tokens = 0

    def room(self):
        return self.sch.max_num_batched_tokens - self.tokens

    def try_head(self):
        sch = self.sch
        seq = sch.waiting[0]
        if seq.block_table:
            want, cached = seq.num_tokens - seq.num_cached_tokens, None
        else:
            cached = sch.block_manager.can_allocate(seq)
            if cached == -1:
                return False
            want = seq.num_tokens - cached * sch.block_size
        if want > self.room() and self.seqs:
            return False
        if cached is not None:
            sch.block_manager.allocate(seq, cached)
        seq.num_scheduled_tokens = min(want, self.room())
        self.tokens += seq.num_scheduled_tokens
        if seq.num_scheduled_tokens + seq.num_cached_tokens == seq.num_tokens:
            seq.status = SequenceStatus.RUNNING
            sch.running.append(sch.waiting.popleft())
        self.seqs.append(seq)
        return True


def schedule(self):
    pf = _Prefill(self)
    while self.waiting and len(pf.seqs) < self.max_num_seqs and pf.room() != 0:
        if not pf.try_head():
            break
    if pf.seqs:
        return pf.seqs, True

    step = []
    while self.running:
        if len(step) >= self.max_num_seqs:
            break
        seq = self.running.popleft()
        fits = self.block_manager.can_append(seq)
        while not fits and self.running:
            self.preempt(self.running.pop())
            fits = self.block_manager.can_append(seq)
        if not fits:
            self.preempt(seq)
            continue
        seq.num_scheduled_tokens = 1
        seq.is_prefill = False
        self.block_manager.may_append(seq)
        step.append(seq)
    if not step:
        raise RuntimeError("cannot decode: KV cache exhausted")
    idx = len(step)
    while idx:
        idx -= 1
        self.running.appendleft(step[idx])
    return step, False
# %% postprocess
def postprocess(self, seqs, token_ids, is_prefill):
    bm = self.block_manager
    ended = []
    for seq, tok in zip(seqs, token_ids):
        bm.hash_blocks(seq)
        seq.num_cached_tokens += seq.num_scheduled_tokens
        seq.num_scheduled_tokens = 0
        sampled_prompt = is_prefill and seq.num_cached_tokens < seq.num_tokens
        if sampled_prompt:
            continue
        seq.append_token(tok)
        reasons = {"length": seq.num_completion_tokens == seq.max_tokens,
                   "eos": tok == self.eos and not seq.ignore_eos}
        if any(reasons.values()):
            ended.append(seq)
    for seq in ended:
        seq.status = SequenceStatus.FINISHED
        bm.deallocate(seq)
        self.running.remove(seq)
    return ended
# %% can_allocate
from itertools import takewhile as _takewhile


def can_allocate(self, seq):
    def lookups():
        h = -1
        for i in range(seq.num_blocks - 1):
            blk = seq.block(i)
            h = self.compute_hash(blk, h)
            yield blk, self.hash_to_block_id.get(h, -1)

    hits = list(_takewhile(lambda pair: pair[1] != -1 and self.blocks[pair[1]].token_ids == pair[0], lookups()))
    blocks_to_take = seq.num_blocks - len([b for _, b in hits if b in self.used_block_ids])
    return -1 if blocks_to_take > len(self.free_block_ids) else len(hits)
