"""Block-hash prefix caching (nano-vllm's BlockManager) against the radix cache, on the same workloads.

Three seeded workloads (`shared_system_prompt`, `multi_turn_chats`, `few_shot_prompts`); `run_block_hash` serves
one with nano-vllm's Scheduler, `run_radix` with the RadixScheduler, and `compare` with both on one `EngineConfig`
(the same cache size and token budget). Each reports a `CacheRun`: the prefill tokens asked for, those that came
from the cache ("skipped"), the hit rate. The workloads and how the two servers differ: docs/prefix_caching.md.

    >>> w = shared_system_prompt(n_requests=5, prompt_len=40, seed=0)
    >>> [(r.label, r.skipped, f"{r.hit_rate:.0%}") for r in compare(w, cache_tokens=512, block_sizes=(16,))]
    [('radix (page 1)', 160, '54%'), ('block hash (16)', 128, '43%')]
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from servelab.engine.driver import Engine, expected
from servelab.engine.radix import RadixEngine
from servelab.schedulers.config import EngineConfig
from servelab.schedulers.radix_scheduler import RadixScheduler, Req
from servelab.schedulers.scheduler import SamplingParams, Scheduler
from servelab.schedulers.scheduler import Sequence as NanoSequence

__all__ = ["CacheRun", "Request", "Workload", "compare", "few_shot_prompts", "min_cache_tokens",
           "multi_turn_chats", "run_block_hash", "run_radix", "shared_system_prompt", "sweep_cache_sizes"]


@dataclass(frozen=True)
class Request:
    """One request of a workload.

    arrival: the step it arrives at; with `after`, the number of steps after that request finished.
    """
    name: str
    prompt: tuple[int, ...]
    max_tokens: int
    arrival: int = 0
    after: str | None = None


@dataclass(frozen=True)
class Workload:
    name: str
    requests: tuple[Request, ...]

    @property
    def prompt_tokens(self) -> int:
        return sum(len(r.prompt) for r in self.requests)

    @property
    def longest(self) -> int:
        """The most tokens any request holds KV for (prompt + answer - 1)."""
        return max(len(r.prompt) + r.max_tokens - 1 for r in self.requests)

    def __len__(self):
        return len(self.requests)


def _tokens(rng: random.Random, n: int) -> list[int]:
    # ids 1000.. : never equal to what the fake model generates (0..999)
    return [rng.randrange(1000, 32000) for _ in range(n)]


def _span(rng: random.Random, n: int | tuple[int, int]) -> int:
    return n if isinstance(n, int) else rng.randint(*n)


def shared_system_prompt(n_requests: int = 100, prompt_len: int = 2000, question_len=(8, 24), max_tokens: int = 4,
                         seed: int = 0) -> Workload:
    """`n_requests` requests, one per step: the same `prompt_len`-token system prompt, then a question.

    No two questions start with the same token, so every request after the first can reuse exactly the
    system prompt: (n_requests - 1) * prompt_len tokens of prefill (99 * 2000 = 198,000 by default).
    """
    rng = random.Random(seed)
    system = _tokens(rng, prompt_len)
    firsts = rng.sample(range(1000, 32000), n_requests)
    reqs = []
    for i in range(n_requests):
        question = [firsts[i]] + _tokens(rng, _span(rng, question_len) - 1)
        reqs.append(Request(f"q{i}", tuple(system + question), max_tokens, arrival=i))
    return Workload(f"shared system prompt ({n_requests} x {prompt_len} tokens)", tuple(reqs))


def multi_turn_chats(n_chats: int = 6, turns: int = 4, system_len: int = 24, user_len=(8, 24),
                     answer_len=(8, 24), think: int = 3, seed: int = 0) -> Workload:
    """`n_chats` conversations of `turns` turns; conversation c starts at step 2c, and each later turn arrives
    `think` steps after the previous one finished. Turn t's prompt is the system prompt, every earlier question
    and answer, and the new question; the answers are the fake model's (servelab.engine.driver.expected)."""
    rng = random.Random(seed)
    system = _tokens(rng, system_len)
    reqs = []
    for c in range(n_chats):
        history = list(system)
        for t in range(turns):
            prompt = history + _tokens(rng, _span(rng, user_len))
            n_out = _span(rng, answer_len)
            name = f"c{c}t{t}"
            after = f"c{c}t{t - 1}" if t else None
            reqs.append(Request(name, tuple(prompt), n_out, arrival=think if t else 2 * c, after=after))
            history = prompt + expected(prompt, n_out)
    return Workload(f"multi-turn chats ({n_chats} x {turns} turns)", tuple(reqs))


