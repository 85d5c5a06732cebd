"""vLLM V1's scheduler as a simulator policy: each step is one
`servelab.schedulers.vllm_scheduler.Scheduler.schedule()`.

`V1` holds no scheduling rules of its own. It feeds the simulator's arrivals to a `vllm_scheduler.Scheduler`,
returns what that scheduler schedules, and copies the scheduler's view back into the `ServingState` so that the
loop prices and advances the step correctly. What a step holds is therefore vLLM V1's: the running requests
first, in running order, then admissions from the waiting queue, all in one batch; any request may be chunked;
KV comes in blocks, allocated step by step; preemption is recompute, and a preempting step admits nobody.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from servelab.schedulers import vllm_scheduler as vs
from servelab.simulator.arrivals import _is_int
from servelab.simulator.policies import _check_limits
from servelab.simulator.state import ServingState

SAMPLED_TOKEN = 0   # the token id every request "samples": requests ignore eos, so only the count matters


def prompt_token_ids(i: int, prompt_len: int) -> list[int]:
    """The prompt V1 gives request i: `prompt_len` copies of i, so no two requests share a block (the simulator
    knows lengths, not contents) while a preempted request can still hit its own freed blocks on resume."""
    return [i] * prompt_len


class V1Run:
    """One simulation's inner `vllm_scheduler.Scheduler` and the bookkeeping that ties it to its `ServingState`.

    `requests[i]` is request i's `vllm_scheduler.Request` once it has arrived (kept after it finishes);
    `finished[i]` is the finish reason the inner scheduler gave it ("length": requests ignore eos).
    """

    def __init__(self, policy: V1, state: ServingState):
        bs = policy.block_size
        usable = state.kv_capacity // bs
        if usable < 1:
            raise ValueError(f"V1: a KV cache of {state.kv_capacity} tokens holds no block of {bs} tokens")
        kv_tokens = state.prompt_len + state.output_len - 1          # the last sampled token never needs KV
        blocks = -(-kv_tokens // bs)
        worst = int(np.argmax(blocks))
        if blocks[worst] > usable:
            raise ValueError(f"V1: request {worst} needs {kv_tokens[worst]} tokens of KV, {blocks[worst]} blocks of "
                             f"{bs}, but a KV cache of {state.kv_capacity} tokens holds {usable} blocks: it could "
                             f"never finish (use a smaller block_size or a larger cache)")
        self.state = state
        self.block_size = bs
        self.scheduler = vs.Scheduler(
            block_size=bs, num_blocks=usable + 1,             # block 0 is the null block
            max_num_batched_tokens=policy.max_num_batched_tokens, max_num_seqs=policy.max_num_seqs,
            long_prefill_token_threshold=policy.long_prefill_token_threshold,
            enable_prefix_caching=policy.enable_prefix_caching, policy=policy.policy, max_model_len=None, eos=None,
            reserve_full_prompt=policy.reserve_full_prompt)
        self.requests: dict[int, vs.Request] = {}
        self.finished: dict[int, str] = {}
        self._mirrored = 0                                       # leading entries of state.waiting that are ours
        self._last_ids = np.empty(0, dtype=np.int64)

    @property
    def num_preemptions(self) -> int:
        return sum(r.num_preemptions for r in self.requests.values())

    def _check_last_step(self, state: ServingState):
        """The loop must have advanced the last step's requests exactly as the inner scheduler did."""
        ids = self._last_ids
        if not ids.size:
            return
        reqs = [self.requests[i] for i in ids.tolist()]
        tokens = np.fromiter((r.num_tokens for r in reqs), dtype=np.int64, count=ids.size)
        computed = np.fromiter((r.num_computed_tokens for r in reqs), dtype=np.int64, count=ids.size)
        if not (np.array_equal(state.seq_len[ids], tokens) and np.array_equal(state.computed[ids], computed)):
            raise RuntimeError("V1: the simulator and servelab.schedulers.vllm_scheduler disagree about the last "
                               "step's requests (a V1 object must be driven by simulate(), one schedule() call a step)")

    def step(self, state: ServingState) -> tuple[np.ndarray, np.ndarray]:
        self._check_last_step(state)
        sch = self.scheduler

        # arrivals: the loop appended them after the queue we mirrored into state.waiting last step
        waiting = state.waiting
        for _ in range(self._mirrored):
            waiting.popleft()
        for i in waiting:
            i = int(i)
            request = vs.Request(i, prompt_token_ids(i, int(state.prompt_len[i])), int(state.output_len[i]),
                                 ignore_eos=True, arrival_time=float(i))
            sch.add_request(request)
            self.requests[i] = request

        out = sch.schedule()
        order = list(out.num_scheduled_tokens)
        ids = np.array(order, dtype=np.int64)
        tokens = np.fromiter(out.num_scheduled_tokens.values(), dtype=np.int64, count=ids.size)

        # the state as the step starts: computed tokens (prefix hits included), preemptions, first scheduling
        state.computed[ids] = np.fromiter((out.num_computed_tokens_before[i] for i in order), dtype=np.int64,
                                          count=ids.size)
        if out.preempted_req_ids:
            pre = np.array(out.preempted_req_ids, dtype=np.int64)
            np.add.at(state.preemptions, pre, 1)
            state.computed[pre] = 0
            state.reserved[pre] = 0
            state.preempted_this_step = True
        fresh = ids[np.isnan(state.first_scheduled_s[ids])]
        state.first_scheduled_s[fresh] = state.now

        # KV held while the step runs, in tokens: blocks * block_size, a shared block counted on its first holder
        running = sch.running
        run_ids = np.fromiter((r.request_id for r in running), dtype=np.int64, count=len(running))
        if sch.enable_prefix_caching:
            seen: set[int] = set()
            held = []
            for r in running:
                before = len(seen)
                seen.update(r.block_ids)
                held.append(len(seen) - before)
            blocks = np.array(held, dtype=np.int64)
        else:
            blocks = np.fromiter((len(r.block_ids) for r in running), dtype=np.int64, count=len(running))
        state.reserved[run_ids] = blocks * self.block_size
        state.kv_free = state.kv_capacity - int(state.reserved[run_ids].sum())
        assert state.kv_used == (sch.num_blocks - 1 - sch.num_free_blocks()) * self.block_size

        # the fake model samples as the step is scheduled: the loop emits a token for exactly these requests
        # (checked at the next call), and the inner scheduler is up to date even after the last step
        reqs = sch.requests
        sampled = {i: [SAMPLED_TOKEN] for i in order if out.samples(i, reqs[i].num_tokens)}
        self.finished.update(sch.update_from_output(out, sampled))

        # what the loop sees between steps: the inner running list and waiting queue, in their order
        state.running = np.fromiter((r.request_id for r in sch.running), dtype=np.int64, count=len(sch.running))
        waiting.clear()
        waiting.extend(r.request_id for r in sch.waiting)
        self._mirrored = len(waiting)
        self._last_ids = ids
        return ids, tokens


