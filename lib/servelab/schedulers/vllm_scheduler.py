"""vLLM V1's scheduler and KV-cache manager (release 0.33.0, one full-attention KV-cache group), written to be read.

Our own code, modelled on vLLM 0.33.0 (`vllm/v1/core/sched/scheduler.py`, `vllm/v1/core/kv_cache_manager.py`,
`vllm/v1/core/block_pool.py`). Every step is one mixed batch: running requests first, then waiting ones in queue
order, any request chunked to the budget left; blocks come step by step and are hashed when allocated, so two
admissions of one step can share them; block 0 is the null block. When a running request cannot get blocks, a
victim (the last of running, or the largest priority value) frees its blocks and starts over, and a step that
preempted admits nothing. Step by step it agreed with vLLM 0.33.0's own Scheduler on 3,400 seeded random
workloads. docs/upstream/vllm_v1_scheduler.md maps each rule to the upstream function and line, lists the
differences from nano-vllm, and what is left out.

    >>> sch = Scheduler(block_size=16, num_blocks=11, max_num_batched_tokens=256, max_num_seqs=4)
    >>> prompt = list(range(40))
    >>> sch.add_request(Request("A", prompt, max_tokens=2)); sch.add_request(Request("B", prompt, max_tokens=2))
    >>> out = sch.schedule()
    >>> out.num_scheduled_tokens, out.num_hit_tokens            # B hits the two blocks A is computing right now
    ({'A': 40, 'B': 8}, {'A': 0, 'B': 32})
"""

from __future__ import annotations

import hashlib
import heapq
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum, auto
from itertools import count
from typing import Self

from servelab.schedulers.config import EngineConfig

__all__ = ["POLICIES", "BlockPool", "KVCacheBlock", "KVCacheManager", "Request", "RequestQueue", "RequestStatus",
           "Scheduler", "SchedulerOutput", "hash_block_tokens"]

POLICIES = ("fcfs", "priority")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class RequestStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    PREEMPTED = auto()
    FINISHED_STOPPED = auto()
    FINISHED_LENGTH_CAPPED = auto()

    @property
    def is_finished(self) -> bool:
        return self in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)


FINISH_REASONS = {RequestStatus.FINISHED_STOPPED: "stop", RequestStatus.FINISHED_LENGTH_CAPPED: "length"}

_arrival_clock = count()


class Request:
    """One request: its tokens, how many of them have KV, its block table and its block hashes.

    >>> r = Request("A", [5, 6, 7], max_tokens=2)
    >>> r.num_tokens, r.num_computed_tokens, r.status.name, r.num_cached_tokens
    (3, 0, 'WAITING', -1)
    """

    def __init__(self, request_id: str, prompt_token_ids: list[int], max_tokens: int, ignore_eos: bool = False,
                 priority: int = 0, arrival_time: float | None = None):
        if len(prompt_token_ids) == 0:
            raise ValueError(f"request {request_id!r}: the prompt is empty")
        if max_tokens < 1:
            raise ValueError(f"request {request_id!r}: max_tokens must be >= 1, got {max_tokens}")
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.all_token_ids = list(prompt_token_ids)
        self.output_token_ids: list[int] = []
        self.max_tokens = max_tokens
        self.ignore_eos = ignore_eos
        self.priority = priority
        self.arrival_time = float(next(_arrival_clock)) if arrival_time is None else arrival_time
        self.status = RequestStatus.WAITING
        self.num_computed_tokens = 0
        self.num_cached_tokens = -1     # prefix-cache hit tokens found at its last admission
        self.num_preemptions = 0
        self.block_ids: list[int] = []  # the block table, kept by KVCacheManager
        self.block_hashes: list[str] = []

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    @property
    def finish_reason(self) -> str | None:
        """"stop" (eos) or "length" (max_tokens or max_model_len); None while unfinished."""
        return FINISH_REASONS.get(self.status)

    def append_output_token_id(self, token_id: int):
        self.output_token_ids.append(token_id)
        self.all_token_ids.append(token_id)

    def __repr__(self):
        return (f"Request({self.request_id!r}, tokens={self.num_tokens}, computed={self.num_computed_tokens}, "
                f"status={self.status.name}, blocks={self.block_ids})")


