"""nano-vllm's Sequence, BlockManager and Scheduler, written to be read.

The behaviour follows nano-vllm's engine (main with chunked prefill): prefill first, only the first
prefill of a step may be chunked, blocks for the whole sequence are taken at admission, decode needs
a new block exactly when the token it is about to write opens one, preemption drops all KV and puts
the sequence back at the front of the waiting queue (recompute), and postprocess discards the sample
taken in the middle of a chunk. Any block size >= 1 works, and prefix caching can be switched off
(`enable_prefix_caching=False`); those differences from nano-vllm, and the faster forms of its calls:
docs/upstream/nano_vllm.md.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from enum import Enum, auto
from itertools import count
from typing import Self

import xxhash

from servelab.schedulers.config import EngineConfig


class SequenceStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


Status = SequenceStatus  # a short alias


@dataclass(frozen=True)
class SamplingParams:
    """How a request samples, for every family and the engine (nano-vllm refuses temperature 0; servelab's
    engine samples greedily there, as vLLM and SGLang do; the fake-model drivers ignore temperature)."""
    temperature: float = 1.0     # 0: greedy
    max_tokens: int = 64
    ignore_eos: bool = False
    seed: int = 0                # the request's own generator in the engine, when temperature > 0

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 is greedy), got {self.temperature}")


class Sequence:
    """One request: its tokens, how many of them have KV in the cache, and its block table.

    >>> s = Sequence([1, 2, 3, 4, 5], SamplingParams(max_tokens=2), name="A", block_size=4)
    >>> len(s), s.num_blocks, s.block(1)
    (5, 2, [5])
    """

    block_size = 256  # nano-vllm's default; Scheduler.add() sets each sequence's own block size
    counter = count()

    def __init__(self, token_ids: list[int], sampling_params: SamplingParams | None = None, name=None,
                 block_size: int | None = None):
        if len(token_ids) == 0:
            raise ValueError("a sequence needs at least one prompt token")
        sp = sampling_params or SamplingParams()
        self.seq_id = next(Sequence.counter)
        self.name = name if name is not None else str(self.seq_id)
        self.status = SequenceStatus.WAITING
        self.token_ids = list(token_ids)
        self.num_prompt_tokens = len(token_ids)
        self.num_cached_tokens = 0      # leading tokens whose KV is in the cache
        self.num_scheduled_tokens = 0   # tokens computed by the step being scheduled
        self.is_prefill = True
        self.block_table: list[int] = []
        self.temperature = sp.temperature
        self.max_tokens = sp.max_tokens
        self.ignore_eos = sp.ignore_eos
        if block_size is not None:
            self.block_size = block_size

    def __len__(self):
        return len(self.token_ids)

    def __repr__(self):
        return (f"Sequence({self.name!r}, len={len(self)}, cached={self.num_cached_tokens}, "
                f"status={self.status.name}, blocks={self.block_table})")

    @property
    def num_tokens(self):
        return len(self.token_ids)

    @property
    def last_token(self):
        return self.token_ids[-1]

    @property
    def is_finished(self):
        return self.status == SequenceStatus.FINISHED

    @property
    def num_completion_tokens(self):
        return self.num_tokens - self.num_prompt_tokens

    @property
    def prompt_token_ids(self):
        return self.token_ids[:self.num_prompt_tokens]

    @property
    def completion_token_ids(self):
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_blocks(self):
        return (self.num_tokens + self.block_size - 1) // self.block_size

    @property
    def last_block_num_tokens(self):
        return self.num_tokens - (self.num_blocks - 1) * self.block_size

    def block(self, i: int) -> list[int]:
        """Token ids of block i (the last block may be partial)."""
        if not 0 <= i < self.num_blocks:
            raise IndexError(f"block {i} out of range for a sequence of {self.num_blocks} blocks")
        return self.token_ids[i * self.block_size:(i + 1) * self.block_size]

    def append_token(self, token_id: int):
        self.token_ids.append(token_id)


class Block:
    """A physical KV block. `hash` and `token_ids` record the content it was last hashed with."""

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.hash = -1
        self.token_ids: list[int] = []

    def update(self, h: int, token_ids: list[int]):
        self.hash = h
        self.token_ids = list(token_ids)

    def reset(self):
        self.ref_count = 1
        self.hash = -1
        self.token_ids = []

    def __repr__(self):
        return f"Block({self.block_id}, ref={self.ref_count}, hash={'-' if self.hash == -1 else 'set'})"


def needs_new_block(seq_len: int, block_size: int) -> bool:
    """True when the token at position seq_len - 1 is the first of a block.

    In decode, the newest token (sampled last step, KV not yet written) sits at position len - 1;
    it needs a fresh block exactly when that position starts one.
    >>> [needs_new_block(n, 4) for n in (4, 5, 6, 8, 9)]
    [False, True, False, False, True]
    """
    return (seq_len - 1) % block_size == 0


class BlockManager:
    """Physical KV blocks: a free list, reference counts and (optionally) block-hash prefix caching.

    With prefix caching, every full block is hashed together with the hash of the block before it
    (a chain), so one hash stands for the whole prefix up to the end of that block. A freed block keeps
    its hash and content and stays hittable until the free list hands it out again (lazy eviction,
    oldest freed first).
    """

    def __init__(self, *, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.hash_to_block_id: dict[int, int] = {}
        self.free_block_ids: deque[int] = deque(range(num_blocks))
        self.used_block_ids: set[int] = set()
        self._block_format = f"<{block_size}q"   # a full block's tokens as int64 bytes (struct caches it)
        # (sequence, tokens, chained hashes of those tokens' blocks) from the last can_allocate: the allocate that
        # follows it, and the next can_allocate of a waiting head that did not fit, start from these hashes
        self._known: tuple[Sequence, list[int], list[int]] | None = None

    @staticmethod
    def compute_hash(token_ids: list[int], prefix: int = -1) -> int:
        """xxh64 of the previous block's hash (8 bytes, little endian; omitted for block 0) and the tokens
        (int64, little endian)."""
        data = struct.pack(f"<{len(token_ids)}q", *token_ids)
        return xxhash.xxh64_intdigest(data if prefix == -1 else prefix.to_bytes(8, "little") + data)

    def _hash_block(self, token_ids: list[int], prefix: int) -> int:
        """compute_hash for a full block (the only kind the cache holds), its struct format made once."""
        data = struct.pack(self._block_format, *token_ids)
        return xxhash.xxh64_intdigest(data if prefix == -1 else prefix.to_bytes(8, "little") + data)

    def _check(self, seq: Sequence):
        if seq.block_size != self.block_size:
            raise ValueError(f"sequence {seq.name} counts blocks of {seq.block_size} tokens but this block "
                             f"manager's blocks hold {self.block_size}: add it with Scheduler.add() or "
                             f"pass block_size={self.block_size} to Sequence")

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def _allocate_block(self) -> int:
        block_id = self.free_block_ids.popleft()
        block = self.blocks[block_id]
        assert block.ref_count == 0
        # the only eviction: a reused block takes its old hash out of the map
        if block.hash != -1 and self.hash_to_block_id.get(block.hash) == block_id:
            del self.hash_to_block_id[block.hash]
        block.ref_count, block.hash, block.token_ids = 1, -1, []   # block.reset(), inlined
        self.used_block_ids.add(block_id)
        return block_id

    def _deallocate_block(self, block_id: int):
        assert self.blocks[block_id].ref_count == 0
        self.used_block_ids.remove(block_id)
        self.free_block_ids.append(block_id)

    def can_allocate(self, seq: Sequence) -> int:
        """Number of leading blocks that hit the cache, or -1 if the free list cannot hold the rest.

        A block hits when its chained hash maps to a block holding the same tokens; the last block never
        does (it is computed, so the model has logits). Blocks that hit and are in use by another sequence
        cost nothing; hits on freed blocks still take an entry out of the free list.
        """
        self._check(seq)
        bs, tokens = self.block_size, seq.token_ids
        num_blocks = (len(tokens) + bs - 1) // bs   # seq.num_blocks
        if not self.enable_prefix_caching:
            return 0 if len(self.free_block_ids) >= num_blocks else -1
        hashes = self._known_hashes(seq)
        h, num_cached_blocks, num_new_blocks = -1, 0, num_blocks
        for i in range(num_blocks - 1):
            token_ids = tokens[i * bs:(i + 1) * bs]   # seq.block(i)
            if i < len(hashes):
                h = hashes[i]
            else:
                h = self._hash_block(token_ids, h)
                hashes.append(h)
            block_id = self.hash_to_block_id.get(h, -1)
            if block_id == -1 or self.blocks[block_id].token_ids != token_ids:
                break
            num_cached_blocks += 1
            num_new_blocks -= block_id in self.used_block_ids
        self._known = (seq, tokens[:len(hashes) * bs], hashes)
        return num_cached_blocks if len(self.free_block_ids) >= num_new_blocks else -1

    def _known_hashes(self, seq: Sequence) -> list[int]:
        """The chained hashes the last can_allocate computed, if it looked at this sequence and its leading
        tokens are still the ones hashed (tokens are only ever appended, but a caller may set them); else []."""
        if self._known is not None and self._known[0] is seq:
            _, hashed, hashes = self._known
            if seq.token_ids[:len(hashed)] == hashed:
                return hashes
        return []

    def _prefix_hashes(self, seq: Sequence, num_blocks: int) -> list[int]:
        """The chained hashes of the sequence's first num_blocks blocks (those can_allocate computed, the rest
        computed here)."""
        bs, tokens = self.block_size, seq.token_ids
        hashes = self._known_hashes(seq)[:num_blocks]
        h = hashes[-1] if hashes else -1
        for i in range(len(hashes), num_blocks):
            h = self._hash_block(tokens[i * bs:(i + 1) * bs], h)
            hashes.append(h)
        return hashes

    def allocate(self, seq: Sequence, num_cached_blocks: int):
        """Give the sequence blocks for all its tokens: the first num_cached_blocks from the cache (the count
        can_allocate() returned; their blocks are found again by their chained hashes)."""
        assert not seq.block_table, f"{seq.name} already has blocks"
        self._check(seq)
        if not self.enable_prefix_caching:
            num_cached_blocks = 0
        table, used = seq.block_table, self.used_block_ids
        for i, h in enumerate(self._prefix_hashes(seq, num_cached_blocks) if num_cached_blocks else ()):
            block_id = self.hash_to_block_id.get(h)
            if block_id is None:
                raise ValueError(f"{seq.name}: block {i} is not cached; call allocate() with what can_allocate() "
                                 f"returned")
            block = self.blocks[block_id]
            if block_id in used:
                block.ref_count += 1
            else:
                block.ref_count = 1
                self.free_block_ids.remove(block_id)   # out of the middle of the free list
                used.add(block_id)
            table.append(block_id)
        for _ in range(num_cached_blocks, (len(seq.token_ids) + self.block_size - 1) // self.block_size):
            table.append(self._allocate_block())
        seq.num_cached_tokens = num_cached_blocks * self.block_size

    def deallocate(self, seq: Sequence):
        """Drop the sequence's references, last block first, so prefix blocks are reused last."""
        blocks, free, used = self.blocks, self.free_block_ids, self.used_block_ids
        for block_id in reversed(seq.block_table):
            block = blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:   # _deallocate_block(block_id), inlined
                used.remove(block_id)
                free.append(block_id)
        seq.num_cached_tokens = 0
        seq.block_table.clear()

    # can_append and may_append run for every decoding sequence every step: they inline needs_new_block's rule
    # (len - 1) % block_size == 0 and len(seq) rather than call them

    def can_append(self, seq: Sequence) -> bool:
        return len(self.free_block_ids) >= ((len(seq.token_ids) - 1) % self.block_size == 0)

    def may_append(self, seq: Sequence):
        if (len(seq.token_ids) - 1) % self.block_size == 0:
            seq.block_table.append(self._allocate_block())

    def hash_blocks(self, seq: Sequence):
        """Register every block this step's tokens complete (called by postprocess before cached advances)."""
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        start = seq.num_cached_tokens // bs
        end = (seq.num_cached_tokens + seq.num_scheduled_tokens) // bs
        if start == end:
            return
        blocks, table, tokens = self.blocks, seq.block_table, seq.token_ids
        h = blocks[table[start - 1]].hash if start > 0 else -1
        for i in range(start, end):
            block = blocks[table[i]]
            token_ids = tokens[i * bs:(i + 1) * bs]   # seq.block(i)
            h = self._hash_block(token_ids, h)
            block.hash, block.token_ids = h, token_ids   # block.update(), without its copy: the slice is new
            self.hash_to_block_id[h] = block.block_id