@dataclass(frozen=True)
class V1:
    """vLLM V1's scheduler (release 0.33.0), run by `servelab.schedulers.vllm_scheduler.Scheduler` inside the simulator.

    Each step is the inner scheduler's `schedule()`: running requests first, each getting
    min(tokens left, threshold, budget left); then, unless the step preempted, admissions from the waiting queue
    take what is left of `max_num_batched_tokens`, any of them chunked, until one does not fit (head-of-line) or
    `max_num_seqs` requests run. KV is in blocks of `block_size` tokens: the inner scheduler gets
    kv_capacity // block_size usable blocks (plus the null block 0), a request gets blocks for its computed tokens
    plus this step's, and with `reserve_full_prompt` an admission needs room for its whole current sequence.
    When a running request cannot get its blocks, the last of running (FCFS) is preempted and recomputed later.
    `long_prefill_token_threshold` (0: off) caps every request's tokens per step, except when only one request is
    running or waiting. `policy="priority"` gives every request priority 0, so the waiting queue is in arrival
    order and the victim is the latest arrival. With prefix caching, prompts share nothing (`prompt_token_ids`),
    so a hit is a preempted request finding its own freed blocks.

    In the `ServingState`, `reserved[i]` is the blocks request i holds times `block_size` (a shared block
    counted once), `computed` and `seq_len` follow the inner requests, and `waiting` and `running` are the inner
    queue and running list. The token each step samples (`SAMPLED_TOKEN`) goes to the inner scheduler's
    `update_from_output` within the same call, so its requests finish in the step the simulator's do, the last
    step included; the next call checks that the loop advanced exactly those. One object may serve any number
    of `simulate` calls, one at a time: a new `ServingState` starts a new inner scheduler; `last_run` is the
    latest (`V1Run`).

    >>> from servelab.analytic.costmodel import LLAMA2_7B, H100_SXM
    >>> from servelab.simulator import Requests, Traced, simulate
    >>> traced = Traced(V1(max_num_batched_tokens=8))
    >>> _ = simulate(Requests([0, 0, 0], [6, 5, 3], [4, 4, 4]), traced, LLAMA2_7B, H100_SXM)
    >>> traced.steps[:3]
    [[(0, 6), (1, 2)], [(0, 1), (1, 3), (2, 3)], [(0, 1), (1, 1), (2, 1)]]
    """

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    long_prefill_token_threshold: int = 0
    block_size: int = 16
    enable_prefix_caching: bool = False
    policy: str = "fcfs"
    reserve_full_prompt: bool = True
    name: str = field(default="V1", compare=False)
    _runs: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self):
        _check_limits("V1", self.max_num_batched_tokens, self.max_num_seqs)
        if not _is_int(self.long_prefill_token_threshold) or self.long_prefill_token_threshold < 0:
            raise ValueError(f"V1: long_prefill_token_threshold must be an integer >= 0 (0: off), "
                             f"got {self.long_prefill_token_threshold!r}")
        if not _is_int(self.block_size) or self.block_size < 1:
            raise ValueError(f"V1: block_size must be an integer >= 1 (tokens per KV block), got {self.block_size!r}")
        for name in ("enable_prefix_caching", "reserve_full_prompt"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"V1: {name} must be True or False, got {getattr(self, name)!r}")
        if self.policy not in vs.POLICIES:
            raise ValueError(f"V1: policy must be one of {vs.POLICIES}, got {self.policy!r}")

    @property
    def last_run(self) -> V1Run | None:
        """The inner scheduler of the latest simulation (None before the first)."""
        return self._runs.get("last")

    def schedule(self, state: ServingState) -> tuple[np.ndarray, np.ndarray]:
        run = self._runs.get("last")
        if run is None or run.state is not state:
            run = self._runs["last"] = V1Run(self, state)
        return run.step(state)