def hash_block_tokens(parent_block_hash: str | None, token_ids: Iterable[int]) -> str:
    """The hash of one full block: sha256 of repr((parent hash, token ids)), 16 hex digits.

    The parent is the previous block's hash (None for the first block), so one hash stands for the whole prefix
    up to the end of its block. Deterministic across processes. vLLM instead hashes with sha256 over
    (parent or NONE_HASH, tokens, extra keys); 64 bits are plenty for these workloads.
    """
    return hashlib.sha256(repr((parent_block_hash, tuple(token_ids))).encode()).hexdigest()[:16]


def update_block_hashes(request: Request, block_size: int):
    """Hash the request's full blocks that have no hash yet. vLLM does this when the request is made and after each
    appended token (`vllm/v1/core/kv_cache_utils.py`, `get_request_block_hasher`)."""
    start = len(request.block_hashes) * block_size
    while start + block_size <= request.num_tokens:
        parent = request.block_hashes[-1] if request.block_hashes else None
        request.block_hashes.append(hash_block_tokens(parent, request.all_token_ids[start:start + block_size]))
        start += block_size


@dataclass(eq=False)
class KVCacheBlock:
    block_id: int
    ref_cnt: int = 0
    block_hash: str | None = None
    is_null: bool = False


class BlockPool:
    """Every KV block, the free queue (eviction order, cached-but-free blocks included) and the hash -> block map."""

    def __init__(self, *, num_blocks: int, enable_prefix_caching: bool = True):
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        # An ordered dict of block ids is the free queue: front = next to hand out, O(1) removal from the middle.
        self.free_block_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached_block_hash_to_block: dict[str, dict[int, KVCacheBlock]] = {}
        self.null_block = self.blocks[self.free_block_queue.popitem(last=False)[0]]
        self.null_block.is_null = True   # a placeholder never handed out; its ref count is not kept

    def get_num_free_blocks(self) -> int:
        return len(self.free_block_queue)

    def get_cached_block(self, block_hash: str) -> KVCacheBlock | None:
        blocks = self.cached_block_hash_to_block.get(block_hash)
        return next(iter(blocks.values())) if blocks else None

    def cache_full_blocks(self, request: Request, num_cached_blocks: int, num_full_blocks: int):
        """Enter the request's blocks num_cached_blocks .. num_full_blocks - 1 into the cache under its hashes."""
        for i in range(num_cached_blocks, num_full_blocks):
            block = self.blocks[request.block_ids[i]]
            assert block.block_hash is None, f"block {block.block_id} is cached already"
            block.block_hash = request.block_hashes[i]
            self.cached_block_hash_to_block.setdefault(block.block_hash, {})[block.block_id] = block

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        assert num_blocks <= len(self.free_block_queue), "allocate_slots checks the free count first"
        new_blocks = []
        for _ in range(num_blocks):
            block = self.blocks[self.free_block_queue.popitem(last=False)[0]]
            self._evict(block)   # the only eviction: a cached free block loses its hash when it is reused
            assert block.ref_cnt == 0
            block.ref_cnt = 1
            new_blocks.append(block)
        return new_blocks

    def _evict(self, block: KVCacheBlock):
        if block.block_hash is None:
            return
        same_hash = self.cached_block_hash_to_block[block.block_hash]
        del same_hash[block.block_id]
        if not same_hash:
            del self.cached_block_hash_to_block[block.block_hash]
        block.block_hash = None

    def touch(self, blocks: Iterable[KVCacheBlock]):
        """A prefix hit takes a reference; a hit on a free block takes it out of the free queue."""
        for block in blocks:
            if block.ref_cnt == 0:
                del self.free_block_queue[block.block_id]
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]):
        """Drop one reference from each block, given in eviction order (first = evicted first)."""
        to_front, to_back = [], []
        for block in ordered_blocks:
            if block.is_null:
                continue
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                # a block nobody can hit is reused first; a cached one waits at the back, LRU
                (to_back if block.block_hash is not None and self.enable_prefix_caching else to_front).append(block)
        for block in reversed(to_front):
            self.free_block_queue[block.block_id] = None
            self.free_block_queue.move_to_end(block.block_id, last=False)
        for block in to_back:
            self.free_block_queue[block.block_id] = None


