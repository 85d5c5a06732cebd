"""Asynchronous scheduling for the nano-vllm Scheduler: step n+1 is scheduled while step n runs.

In the synchronous loop the CPU waits for each step's tokens before it schedules the next step, so the GPU
idles while the CPU schedules and prepares:

    schedule(n) -> run(n) -> postprocess(n) -> schedule(n+1) -> run(n+1) ...

Here schedule(n+1) runs while step n is on the GPU, and postprocess(n) comes after it:

    schedule(n+1) [while step n runs] -> postprocess(n) -> run(n+1) -> schedule(n+2) [while n+1 runs] ...

The trick is the **placeholder**: a token that step n will sample and nobody has seen yet, which schedule(n+1)
decodes as if it were known and postprocess(n) fills in. What scheduling ahead cannot know costs a little (a slot,
and maybe a block, for a sequence that stopped on eos; a preempted sequence waits for its token in flight), and
counters move when a step is scheduled: docs/async_scheduling.md. With a model whose next token depends only on
the sequence's own tokens, every request generates exactly what it generates synchronously.

`servelab.engine.asynchronous` drives it with one step in flight (`run_async`) and tabulates the steps (`walk`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servelab.schedulers.scheduler import SamplingParams, Scheduler, Sequence, SequenceStatus, needs_new_block

__all__ = ["AsyncScheduler", "SamplingParams", "Sequence", "Step", "overlap_speedup", "wasted_work"]


@dataclass
class Step:
    """One scheduled step. For each sequence: the position of its first token computed here (`starts`), how
    many tokens it computes, whether the step samples a token for it, and its preemption count when scheduled
    (KV a step computes for a sequence preempted since then lands in blocks it no longer owns)."""

    index: int
    is_prefill: bool
    seqs: list[Sequence]
    starts: list[int]
    num_scheduled: list[int]
    samples: list[bool]
    epochs: list[int]
    tokens: list[int | None] = field(default_factory=list)   # the model's output, when the step has run

    @property
    def kind(self) -> str:
        return "P" if self.is_prefill else "D"

    @property
    def num_batched_tokens(self) -> int:
        return sum(self.num_scheduled)


class AsyncScheduler(Scheduler):
    """The Scheduler of servelab.schedulers.scheduler, scheduling one step ahead of the model's output.

    `schedule()` returns a `Step` (or None when every sequence waits for a token still in flight) and advances
    the counters at once; `postprocess(step)` takes that step's sampled tokens (in `step.tokens`), fills in the
    placeholders, hashes the blocks that became complete and finishes sequences. At most one step is in flight
    between two calls, as in vLLM V1's asynchronous scheduling.
    """

    def __init__(self, *, num_blocks: int, block_size: int, max_num_batched_tokens: int, max_num_seqs: int = 8,
                 eos: int = -1, enable_prefix_caching: bool = True):
        super().__init__(num_blocks=num_blocks, block_size=block_size, max_num_batched_tokens=max_num_batched_tokens,
                         max_num_seqs=max_num_seqs, eos=eos, enable_prefix_caching=enable_prefix_caching)
        self.wasted_slots = 0      # tokens computed for a sequence that had already stopped
        self.wasted_blocks = 0     # blocks taken for such a token
        self.num_steps = 0

    def add(self, seq: Sequence):
        super().add(seq)
        seq.num_placeholders = 0   # sampled by a scheduled step, id not seen yet: 0 or 1
        seq.num_done_tokens = 0    # KV computed by steps that have finished
        seq.num_hashed_blocks = 0
        seq.num_preemptions = 0
        seq.new_block_last_step = False  # the last step scheduled for it took a new block

    def schedule(self) -> Step | None:
        bm, bs = self.block_manager, self.block_size
        seqs, starts, counts, samples = [], [], [], []
        batched = 0
        # 1. prefill: FCFS from the head of waiting; only the first sequence may be chunked
        while self.waiting and len(seqs) < self.max_num_seqs:
            seq = self.waiting[0]
            remaining = self.max_num_batched_tokens - batched
            if remaining == 0 or seq.num_placeholders:
                break                   # a preempted sequence's token is still in flight: its prompt is not known
            if not seq.block_table:
                num_cached_blocks = bm.can_allocate(seq)
                if num_cached_blocks == -1:
                    break
                num_tokens = len(seq) - num_cached_blocks * bs
            else:
                num_tokens = len(seq) - seq.num_cached_tokens
            if remaining < num_tokens and seqs:
                break
            if not seq.block_table:
                bm.allocate(seq, num_cached_blocks)
                seq.num_done_tokens = seq.num_cached_tokens
                seq.num_hashed_blocks = num_cached_blocks
            seq.new_block_last_step = False
            n = min(num_tokens, remaining)
            done = seq.num_cached_tokens + n == len(seq)
            if done:
                seq.status = SequenceStatus.RUNNING
                self.running.append(self.waiting.popleft())
            seqs.append(seq), starts.append(seq.num_cached_tokens), counts.append(n), samples.append(done)
            batched += n
        if seqs:
            return self._commit(True, seqs, starts, counts, samples)

        # 2. decode: the token at position len + placeholders - 1 (a placeholder if one is in flight)
        kept = []
        while self.running and len(seqs) < self.max_num_seqs:
            seq = self.running.popleft()
            kept.append(seq)
            if seq.num_completion_tokens + seq.num_placeholders >= seq.max_tokens:
                continue                # its last token is in flight: known in advance, so no step is wasted
            length = len(seq) + seq.num_placeholders
            while bm.num_free_blocks < needs_new_block(length, bs):
                if self.running:
                    self.preempt(self.running.pop())
                else:
                    kept.pop()
                    self.preempt(seq)
                    break
            else:
                seq.new_block_last_step = needs_new_block(length, bs)
                if seq.new_block_last_step:
                    seq.block_table.append(bm._allocate_block())
                seq.is_prefill = False
                seqs.append(seq), starts.append(length - 1), counts.append(1), samples.append(True)
        self.running.extendleft(reversed(kept))
        if seqs:
            return self._commit(False, seqs, starts, counts, samples)
        if not any(s.num_placeholders for s in (*self.waiting, *self.running)):
            raise RuntimeError("nothing could be scheduled: the requests do not fit in the KV cache")
        return None                     # every sequence waits for a token that is still in flight

    def _commit(self, is_prefill, seqs, starts, counts, samples) -> Step:
        for seq, start, n, sample in zip(seqs, starts, counts, samples):
            seq.num_cached_tokens = start + n
            seq.num_placeholders += sample
        step = Step(self.num_steps, is_prefill, seqs, starts, counts, samples, [s.num_preemptions for s in seqs])
        self.num_steps += 1
        return step

    def preempt(self, seq: Sequence):
        """Recompute-style, as synchronously; a placeholder in flight stays and is filled in when it arrives."""
        super().preempt(seq)
        seq.num_done_tokens = seq.num_hashed_blocks = 0
        seq.num_preemptions += 1

    def _hash_done_blocks(self, seq: Sequence):
        """Register the blocks whose tokens are all known and whose KV is all computed (hash_blocks' chain)."""
        bm = self.block_manager
        if not bm.enable_prefix_caching:
            return
        end = min(seq.num_done_tokens, len(seq)) // self.block_size
        h = bm.blocks[seq.block_table[seq.num_hashed_blocks - 1]].hash if seq.num_hashed_blocks else -1
        for i in range(seq.num_hashed_blocks, end):
            block = bm.blocks[seq.block_table[i]]
            token_ids = seq.block(i)
            h = bm.compute_hash(token_ids, h)
            block.update(h, token_ids)
            bm.hash_to_block_id[h] = block.block_id
        seq.num_hashed_blocks = max(seq.num_hashed_blocks, end)

    def postprocess(self, step: Step) -> list[Sequence]:
        """Step `step`'s tokens have arrived: fill in the placeholders and stop the sequences that are done.
        Returns the sequences that finished."""
        if len(step.tokens) != len(step.seqs):
            raise ValueError(f"step {step.index} has {len(step.seqs)} sequences but {len(step.tokens)} tokens: "
                             f"run the model on it first")
        finished = []
        for seq, start, n, sample, epoch, token in zip(step.seqs, step.starts, step.num_scheduled, step.samples,
                                                        step.epochs, step.tokens):
            if seq.is_finished:         # stopped on the step before: this step's work for it was wasted
                seq.num_placeholders -= sample
                continue
            if epoch == seq.num_preemptions:
                seq.num_done_tokens = start + n
            if not sample:
                self._hash_done_blocks(seq)
                continue
            seq.num_placeholders -= 1
            seq.append_token(token)
            if epoch == seq.num_preemptions:
                self._hash_done_blocks(seq)
            if (not seq.ignore_eos and token == self.eos) or seq.num_completion_tokens == seq.max_tokens:
                if seq.num_placeholders:            # the next step, already scheduled, decodes for nothing
                    self.wasted_slots += 1
                    self.wasted_blocks += seq.new_block_last_step
                seq.status = SequenceStatus.FINISHED
                self.block_manager.deallocate(seq)
                (self.running if seq in self.running else self.waiting).remove(seq)
                finished.append(seq)
        return finished


def overlap_speedup(cpu_s: float, gpu_s: float) -> float:
    """Steps per second with scheduling overlapped over steps per second without: a synchronous step takes the
    CPU's scheduling and preparation and then the GPU's forward, cpu_s + gpu_s; overlapped, the longer of the
    two, max(cpu_s, gpu_s). 2x at most, when the two are equal; as the ratio r = cpu_s / gpu_s moves away from
    1 it falls to (1 + r) (r < 1) or (1 + 1/r) (r > 1).

    >>> overlap_speedup(1e-3, 4e-3), overlap_speedup(4e-3, 4e-3), overlap_speedup(8e-3, 2e-3)
    (1.25, 2.0, 1.25)
    """
    for name, value in (("cpu_s", cpu_s), ("gpu_s", gpu_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
    if cpu_s == gpu_s == 0:
        raise ValueError("a step takes some time: cpu_s and gpu_s cannot both be 0")
    return (cpu_s + gpu_s) / max(cpu_s, gpu_s)


def wasted_work(trace: list, requests: dict, eos: int, block_size: int) -> tuple[int, int]:
    """(wasted slots, wasted blocks) of an asynchronous run given as plain data (`trace_of`): a slot is wasted
    when its sequence had already stopped, at a step before, on an end-of-sequence token (unless it ignores eos,
    `requests[name] = [max_tokens, ignore_eos]`) or at its max_tokens-th token; a wasted decode at position p
    took a block for nothing when p opens one (p % block_size == 0). A stop at max_tokens is known ahead, so the
    scheduler never places one: only eos stops show waste in a real run.

    >>> trace = [[["A", 0, 3, 5], ["B", 0, 4, 9]], [["A", 3, 1, 2], ["B", 4, 1, 7]], [["A", 4, 1, 8]]]
    >>> wasted_work(trace, {"A": [5, False], "B": [5, False]}, eos=9, block_size=4)   # B stopped on 9 at step 0
    (1, 1)
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a whole number >= 1, got {block_size!r}")
    generated = dict.fromkeys(requests, 0)
    stopped: set = set()
    slots = blocks = 0
    for step in trace:
        done_here = []
        for name, start, n, token in step:
            if name in stopped:
                slots += 1
                blocks += n == 1 and start % block_size == 0   # a decode whose position opens a block
                continue
            if token is None:
                continue                     # a chunk that samples nothing
            generated[name] += 1
            max_tokens, ignore_eos = requests[name]
            if (token == eos and not ignore_eos) or generated[name] == max_tokens:
                done_here.append(name)
        stopped.update(done_here)            # a slot of the same step is not wasted: it was scheduled before
    return slots, blocks
