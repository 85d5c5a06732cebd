"""The lesson's Step 2 code, verbatim: the oracle for servelab.schedulers.scheduler with prefix caching off.

Kept as the lesson wrote it (no servelab imports) so that tests can compare step by step.
"""
# ruff: noqa
from collections import deque
from enum import Enum, auto

class Status(Enum):
    WAITING = auto(); RUNNING = auto(); FINISHED = auto()

class Seq:
    block_size = 4
    def __init__(self, name, token_ids, max_tokens, ignore_eos=True):
        self.name, self.token_ids, self.max_tokens, self.ignore_eos = name, list(token_ids), max_tokens, ignore_eos
        self.num_prompt_tokens, self.num_cached_tokens, self.num_scheduled_tokens = len(token_ids), 0, 0
        self.block_table, self.status, self.is_prefill = [], Status.WAITING, True
    @property
    def num_tokens(self): return len(self.token_ids)
    def __len__(self): return len(self.token_ids)
    @property
    def num_blocks(self): return (len(self) + self.block_size - 1) // self.block_size
    @property
    def num_completion_tokens(self): return len(self) - self.num_prompt_tokens
    def append_token(self, t): self.token_ids.append(t)

class BlockManager:                                   # trimmed: no prefix caching
    def __init__(self, num_blocks, block_size):
        self.block_size, self.free_block_ids = block_size, deque(range(num_blocks))
    def can_allocate(self, seq): return 0 if len(self.free_block_ids) >= seq.num_blocks else -1
    def allocate(self, seq, num_cached_blocks):
        seq.block_table = [self.free_block_ids.popleft() for _ in range(seq.num_blocks)]
        seq.num_cached_tokens = 0
    def deallocate(self, seq):
        self.free_block_ids.extend(reversed(seq.block_table))
        seq.block_table, seq.num_cached_tokens = [], 0
    def can_append(self, seq): return len(self.free_block_ids) >= (len(seq) % self.block_size == 1)
    def may_append(self, seq):
        if len(seq) % self.block_size == 1:
            seq.block_table.append(self.free_block_ids.popleft())
    def hash_blocks(self, seq): pass

class Scheduler:
    def __init__(self, num_blocks, block_size, max_num_batched_tokens, max_num_seqs=8, eos=-1):
        self.block_manager = BlockManager(num_blocks, block_size)
        self.block_size, self.max_num_batched_tokens, self.max_num_seqs, self.eos = block_size, max_num_batched_tokens, max_num_seqs, eos
        self.waiting, self.running = deque(), deque()

    def is_finished(self): return not self.waiting and not self.running
    def add(self, seq): self.waiting.append(seq)

    def schedule(self):
        scheduled, num_batched = [], 0
        while self.waiting and len(scheduled) < self.max_num_seqs:          # prefill first
            seq = self.waiting[0]
            remaining = self.max_num_batched_tokens - num_batched
            if remaining == 0:
                break
            if not seq.block_table:
                num_cached_blocks = self.block_manager.can_allocate(seq)
                if num_cached_blocks == -1:
                    break
                num_tokens = seq.num_tokens - num_cached_blocks * self.block_size
            else:                                                           # only one chunk was computed last step
                num_tokens = seq.num_tokens - seq.num_cached_tokens
            if remaining < num_tokens and scheduled:                        # only the first one may be chunked
                break
            if not seq.block_table:
                self.block_manager.allocate(seq, num_cached_blocks)
            seq.num_scheduled_tokens = min(num_tokens, remaining)
            num_batched += seq.num_scheduled_tokens
            if seq.num_cached_tokens + seq.num_scheduled_tokens == seq.num_tokens:
                seq.status = Status.RUNNING
                self.running.append(self.waiting.popleft())
            scheduled.append(seq)
        if scheduled:
            return scheduled, True
        while self.running and len(scheduled) < self.max_num_seqs:          # decode
            seq = self.running.popleft()
            while not self.block_manager.can_append(seq):
                if self.running:
                    self.preempt(self.running.pop())                        # preempt the tail (latest admitted)
                else:
                    self.preempt(seq)                                       # nobody else left
                    break
            else:
                seq.num_scheduled_tokens, seq.is_prefill = 1, False
                self.block_manager.may_append(seq)
                scheduled.append(seq)
        assert scheduled
        self.running.extendleft(reversed(scheduled))
        return scheduled, False

    def preempt(self, seq):
        seq.status, seq.is_prefill = Status.WAITING, True
        self.block_manager.deallocate(seq)                                  # recompute: just drop the KV
        self.waiting.appendleft(seq)

    def postprocess(self, seqs, token_ids, is_prefill):
        for seq, tok in zip(seqs, token_ids):
            self.block_manager.hash_blocks(seq)
            seq.num_cached_tokens += seq.num_scheduled_tokens
            seq.num_scheduled_tokens = 0
            if is_prefill and seq.num_cached_tokens < seq.num_tokens:
                continue                                                    # mid-chunk: no sampling
            seq.append_token(tok)
            if (not seq.ignore_eos and tok == self.eos) or seq.num_completion_tokens == seq.max_tokens:
                seq.status = Status.FINISHED
                self.block_manager.deallocate(seq)
                self.running.remove(seq)

def fake_model(seqs):           # next token depends only on all computed tokens, so recompute is invisible
    return [(sum(s.token_ids[:s.num_cached_tokens + s.num_scheduled_tokens]) * 31 + 7) % 1000 for s in seqs]

def expected(prompt, n):
    toks = list(prompt)
    for _ in range(n):
        toks.append((sum(toks) * 31 + 7) % 1000)
    return toks[len(prompt):]