class KVCacheManager:
    """One full-attention KV-cache group: prefix lookup, per-step slot allocation and freeing."""

    def __init__(self, *, block_size: int, num_blocks: int, enable_prefix_caching: bool = True):
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.block_pool = BlockPool(num_blocks=num_blocks, enable_prefix_caching=enable_prefix_caching)
        self.num_cached_block: dict[str, int] = {}   # request id -> how many of its blocks are in the cache

    def get_computed_blocks(self, request: Request) -> tuple[list[KVCacheBlock], int]:
        """The cached blocks that start the request's tokens, and how many tokens they cover.

        At most (num_tokens - 1) // block_size blocks, so the last token is always computed and gives logits.
        """
        if not self.enable_prefix_caching:
            return [], 0
        max_num_blocks = (request.num_tokens - 1) // self.block_size
        blocks = []
        for block_hash in request.block_hashes[:max_num_blocks]:
            block = self.block_pool.get_cached_block(block_hash)
            if block is None:
                break   # the hashes are chained: once one block misses, every later one does
            blocks.append(block)
        return blocks, len(blocks) * self.block_size

    def get_num_blocks_to_allocate(self, request: Request, num_tokens: int,
                                   new_computed_blocks: list[KVCacheBlock]) -> int:
        """Free blocks it takes to give the request slots for num_tokens tokens (hits in the free queue count)."""
        num_new_blocks = max(cdiv(num_tokens, self.block_size) - len(new_computed_blocks) - len(request.block_ids), 0)
        return num_new_blocks + sum(block.ref_cnt == 0 for block in new_computed_blocks)

    def allocate_slots(self, request: Request, num_new_tokens: int, num_new_computed_tokens: int = 0,
                       new_computed_blocks: list[KVCacheBlock] | None = None,
                       full_sequence_must_fit: bool = False) -> list[KVCacheBlock] | None:
        """Slots for this step's num_new_tokens after the computed tokens and the new hits; None if they do not fit.

        Returns the newly allocated blocks. Blocks that this step fills are entered into the prefix cache now.
        """
        new_computed_blocks = new_computed_blocks or []
        num_computed_tokens = request.num_computed_tokens + num_new_computed_tokens
        free = self.block_pool.get_num_free_blocks()
        if full_sequence_must_fit and self.get_num_blocks_to_allocate(
                request, request.num_tokens, new_computed_blocks) > free:
            return None
        num_tokens_need_slot = num_computed_tokens + num_new_tokens
        if self.get_num_blocks_to_allocate(request, num_tokens_need_slot, new_computed_blocks) > free:
            return None
        if new_computed_blocks:   # only at admission; touch first so the new blocks below cannot evict the hits
            self.block_pool.touch(new_computed_blocks)
            request.block_ids.extend(block.block_id for block in new_computed_blocks)
            self.num_cached_block[request.request_id] = len(new_computed_blocks)
        num_new_blocks = cdiv(num_tokens_need_slot, self.block_size) - len(request.block_ids)
        new_blocks = self.block_pool.get_new_blocks(max(num_new_blocks, 0))
        request.block_ids.extend(block.block_id for block in new_blocks)
        if self.enable_prefix_caching:
            self.cache_blocks(request, min(num_tokens_need_slot, request.num_tokens))
        return new_blocks

    def cache_blocks(self, request: Request, num_tokens: int):
        num_cached_blocks = self.num_cached_block.get(request.request_id, 0)
        num_full_blocks = min(num_tokens, len(request.block_hashes) * self.block_size) // self.block_size
        if num_full_blocks > num_cached_blocks:
            self.block_pool.cache_full_blocks(request, num_cached_blocks, num_full_blocks)
            self.num_cached_block[request.request_id] = num_full_blocks

    def free(self, request: Request):
        """Free the request's blocks tail first, so a prefix outlives its continuations in the cache."""
        self.block_pool.free_blocks(self.block_pool.blocks[i] for i in reversed(request.block_ids))
        request.block_ids = []
        self.num_cached_block.pop(request.request_id, None)


