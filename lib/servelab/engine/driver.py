"""A fake model and a driver loop: schedule, run the model, postprocess, record a trace.

The fake model's next token depends only on the tokens whose KV exists after this step, so chunking,
batching and recompute-after-preemption are invisible in the output: every request must produce
exactly what it would produce alone (`expected`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from servelab.schedulers.scheduler import Scheduler, Sequence, SequenceStatus


def fake_model(seqs: list[Sequence]) -> list[int]:
    """One 'sampled' token per sequence: a hash of every token computed so far."""
    return [(sum(s.token_ids[:s.num_cached_tokens + s.num_scheduled_tokens]) * 31 + 7) % 1000 for s in seqs]


def expected(prompt: list[int], n: int) -> list[int]:
    """The n tokens the fake model generates for `prompt` when it runs alone."""
    toks = list(prompt)
    for _ in range(n):
        toks.append((sum(toks) * 31 + 7) % 1000)
    return toks[len(prompt):]


@dataclass
class StepRecord:
    """One schedule() call and its outcome. Lengths are taken at scheduling time."""
    step: int
    is_prefill: bool
    scheduled: list[tuple[str, int]]        # (name, num_scheduled_tokens)
    lengths: list[tuple[str, int]]          # (name, len(seq)) when scheduled
    cached: list[tuple[str, int]]           # (name, num_cached_tokens) when scheduled
    preempted: list[str]
    finished: list[str]
    free_blocks: int                        # after schedule(), before postprocess (as in the shape table)
    waiting: list[str] = field(default_factory=list)   # after postprocess
    running: list[str] = field(default_factory=list)   # after postprocess

    @property
    def kind(self) -> str:
        return "P" if self.is_prefill else "D"

    @property
    def num_batched_tokens(self) -> int:
        return sum(n for _, n in self.scheduled)


class Engine:
    """Drives a Scheduler one step at a time; requests may be added between any two steps."""

    def __init__(self, scheduler: Scheduler, model: Callable[[list[Sequence]], list[int]] = fake_model):
        self.scheduler = scheduler
        self.model = model
        self.trace: list[StepRecord] = []

    def add_request(self, seq: Sequence):
        self.scheduler.add(seq)

    def is_finished(self) -> bool:
        return self.scheduler.is_finished()

    def step(self) -> StepRecord:
        sch = self.scheduler
        was_running = list(sch.running)
        seqs, is_prefill = sch.schedule()
        preempted = [s.name for s in was_running if s.status == SequenceStatus.WAITING]
        lengths = [(s.name, len(s)) for s in seqs]
        cached = [(s.name, s.num_cached_tokens) for s in seqs]
        scheduled = [(s.name, s.num_scheduled_tokens) for s in seqs]
        free_blocks = sch.block_manager.num_free_blocks
        finished = sch.postprocess(seqs, self.model(seqs), is_prefill)
        record = StepRecord(
            step=len(self.trace), is_prefill=is_prefill, scheduled=scheduled, lengths=lengths,
            cached=cached, preempted=preempted, finished=[s.name for s in finished],
            free_blocks=free_blocks,
            waiting=[s.name for s in sch.waiting], running=[s.name for s in sch.running])
        self.trace.append(record)
        return record

    def run(self, requests: Iterable[Sequence] = (), arrivals: dict[int, list[Sequence]] | None = None,
            max_steps: int = 100_000) -> list[StepRecord]:
        """Add `requests` now and each `arrivals[k]` just before step k; step until all are done.

        Steps count schedule() calls: an idle engine takes the next arrivals at once.
        """
        return drive(self, requests, arrivals, max_steps)


def drive(engine, requests: Iterable = (), arrivals: dict[int, list] | None = None, max_steps: int = 100_000):
    """The driver loop shared by every engine that has add_request(), is_finished(), step() and a trace."""
    pending = dict(arrivals or {})
    if any(k < 0 for k in pending):
        raise ValueError(f"arrival steps must be >= 0, got {sorted(pending)}")
    for req in requests:
        engine.add_request(req)
    while pending or not engine.is_finished():
        now = len(engine.trace)
        due = [k for k in pending if k <= now] or ([min(pending)] if engine.is_finished() else [])
        for k in sorted(due):
            for req in pending.pop(k):
                engine.add_request(req)
        if now >= max_steps:
            raise RuntimeError(f"not finished after {max_steps} steps")
        engine.step()
    return engine.trace