class Scheduler:
    """Chooses each step's sequences: prefill first, else decode, preempting the tail under pressure."""

    def __init__(self, *, num_blocks: int, block_size: int, max_num_batched_tokens: int,
                 max_num_seqs: int = 8, eos: int = -1, enable_prefix_caching: bool = True):
        if max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens must be >= 1, got {max_num_batched_tokens}")
        if max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {max_num_seqs}")
        self.block_manager = BlockManager(num_blocks=num_blocks, block_size=block_size,
                                          enable_prefix_caching=enable_prefix_caching)
        self.block_size = block_size
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.eos = eos
        self.waiting: deque[Sequence] = deque()
        self.running: deque[Sequence] = deque()

    @classmethod
    def from_config(cls, config: EngineConfig, **extras) -> Self:
        """This scheduler (or a subclass) on `config`'s knobs; `extras` are its other keywords (`eos`, ...)."""
        return cls(num_blocks=config.num_blocks, block_size=config.block_size,
                   max_num_batched_tokens=config.max_num_batched_tokens, max_num_seqs=config.max_num_seqs,
                   enable_prefix_caching=config.enable_prefix_caching, **extras)

    def is_finished(self) -> bool:
        return not self.waiting and not self.running

    def add(self, seq: Sequence):
        num_blocks = -(-(len(seq) + seq.max_tokens - 1) // self.block_size)
        if num_blocks > len(self.block_manager.blocks):
            raise ValueError(f"{seq.name} can grow to {len(seq) + seq.max_tokens - 1} tokens "
                             f"({num_blocks} blocks) but the cache has only "
                             f"{len(self.block_manager.blocks)} blocks: it could never finish")
        seq.block_size = self.block_size
        self.waiting.append(seq)

    def schedule(self) -> tuple[list[Sequence], bool]:
        scheduled: list[Sequence] = []
        num_batched_tokens = 0
        bm, waiting, running = self.block_manager, self.waiting, self.running
        # 1. prefill: FCFS from the head of waiting; only the first sequence may be chunked
        while waiting and len(scheduled) < self.max_num_seqs:
            seq = waiting[0]
            remaining = self.max_num_batched_tokens - num_batched_tokens
            if remaining == 0:
                break
            seq_len = len(seq.token_ids)   # seq.num_tokens
            if not seq.block_table:
                num_cached_blocks = bm.can_allocate(seq)
                if num_cached_blocks == -1:
                    break
                num_tokens = seq_len - num_cached_blocks * self.block_size
            else:  # a chunk of it was computed last step
                num_tokens = seq_len - seq.num_cached_tokens
            if remaining < num_tokens and scheduled:
                break
            if not seq.block_table:
                bm.allocate(seq, num_cached_blocks)
            seq.num_scheduled_tokens = min(num_tokens, remaining)
            num_batched_tokens += seq.num_scheduled_tokens
            if seq.num_cached_tokens + seq.num_scheduled_tokens == seq_len:
                seq.status = SequenceStatus.RUNNING
                running.append(waiting.popleft())
            scheduled.append(seq)
        if scheduled:
            return scheduled, True

        # 2. decode: one token each; preempt the most recently admitted when a block is missing
        can_append, may_append, max_num_seqs = bm.can_append, bm.may_append, self.max_num_seqs
        while running and len(scheduled) < max_num_seqs:
            seq = running.popleft()
            while not can_append(seq):
                if running:
                    self.preempt(running.pop())
                else:
                    self.preempt(seq)
                    break
            else:
                seq.num_scheduled_tokens = 1
                seq.is_prefill = False
                may_append(seq)
                scheduled.append(seq)
        if not scheduled:  # an explicit raise, not an assert: python -O must not turn this into a hang
            raise RuntimeError("nothing could be scheduled: the requests do not fit in the KV cache")
        running.extendleft(reversed(scheduled))
        return scheduled, False

    def preempt(self, seq: Sequence):
        """Recompute-style preemption: drop all KV and resume first."""
        seq.status = SequenceStatus.WAITING
        seq.is_prefill = True
        self.block_manager.deallocate(seq)
        self.waiting.appendleft(seq)

    def postprocess(self, seqs: list[Sequence], token_ids: list[int], is_prefill: bool) -> list[Sequence]:
        """Advance the cache counters, append sampled tokens and free finished sequences.

        Returns the sequences that finished this step.
        """
        finished = []
        bm, bs, eos = self.block_manager, self.block_size, self.eos
        caching = bm.enable_prefix_caching
        for seq, token_id in zip(seqs, token_ids, strict=True):
            cached = seq.num_cached_tokens
            new_cached = cached + seq.num_scheduled_tokens
            # hash_blocks' own early exit, tested here: most decode steps complete no block
            if caching and new_cached // bs != cached // bs:
                bm.hash_blocks(seq)
            seq.num_cached_tokens = new_cached
            seq.num_scheduled_tokens = 0
            tokens = seq.token_ids
            if is_prefill and new_cached < len(tokens):
                continue  # mid-chunk: the logits are for a prompt position, not a new token
            tokens.append(token_id)   # seq.append_token(token_id)
            # len(tokens) - num_prompt_tokens is seq.num_completion_tokens
            if (token_id == eos and not seq.ignore_eos) or len(tokens) - seq.num_prompt_tokens == seq.max_tokens:
                seq.status = SequenceStatus.FINISHED
                bm.deallocate(seq)
                self.running.remove(seq)
                finished.append(seq)
        return finished