class RequestQueue:
    """The waiting queue: a deque for "fcfs"; for "priority" a heap on (priority, arrival_time, request_id).

    Iterating gives the order in which requests would be popped.
    """

    def __init__(self, policy: str):
        self.policy = policy
        self._deque: deque[Request] = deque()
        self._heap: list[tuple[int, float, str, Request]] = []

    def add_request(self, request: Request):
        if self.policy == "priority":
            heapq.heappush(self._heap, (request.priority, request.arrival_time, request.request_id, request))
        else:
            self._deque.append(request)

    def prepend_request(self, request: Request):
        """A preempted request goes back to the front (FCFS); a heap has no front, so there it is an add."""
        if self.policy == "priority":
            self.add_request(request)
        else:
            self._deque.appendleft(request)

    def peek_request(self) -> Request:
        return self._heap[0][-1] if self.policy == "priority" else self._deque[0]

    def pop_request(self) -> Request:
        return heapq.heappop(self._heap)[-1] if self.policy == "priority" else self._deque.popleft()

    def __len__(self) -> int:
        return len(self._heap) + len(self._deque)

    def __iter__(self) -> Iterator[Request]:
        if self.policy == "priority":
            return iter([entry[-1] for entry in sorted(self._heap)])
        return iter(list(self._deque))

    def __repr__(self):
        return f"RequestQueue({self.policy!r}, {[r.request_id for r in self]})"


@dataclass
class SchedulerOutput:
    """What one schedule() call decided. Ids are request ids; dicts keep the scheduled order."""
    step: int
    scheduled_new_reqs: list[str]            # admitted for the first time
    scheduled_resumed_reqs: list[str]        # admitted again after a preemption
    scheduled_running_reqs: list[str]        # already running (decodes and prompt chunks alike)
    num_scheduled_tokens: dict[str, int]     # running first, then admissions
    total_num_scheduled_tokens: int
    preempted_req_ids: list[str]             # in the order they were preempted
    num_computed_tokens_before: dict[str, int]  # where each scheduled range starts (after the hit, for admissions)
    num_hit_tokens: dict[str, int]           # prefix-cache hit tokens of each admitted request
    block_ids: dict[str, list[int]] = field(default_factory=dict)   # block tables after this step's allocation
    num_free_blocks: int = 0                 # free queue length after scheduling (cached free blocks included)

    def samples(self, request_id: str, num_tokens: int) -> bool:
        """True if the request's scheduled range reaches its last token (num_tokens), so it samples a token."""
        return self.num_computed_tokens_before[request_id] + self.num_scheduled_tokens[request_id] == num_tokens