def few_shot_prompts(n_requests: int = 40, instruction_len: int = 40, n_examples: int = 6,
                     example_len=(12, 40), shots: int = 3, question_len=(6, 16), max_tokens: int = 4,
                     seed: int = 0) -> Workload:
    """`n_requests` requests, one per step: an instruction, `shots` examples drawn from a pool of `n_examples`
    (kept in pool order), then a question."""
    rng = random.Random(seed)
    instruction = _tokens(rng, instruction_len)
    examples = [_tokens(rng, _span(rng, example_len)) for _ in range(n_examples)]
    reqs = []
    for i in range(n_requests):
        picked = sorted(rng.sample(range(n_examples), shots))
        prompt = instruction + [t for k in picked for t in examples[k]] + _tokens(rng, _span(rng, question_len))
        reqs.append(Request(f"f{i}", tuple(prompt), max_tokens, arrival=i))
    return Workload(f"few-shot prompts ({n_requests}, {shots} of {n_examples} examples)", tuple(reqs))


# --------------------------------------------------------------------------------------------------------
# serving a workload


@dataclass(frozen=True)
class CacheRun:
    """What one server did with one workload.

    requested: prefill tokens asked for, over every admission (a preempted request asks again);
    skipped: those that came from the prefix cache; computed = requested - skipped.
    """
    label: str
    cache_tokens: int
    requested: int
    skipped: int
    preemptions: int
    steps: int

    @property
    def computed(self) -> int:
        return self.requested - self.skipped

    @property
    def hit_rate(self) -> float:
        return self.skipped / self.requested if self.requested else 0.0


def _drive(workload: Workload, engine, make: Callable[[Request], object], max_steps: int = 200_000) -> dict:
    """Step `engine` through the workload; returns name -> the request object it served.

    A request arrives at step `arrival`, or `arrival` steps after its `after` finished; an idle engine takes
    the next arrival at once (as Engine.run does: steps count schedule() calls)."""
    by_name = {r.name: r for r in workload.requests}
    if len(by_name) != len(workload.requests):
        raise ValueError("request names must be unique")
    served: dict[str, object] = {}
    finished_at: dict[str, int] = {}
    pending = list(workload.requests)

    def due(r: Request) -> int | None:
        if r.after is None:
            return r.arrival
        if r.after not in by_name:
            raise ValueError(f"{r.name} follows {r.after!r}, which is not in the workload")
        return finished_at[r.after] + 1 + r.arrival if r.after in finished_at else None

    while pending or not engine.is_finished():
        step = len(engine.trace)
        ready = [r for r in pending if (d := due(r)) is not None and d <= step]
        if not ready and engine.is_finished():
            ready_at = [d for r in pending if (d := due(r)) is not None]
            if not ready_at:
                raise ValueError("some requests can never arrive (a cycle of `after`)")
            ready = [r for r in pending if due(r) == min(ready_at)]
        for r in ready:
            pending.remove(r)
            served[r.name] = make(r)
            engine.add_request(served[r.name])
        if step >= max_steps:
            raise RuntimeError(f"not finished after {max_steps} steps")
        record = engine.step()
        for name in record.finished:
            finished_at[name] = record.step
    for r in workload.requests:
        got = list(served[r.name].token_ids[len(r.prompt):])
        if got != expected(list(r.prompt), r.max_tokens):
            raise RuntimeError(f"{r.name} generated {got[:8]}... which is not what it generates alone")
    return served


def _stats(label: str, cache_tokens: int, trace, lengths_of: Callable) -> CacheRun:
    requested = skipped = 0
    for rec in trace:
        if not rec.is_prefill:
            continue
        cached = dict(rec.cached)
        for name, n in rec.scheduled:
            if lengths_of(rec, name) != cached[name] + n:
                raise RuntimeError(f"{label}: {name}'s prefill at step {rec.step} was chunked; raise the budget")
            requested += cached[name] + n
            skipped += cached[name]
    return CacheRun(label, cache_tokens, requested, skipped, sum(len(r.preempted) for r in trace), len(trace))


