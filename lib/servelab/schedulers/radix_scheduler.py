"""A token-slot KV pool and a scheduler that serves requests through SGLang's RadixCache, written to be read.

The request lifecycle follows SGLang 0.5.23 (`checkpoint`, `release_kv_cache`; 0.5.6's `cache_*_req`): admission
matches and locks the prompt's cached prefix and allocates slots for the rest; after the prefill the prompt is
inserted so later requests hit it; a decode takes one slot per request, evicting, then retracting the most recently
admitted; finish or preemption inserts what has KV and unlocks. The waiting queue is ``"fcfs"`` or ``"lpm"``
(longest prefix match first), with no skipping ahead. `new_token_ratio` turns on SGLang's reservation for future
decode tokens. docs/upstream/sglang_radix.md maps each rule to SGLang and lists the simplifications.

`servelab.engine.radix` drives it (`RadixEngine`), tabulates its steps and builds the LPM starvation workload.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from itertools import count
from typing import Self

from servelab.schedulers.config import EngineConfig
from servelab.schedulers.radix_cache import RadixCache, TreeNode
from servelab.schedulers.scheduler import SequenceStatus

__all__ = ["CLIP_MAX_NEW_TOKENS", "MIN_NEW_TOKEN_RATIO_FACTOR", "NEW_TOKEN_RATIO_DECAY_STEPS", "POLICIES",
           "RETRACT_DECODE_STEPS", "RadixScheduler", "Req", "TokenToKVPoolAllocator", "decode_reservation",
           "ratio_after_retract"]

POLICIES = ("fcfs", "lpm")

# SGLang 0.5.23's defaults for the reservation (sglang/srt/environ.py: SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION,
# SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS, SGLANG_RETRACT_DECODE_STEPS)
CLIP_MAX_NEW_TOKENS = 4096           # a request's future tokens are counted up to this many
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14    # the ratio's floor, as a fraction of its starting value
NEW_TOKEN_RATIO_DECAY_STEPS = 600    # decode steps without retraction from the start value to the floor
RETRACT_DECODE_STEPS = 20            # after a retraction: room for this many more tokens per running request


def decode_reservation(tokens_left: Iterable[int], ratio: float, clip: int = CLIP_MAX_NEW_TOKENS) -> float:
    """Slots admission holds back for running requests that still decode: the sum of min(left, clip) x ratio,
    `left` being each request's max_new_tokens minus what it generated (SGLang's
    `PrefillAdder._get_running_request_total_token_offset`).

    >>> decode_reservation([100, 5000], 0.5)          # the second is counted as 4096
    2098.0
    """
    return sum(min(left, clip) for left in tokens_left) * ratio


def ratio_after_retract(generated: Iterable[int], max_new_tokens: Iterable[int]) -> float:
    """new_token_ratio after a decode step that retracted requests, from the requests still running (SGLang's
    `ScheduleBatch.retract_decode`): min(1, (tokens generated + 20 per request) / (sum of max_new_tokens + 1)).

    >>> round(ratio_after_retract([100, 100], [1000, 1000]), 4)     # (200 + 40) / 2001
    0.1199
    """
    generated, max_new_tokens = list(generated), list(max_new_tokens)
    return min(1.0, (sum(generated) + RETRACT_DECODE_STEPS * len(generated)) / (sum(max_new_tokens) + 1))


class TokenToKVPoolAllocator:
    """A pool of `size` KV slots, one token each (SGLang's token_to_kv_pool_allocator).

    `alloc(n)` takes the first n free slots, or returns None (and takes nothing) when fewer are free; `free`
    puts slots at the back of the free queue. Freeing a slot that is already free, or out of range, raises
    ValueError: that is always a book-keeping bug (a slot would be handed out twice).
    `kv` stands in for the KV tensors: `kv[slot]` is the token whose K and V the slot holds (None if never
    written). The engine writes it when a step computes a token and reads it back to check every request.

    >>> pool = TokenToKVPoolAllocator(4)
    >>> pool.alloc(3), pool.alloc(2), pool.available_size()
    ([0, 1, 2], None, 1)
    >>> pool.free([1]); pool.alloc(2)
    [3, 1]
    """

    def __init__(self, size: int):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be an int >= 1, got {size!r}")
        self.size = size
        self.free_slots: deque[int] = deque(range(size))
        self._free_set = set(range(size))
        self.kv: list[int | None] = [None] * size

    def available_size(self) -> int:
        return len(self.free_slots)

    def alloc(self, need_size: int) -> list[int] | None:
        if isinstance(need_size, bool) or not isinstance(need_size, int) or need_size < 0:
            raise ValueError(f"need_size must be an int >= 0, got {need_size!r}")
        if need_size > len(self.free_slots):
            return None
        out = [self.free_slots.popleft() for _ in range(need_size)]
        self._free_set.difference_update(out)
        return out

    def free(self, indices: Iterable[int]) -> None:
        indices = [int(i) for i in indices]
        for i in indices:
            if not 0 <= i < self.size:
                raise ValueError(f"slot {i} is not in this pool (size {self.size})")
        twice = [i for i in indices if i in self._free_set] or [i for i in set(indices) if indices.count(i) > 1]
        if twice:
            raise ValueError(f"slot {twice[0]} is freed twice: it is already in the free list")
        self.free_slots.extend(indices)
        self._free_set.update(indices)


class Req:
    """One request: its tokens, its KV slots and the tree node its cached prefix ends at.

    `kv_indices` is the request's row of SGLang's req_to_token table: one slot per token that has KV, in token
    order. Its first len(prefix_indices) slots belong to the tree (the request holds a lock on the path
    root -> last_node that keeps them there); the rest are the request's own until it is cached.
    `num_cached_tokens` / `num_scheduled_tokens` count the tokens with KV before this step and the tokens this
    step computes (the names of `servelab.schedulers.scheduler.Sequence`, so `servelab.engine.driver.fake_model` runs on
    it).

    >>> r = Req([5, 6, 7], max_new_tokens=2, name="A")
    >>> r.token_ids, len(r), r.status.name
    ([5, 6, 7], 3, 'WAITING')
    """

    counter = count()

    def __init__(self, origin_input_ids: Iterable[int], max_new_tokens: int, name=None, ignore_eos: bool = True):
        self.origin_input_ids = [int(t) for t in origin_input_ids]
        if not self.origin_input_ids:
            raise ValueError("a request needs at least one prompt token")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        self.rid = next(Req.counter)
        self.name = name if name is not None else str(self.rid)
        self.max_new_tokens = max_new_tokens
        self.ignore_eos = ignore_eos
        self.output_ids: list[int] = []
        self.status = SequenceStatus.WAITING
        self.prefix_indices: list[int] = []    # tree-owned slots of the cached prefix (locked through last_node)
        self.last_node: TreeNode | None = None
        self.kv_indices: list[int] = []        # req_to_token row: one slot per token with KV
        self.num_cached_tokens = 0
        self.num_scheduled_tokens = 0
        self.is_prefill = True
        self.admissions: list[tuple[int, int]] = []   # (tokens asked for, tokens that hit) per admission

    @property
    def token_ids(self) -> list[int]:
        """The prompt followed by everything generated so far (SGLang's fill_ids)."""
        return self.origin_input_ids + self.output_ids

    def __len__(self):
        return len(self.origin_input_ids) + len(self.output_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.origin_input_ids)

    @property
    def completion_token_ids(self) -> list[int]:
        return list(self.output_ids)

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED

    # what an engine's model runner reads (servelab.engine.llm): kv_indices is a block table of one-token pages
    @property
    def block_table(self) -> list[int]:
        return self.kv_indices

    @property
    def last_token(self) -> int:
        return self.token_ids[-1]

    @property
    def seq_id(self) -> int:
        return self.rid

    def __repr__(self):
        return (f"Req({self.name!r}, len={len(self)}, prefix={len(self.prefix_indices)}, "
                f"kv={len(self.kv_indices)}, status={self.status.name})")


class RadixScheduler:
    """Prefill first, through the radix cache; decode otherwise, evicting and then retracting under pressure.

    kv_capacity_tokens: KV slots in the pool (tokens). Every slot is free, in the tree, or a running request's own.
    max_num_batched_tokens: tokens computed by one prefill step (the first request of a step may exceed it).
    max_num_seqs: requests admitted and not finished, at most.
    page_size, eviction_policy: passed to the RadixCache; enable_prefix_caching=False disables the tree (SGLang's
    `--disable-radix-cache`).
    policy: "fcfs" or "lpm" (longest prefix match first).
    eos: the token that finishes a request that does not ignore eos.
    new_token_ratio: None (the default): admission counts available + evictable slots as room. A number in
    (0, 1] (SGLang's default is 0.7): SGLang's reservation for future decode tokens, starting at that ratio
    (see docs/upstream/sglang_radix.md); `self.new_token_ratio` is the current ratio. With it a request whose uncached
    tokens plus max_new_tokens reach the pool size is never admitted, and the engine stops with RuntimeError.
    The tree is built by the class attribute `cache_class` (RadixCache), so a subclass can serve requests
    through another implementation of the same interface.
    """

    cache_class = RadixCache

    def __init__(self, *, kv_capacity_tokens: int, max_num_batched_tokens: int, max_num_seqs: int = 8,
                 page_size: int = 1, policy: str = "fcfs", eviction_policy: str = "lru",
                 enable_prefix_caching: bool = True, eos: int = -1, new_token_ratio: float | None = None):
        if isinstance(max_num_batched_tokens, bool) or not isinstance(max_num_batched_tokens, int) \
                or max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens must be an int >= 1, got {max_num_batched_tokens!r}")
        if isinstance(max_num_seqs, bool) or not isinstance(max_num_seqs, int) \
                or max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be an int >= 1, got {max_num_seqs!r}")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {list(POLICIES)}, got {policy!r}")
        if new_token_ratio is not None and (isinstance(new_token_ratio, bool)
                                            or not isinstance(new_token_ratio, int | float)
                                            or not 0 < new_token_ratio <= 1):
            raise ValueError(f"new_token_ratio must be None or a number in (0, 1], got {new_token_ratio!r}")
        self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(kv_capacity_tokens)
        self.tree_cache = self.cache_class(page_size=page_size, disable=not enable_prefix_caching,
                                          eviction_policy=eviction_policy,
                                          token_to_kv_pool_allocator=self.token_to_kv_pool_allocator)
        self.kv_capacity_tokens = kv_capacity_tokens
        self.page_size = page_size
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.policy = policy
        self.eos = eos
        self.waiting: deque[Req] = deque()
        self.running: deque[Req] = deque()
        self.init_new_token_ratio = new_token_ratio           # None: no reservation
        self.new_token_ratio = new_token_ratio
        if new_token_ratio is not None:
            self.min_new_token_ratio = new_token_ratio * MIN_NEW_TOKEN_RATIO_FACTOR
            self.new_token_ratio_decay = (new_token_ratio - self.min_new_token_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS

    @classmethod
    def from_config(cls, config: EngineConfig, **extras) -> Self:
        """A scheduler on `config`'s knobs, its pool `config.kv_capacity_tokens` slots; `extras` are its other
        keywords (`page_size`, `policy`, `eos`, ...)."""
        return cls(kv_capacity_tokens=config.kv_capacity_tokens, max_num_batched_tokens=config.max_num_batched_tokens,
                   max_num_seqs=config.max_num_seqs, enable_prefix_caching=config.enable_prefix_caching, **extras)

    # ---- queue ---------------------------------------------------------------------------------------------

    def add(self, req: Req) -> None:
        most = len(req) + req.max_new_tokens - 1 - len(req.output_ids)
        if most > self.kv_capacity_tokens:
            raise ValueError(f"{req.name} can grow to {most} tokens with KV but the pool has only "
                             f"{self.kv_capacity_tokens} slots: it could never finish")
        if self.init_new_token_ratio is not None and self.is_finished():
            self.new_token_ratio = self.init_new_token_ratio      # SGLang resets the ratio when idle
        self.waiting.append(req)

    def is_finished(self) -> bool:
        return not self.waiting and not self.running

    def calc_priority(self) -> None:
        """LPM: match every waiting request (this refreshes their paths' access times and may split edges) and
        sort the queue by matched length, longest first; equal lengths keep their order. FCFS: nothing."""
        if self.policy != "lpm":
            return
        matched = {id(r): len(self.tree_cache.match_prefix(r.token_ids[:-1])[0]) for r in self.waiting}
        self.waiting = deque(sorted(self.waiting, key=lambda r: -matched[id(r)]))

    # ---- one step ------------------------------------------------------------------------------------------

    def schedule(self) -> tuple[list[Req], bool]:
        """Choose this step's batch: (requests, is_prefill)."""
        picked = self._schedule_prefill()
        if picked:
            return picked, True
        return self._schedule_decode(), False

    def _schedule_prefill(self) -> list[Req]:
        self.calc_priority()
        pool, tree = self.token_to_kv_pool_allocator, self.tree_cache
        picked: list[Req] = []
        num_batched = 0
        reserved = self.reserved_tokens()                     # 0 without the reservation
        while self.waiting and len(self.running) + len(picked) < self.max_num_seqs:
            req = self.waiting[0]
            tokens = req.token_ids
            prefix, node = tree.match_prefix(tokens[:-1])     # match on admission; never the last token
            extend = len(tokens) - len(prefix)
            if picked and extend > self.max_num_batched_tokens - num_batched:
                break                                         # only the first may exceed the token budget
            tree.inc_lock_ref(node)                           # its own prefix is not room for itself
            room = pool.available_size() + tree.evictable_size()
            if self.new_token_ratio is None:
                fits = extend <= room
            else:                                             # the prompt and its own future tokens, below
                left = max(req.max_new_tokens - len(req.output_ids), 0)   # what is not held back already
                fits = extend + min(left, CLIP_MAX_NEW_TOKENS) < room - reserved
            if not fits:
                tree.dec_lock_ref(node)
                break                                         # the head does not fit: nobody jumps it
            if self.new_token_ratio is not None:
                paged = -(-extend // self.page_size) * self.page_size
                reserved += paged + min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS)
            if pool.available_size() < extend:
                tree.evict(extend - pool.available_size())
            slots = pool.alloc(extend)
            req.prefix_indices, req.last_node = list(prefix), node
            req.kv_indices = list(prefix) + slots
            req.num_cached_tokens, req.num_scheduled_tokens = len(prefix), extend
            req.is_prefill = True
            req.status = SequenceStatus.RUNNING
            req.admissions.append((len(tokens), len(prefix)))
            num_batched += extend
            self.running.append(self.waiting.popleft())
            picked.append(req)
        return picked

    def _schedule_decode(self) -> list[Req]:
        pool, tree = self.token_to_kv_pool_allocator, self.tree_cache
        retracted = False
        while len(self.running) > pool.available_size():
            if tree.evictable_size() > 0:
                tree.evict(len(self.running) - pool.available_size())
            else:
                self.preempt(self.running.pop())              # the most recently admitted goes first
                retracted = True
        if not self.running:  # an explicit raise, not an assert: python -O must not turn this into a hang
            raise RuntimeError("nothing could be scheduled: the requests do not fit in the KV pool")
        if self.new_token_ratio is not None:
            if retracted:
                self.new_token_ratio = ratio_after_retract([len(r.output_ids) for r in self.running],
                                                           [r.max_new_tokens for r in self.running])
            else:
                self.new_token_ratio = max(self.new_token_ratio - self.new_token_ratio_decay,
                                           self.min_new_token_ratio)
        for req in self.running:
            req.kv_indices += pool.alloc(1)
            req.num_scheduled_tokens = 1
            req.is_prefill = False
        return list(self.running)

    def preempt(self, req: Req) -> None:
        """Retract a running request (already removed from running): cache what it computed, unlock its
        path, and put it at the front of the waiting queue to be prefilled again (recompute)."""
        self.cache_finished_req(req)
        req.status = SequenceStatus.WAITING
        req.is_prefill = True
        self.waiting.appendleft(req)

    def postprocess(self, reqs: list[Req], token_ids: list[int], is_prefill: bool) -> list[Req]:
        """Advance the counters, append the sampled tokens, cache finished requests (and, after a prefill,
        the prompts of the others). Returns the requests that finished this step."""
        finished = []
        for req, token_id in zip(reqs, token_ids, strict=True):
            req.num_cached_tokens += req.num_scheduled_tokens
            req.num_scheduled_tokens = 0
            req.output_ids.append(int(token_id))
            if (not req.ignore_eos and token_id == self.eos) or len(req.output_ids) == req.max_new_tokens:
                req.status = SequenceStatus.FINISHED
                self.running.remove(req)
                self.cache_finished_req(req)
                finished.append(req)
            elif is_prefill:
                self.cache_unfinished_req(req)
        return finished

    # ---- SGLang's request hooks ----------------------------------------------------------------------------

    def cache_finished_req(self, req: Req) -> None:
        """Hand a finished (or retracted) request's KV to the tree and release its lock.

        The tokens with KV are token_ids[:len(kv_indices)] (the last sampled token has none). Insert their
        page-aligned part; the tree keeps the slots it already had for the first `new_prefix_len` tokens, so
        the request's own copies of those beyond its locked prefix, kv_indices[len(prefix_indices):new_prefix_len],
        are duplicates and go back to the pool, and so does the unaligned tail. Then dec_lock_ref(last_node).

        Example: B's 22-token prompt went into the tree after its prefill (prefix_indices: those 22 tree slots),
        then B decoded 3 tokens: kv_indices has 25 slots. insert(...) returns 22, so nothing is a duplicate, the 3
        decode slots now belong to the tree, and the lock on the prompt's path is released. Had another request
        inserted the same 3 tokens meanwhile, insert would return 25 and B's 3 slots would be freed.
        """
        tree, pool = self.tree_cache, self.token_to_kv_pool_allocator
        kv = req.kv_indices
        tokens = req.token_ids[:len(kv)]
        aligned = len(kv) - len(kv) % self.page_size
        if tree.disable:
            pool.free(kv[len(req.prefix_indices):])
        else:
            new_prefix_len = tree.insert(tokens[:aligned], kv[:aligned])
            pool.free(kv[len(req.prefix_indices):new_prefix_len])
            pool.free(kv[aligned:])
        if req.last_node is not None:
            tree.dec_lock_ref(req.last_node)
        req.kv_indices, req.prefix_indices, req.last_node = [], [], None
        req.num_cached_tokens = req.num_scheduled_tokens = 0

    def cache_unfinished_req(self, req: Req) -> None:
        """After a prefill: put the request's prompt in the tree while it keeps running.

        Insert the page-aligned tokens with KV; free the request's duplicates of what the tree already held;
        match the same tokens again to get the tree's slots and the node their path ends at, write those
        slots into the request's row, and move the lock from the old last_node to the new one.
        """
        tree, pool = self.tree_cache, self.token_to_kv_pool_allocator
        if tree.disable:
            return
        kv = req.kv_indices
        n = req.num_cached_tokens
        aligned = n - n % self.page_size
        tokens = req.token_ids[:aligned]
        new_prefix_len = tree.insert(tokens, kv[:aligned])
        pool.free(kv[len(req.prefix_indices):new_prefix_len])
        new_indices, new_node = tree.match_prefix(tokens)
        req.kv_indices = list(new_indices) + kv[aligned:]
        tree.dec_lock_ref(req.last_node)
        tree.inc_lock_ref(new_node)
        req.prefix_indices, req.last_node = list(new_indices), new_node

    # ---- accounting ----------------------------------------------------------------------------------------

    def reserved_tokens(self) -> float:
        """Slots admission holds back for the running requests' future decode tokens: 0 without the reservation,
        else `decode_reservation` of their max_new_tokens minus what they generated, at the current ratio."""
        if self.new_token_ratio is None:
            return 0
        return decode_reservation([r.max_new_tokens - len(r.output_ids) for r in self.running], self.new_token_ratio)

    def private_slots(self) -> list[int]:
        """Slots held by running requests that the tree does not own."""
        return [i for r in self.running for i in r.kv_indices[len(r.prefix_indices):]]

    def check_invariants(self) -> None:
        """Every slot is in exactly one place (free, tree, a running request's own); raise RuntimeError if not."""
        pool, tree = self.token_to_kv_pool_allocator, self.tree_cache
        places = {"free": list(pool.free_slots), "tree": tree.all_values_flatten(), "requests": self.private_slots()}
        seen: dict[int, str] = {}
        for where, slots in places.items():
            for s in slots:
                if s in seen:
                    raise RuntimeError(f"slot {s} is both {seen[s]} and {where}")
                seen[s] = where
        if len(seen) != self.kv_capacity_tokens:
            lost = sorted(set(range(self.kv_capacity_tokens)) - set(seen))
            raise RuntimeError(f"{len(lost)} slots leaked (neither free, in the tree nor held): {lost[:10]}")
        for r in self.running:
            if r.last_node is not None and tree.path_device_indices(r.last_node) != r.prefix_indices:
                raise RuntimeError(f"{r.name}'s prefix slots are not the tree's slots for its path")
        if tree.evictable_size() + tree.protected_size() != tree.total_size():
            raise RuntimeError("evictable + protected != total tokens in the tree")