class Scheduler:
    """vLLM V1's scheduler for one full-attention KV-cache group; drive it with schedule() / update_from_output()."""

    def __init__(self, *, block_size: int, num_blocks: int, max_num_batched_tokens: int, max_num_seqs: int,
                 long_prefill_token_threshold: int = 0, enable_prefix_caching: bool = True, policy: str = "fcfs",
                 max_model_len: int | None = None, eos: int | None = None, reserve_full_prompt: bool = True):
        for name, value, least in [("block_size", block_size, 1), ("num_blocks", num_blocks, 2),
                                   ("max_num_batched_tokens", max_num_batched_tokens, 1),
                                   ("max_num_seqs", max_num_seqs, 1),
                                   ("long_prefill_token_threshold", long_prefill_token_threshold, 0)]:
            if value < least:
                raise ValueError(f"{name} must be >= {least}, got {value}"
                                 + (" (block 0 is the null block)" if name == "num_blocks" else ""))
        if policy not in POLICIES:
            raise ValueError(f"unknown scheduling policy {policy!r}; expected one of {POLICIES}")
        if max_model_len is not None and max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {max_model_len}")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.long_prefill_token_threshold = long_prefill_token_threshold
        self.enable_prefix_caching = enable_prefix_caching
        self.policy = policy
        self.max_model_len = max_model_len
        self.eos = eos
        self.reserve_full_prompt = reserve_full_prompt
        self.kv_cache_manager = KVCacheManager(block_size=block_size, num_blocks=num_blocks,
                                               enable_prefix_caching=enable_prefix_caching)
        self.requests: dict[str, Request] = {}   # unfinished requests by id
        self.waiting = RequestQueue(policy)
        self.running: list[Request] = []
        self.num_steps = 0

    @classmethod
    def from_config(cls, config: EngineConfig, **extras) -> Self:
        """A scheduler on `config`'s knobs (block 0 of its `num_blocks` is the null block); `extras` are its other
        keywords (`policy`, `long_prefill_token_threshold`, `max_model_len`, `eos`, ...)."""
        return cls(block_size=config.block_size, num_blocks=config.num_blocks,
                   max_num_batched_tokens=config.max_num_batched_tokens, max_num_seqs=config.max_num_seqs,
                   enable_prefix_caching=config.enable_prefix_caching, **extras)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting) or bool(self.running)

    def num_free_blocks(self) -> int:
        """Blocks in the free queue, cached ones included (they are evicted when handed out)."""
        return self.kv_cache_manager.block_pool.get_num_free_blocks()

    def add_request(self, request: Request):
        rid = request.request_id
        if rid in self.requests:
            raise ValueError(f"request id {rid!r} is already in the scheduler")
        if request.status != RequestStatus.WAITING or request.output_token_ids or request.num_computed_tokens:
            raise ValueError(f"request {rid!r} has been scheduled before; make a new Request")
        if self.max_model_len is not None and request.num_prompt_tokens >= self.max_model_len:
            raise ValueError(f"request {rid!r}: a prompt of {request.num_prompt_tokens} tokens leaves no room for "
                             f"an output within max_model_len={self.max_model_len}")
        final_len = request.num_prompt_tokens + request.max_tokens
        if self.max_model_len is not None:
            final_len = min(final_len, self.max_model_len)
        num_blocks = cdiv(final_len - 1, self.block_size)   # the last sampled token never needs KV
        if num_blocks > self.num_blocks - 1:
            raise ValueError(f"request {rid!r} can grow to {final_len - 1} tokens with KV ({num_blocks} blocks) "
                             f"but only {self.num_blocks - 1} blocks are usable: it could never finish")
        if self.enable_prefix_caching:
            update_block_hashes(request, self.block_size)
        self.requests[rid] = request
        self.waiting.add_request(request)

    def schedule(self) -> SchedulerOutput:
        kv = self.kv_cache_manager
        token_budget = self.max_num_batched_tokens
        # the threshold keeps one long prompt from starving the others; alone, there is nobody to starve
        threshold = self.long_prefill_token_threshold if len(self.running) + len(self.waiting) > 1 else 0
        new_ids: list[str] = []
        resumed_ids: list[str] = []
        running_ids: list[str] = []
        preempted_ids: list[str] = []
        num_scheduled_tokens: dict[str, int] = {}
        num_hit_tokens: dict[str, int] = {}

        # 1. running requests, in order
        req_index = 0
        while req_index < len(self.running) and token_budget > 0:
            request = self.running[req_index]
            num_new_tokens = request.num_tokens - request.num_computed_tokens
            if 0 < threshold < num_new_tokens:
                num_new_tokens = threshold
            num_new_tokens = min(num_new_tokens, token_budget)
            if num_new_tokens == 0:   # everything computed, its sample not delivered yet
                req_index += 1
                continue
            allocated = kv.allocate_slots(request, num_new_tokens) is not None
            while not allocated:
                victim = (max(self.running, key=lambda r: (r.priority, r.arrival_time))
                          if self.policy == "priority" else self.running[-1])
                victim_index = self.running.index(victim)
                del self.running[victim_index]
                if victim_index < req_index:
                    req_index -= 1
                if victim.request_id in num_scheduled_tokens:   # only under priority: give its tokens back
                    token_budget += num_scheduled_tokens.pop(victim.request_id)
                    running_ids.remove(victim.request_id)
                self._preempt_request(victim)
                preempted_ids.append(victim.request_id)
                if victim is request:
                    break
                allocated = kv.allocate_slots(request, num_new_tokens) is not None
            if not allocated:
                if self.policy == "priority":
                    continue   # it left running, so req_index already points at the next request
                break
            running_ids.append(request.request_id)
            num_scheduled_tokens[request.request_id] = num_new_tokens
            token_budget -= num_new_tokens
            req_index += 1

        # 2. waiting requests, only in a step that preempted nobody
        while not preempted_ids and token_budget > 0 and self.waiting:
            if len(self.running) >= self.max_num_seqs:
                break
            request = self.waiting.peek_request()
            hit_blocks, num_hit = kv.get_computed_blocks(request)   # num_computed_tokens is 0 here
            num_new_tokens = request.num_tokens - num_hit
            if 0 < threshold < num_new_tokens:
                num_new_tokens = threshold
            num_new_tokens = min(num_new_tokens, token_budget)
            if kv.allocate_slots(request, num_new_tokens, num_hit, hit_blocks,
                                 full_sequence_must_fit=self.reserve_full_prompt) is None:
                break   # head-of-line blocking: nobody behind it is tried
            self.waiting.pop_request()
            self.running.append(request)
            (resumed_ids if request.status == RequestStatus.PREEMPTED else new_ids).append(request.request_id)
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_hit
            request.num_cached_tokens = num_hit
            num_hit_tokens[request.request_id] = num_hit
            num_scheduled_tokens[request.request_id] = num_new_tokens
            token_budget -= num_new_tokens

        return self.output(new_ids, resumed_ids, running_ids, preempted_ids, num_scheduled_tokens, num_hit_tokens)

    def output(self, new_ids: list[str], resumed_ids: list[str], running_ids: list[str], preempted_ids: list[str],
               num_scheduled_tokens: dict[str, int], num_hit_tokens: dict[str, int]) -> SchedulerOutput:
        """The step's SchedulerOutput from what schedule() decided (ids in scheduled order); counts the step and
        advances every scheduled request's num_computed_tokens: schedule's last act."""
        if sum(num_scheduled_tokens.values()) > self.max_num_batched_tokens:
            raise RuntimeError(f"{sum(num_scheduled_tokens.values())} tokens scheduled, over the budget of "
                               f"{self.max_num_batched_tokens}")
        self.num_steps += 1
        output = SchedulerOutput(
            step=self.num_steps, scheduled_new_reqs=new_ids, scheduled_resumed_reqs=resumed_ids,
            scheduled_running_reqs=running_ids, num_scheduled_tokens=num_scheduled_tokens,
            total_num_scheduled_tokens=sum(num_scheduled_tokens.values()), preempted_req_ids=preempted_ids,
            num_computed_tokens_before={rid: self.requests[rid].num_computed_tokens for rid in num_scheduled_tokens},
            num_hit_tokens=num_hit_tokens,
            block_ids={rid: list(self.requests[rid].block_ids) for rid in num_scheduled_tokens},
            num_free_blocks=self.num_free_blocks())
        self._update_after_schedule(output)
        return output

    def _update_after_schedule(self, output: SchedulerOutput):
        # advancing now lets the next schedule() give a chunked prompt its next chunk before the model returns
        for rid, n in output.num_scheduled_tokens.items():
            self.requests[rid].num_computed_tokens += n

    def _preempt_request(self, request: Request):
        """Recompute-style preemption; the caller has taken the request out of running."""
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.prepend_request(request)

    def update_from_output(self, scheduler_output: SchedulerOutput,
                           sampled_token_ids: dict[str, list[int]]) -> dict[str, str]:
        """Append each request's sampled token and run the stop checks.

        sampled_token_ids: request id -> [token] for a request whose scheduled range reached its last token,
        [] (or absent) for one in the middle of its prompt. Returns {request id: "stop" | "length"} for the
        requests that finished, in scheduled order; they have freed their blocks and left running.
        """
        unknown = set(sampled_token_ids) - set(scheduler_output.num_scheduled_tokens)
        if unknown:
            raise ValueError(f"sampled tokens for requests not scheduled in this step: {sorted(unknown)}")
        finished: dict[str, str] = {}
        for rid in scheduler_output.num_scheduled_tokens:
            request = self.requests.get(rid)
            if request is None or request.status != RequestStatus.RUNNING:
                continue   # finished or preempted since
            tokens = sampled_token_ids.get(rid, [])
            expected = 1 if scheduler_output.samples(rid, request.num_tokens) else 0
            if len(tokens) != expected:
                raise ValueError(f"request {rid!r} must get {expected} sampled token(s) this step, got {tokens}")
            if not tokens:
                continue
            request.append_output_token_id(tokens[0])
            if self.enable_prefix_caching:
                update_block_hashes(request, self.block_size)
            if self._check_stop(request):
                finished[rid] = request.finish_reason
                self.kv_cache_manager.free(request)
                del self.requests[rid]
        if finished:
            self.running = [r for r in self.running if r.request_id not in finished]
        return finished

    def _check_stop(self, request: Request) -> bool:
        if not request.ignore_eos and self.eos is not None and request.output_token_ids[-1] == self.eos:
            request.status = RequestStatus.FINISHED_STOPPED
            return True
        if ((self.max_model_len is not None and request.num_tokens >= self.max_model_len)
                or request.num_output_tokens >= request.max_tokens):
            request.status = RequestStatus.FINISHED_LENGTH_CAPPED
            return True
        return False