def min_cache_tokens(workload: Workload, block_size: int = 1) -> int:
    """The smallest cache (in tokens, whole blocks) in which every request of the workload can run alone."""
    blocks = -(-workload.longest // block_size)
    return blocks * block_size


def _budget(workload: Workload, budget: int | None) -> int:
    return budget if budget is not None else max(4096, workload.longest + 1)


def _config(workload: Workload, cache_tokens: int, max_num_seqs: int, max_num_batched_tokens: int | None,
            ) -> EngineConfig:
    """What every server of one comparison shares: a cache of `cache_tokens` (here in blocks of one token) and the
    step limits; the budget, unless given, is large enough that no prefill is chunked."""
    return EngineConfig(num_blocks=cache_tokens, block_size=1, max_num_seqs=max_num_seqs,
                        max_num_batched_tokens=_budget(workload, max_num_batched_tokens))


def _serve_block_hash(workload: Workload, config: EngineConfig, cache_tokens: int) -> CacheRun:
    engine = Engine(Scheduler.from_config(config))
    make = lambda r: NanoSequence(list(r.prompt), SamplingParams(max_tokens=r.max_tokens, ignore_eos=True),
                                  name=r.name)
    _drive(workload, engine, make)
    lengths = lambda rec, name: dict(rec.lengths)[name]
    return _stats(f"block hash ({config.block_size})", cache_tokens, engine.trace, lengths)


def _serve_radix(workload: Workload, config: EngineConfig, page_size: int, policy: str = "fcfs") -> CacheRun:
    engine = RadixEngine(RadixScheduler.from_config(config, page_size=page_size, policy=policy), check=False)
    _drive(workload, engine, lambda r: Req(list(r.prompt), r.max_tokens, name=r.name))
    lengths = lambda rec, name: dict(rec.cached)[name] + dict(rec.scheduled)[name]   # never chunked
    return _stats(f"radix (page {page_size})", config.kv_capacity_tokens, engine.trace, lengths)


def run_block_hash(workload: Workload, cache_tokens: int, block_size: int = 16, max_num_seqs: int = 8,
                   max_num_batched_tokens: int | None = None) -> CacheRun:
    """Serve the workload with nano-vllm's Scheduler, prefix caching on, cache_tokens // block_size blocks."""
    config = _config(workload, cache_tokens, max_num_seqs, max_num_batched_tokens)
    return _serve_block_hash(workload, config.regrouped(block_size), cache_tokens)


def run_radix(workload: Workload, cache_tokens: int, page_size: int = 1, max_num_seqs: int = 8,
              max_num_batched_tokens: int | None = None, policy: str = "fcfs") -> CacheRun:
    """Serve the workload with the RadixScheduler on a pool of cache_tokens slots."""
    return _serve_radix(workload, _config(workload, cache_tokens, max_num_seqs, max_num_batched_tokens), page_size,
                        policy)


def compare(workload: Workload, cache_tokens: int, block_sizes: Sequence[int] = (16, 256),
            page_sizes: Sequence[int] = (1,), concurrency: int = 8) -> list[CacheRun]:
    """The radix cache at each page size, then the block-hash cache at each block size, all on one configuration:
    the same cache size and budget, `concurrency` as max_num_seqs."""
    config = _config(workload, cache_tokens, concurrency, None)
    runs = [_serve_radix(workload, config, page_size=p) for p in page_sizes]
    runs += [_serve_block_hash(workload, config.regrouped(b), cache_tokens) for b in block_sizes]
    return runs


def sweep_cache_sizes(workload: Workload, sizes: Iterable[int], block_size: int = 16, page_size: int = 1,
                      concurrency: int = 8) -> dict[str, list[CacheRun]]:
    """Hit rate against cache size: label -> one CacheRun per size (sizes too small to run a request alone are
    skipped, for both caches)."""
    out: dict[str, list[CacheRun]] = {}
    floor = max(min_cache_tokens(workload, block_size), min_cache_tokens(workload, page_size))
    for size in sorted(set(sizes)):
        if size < floor:
            continue
        config = _config(workload, size, concurrency, None)
        for run in (_serve_radix(workload, config, page_size=page_size),
                    _serve_block_hash(workload, config.regrouped(block_size), size)):
            out.setdefault(run.label, []).append(run)
    return out
