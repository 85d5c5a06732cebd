"""One driver for every scheduler family: `drive` steps a `Family` against a fake model, adding requests at their
steps, and keeps one `StepRecord` a step. `Engine` is the nano-vllm family; servelab.engine.radix, .v1,
.asynchronous and .speculative hold the other families' thin adapters.

The fake model's next token depends only on the tokens whose KV exists after this step, so chunking,
batching and recompute-after-preemption are invisible in the output: every request must produce
exactly what it would produce alone (`expected`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from servelab.schedulers.scheduler import Scheduler, Sequence, SequenceStatus

__all__ = ["Engine", "Family", "StepRecord", "drive", "expected", "fake_model", "run_step"]


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
    """One step of any family: what schedule() chose, read right after it, and what postprocess left.

    `extra` holds what one family alone records, and reads as attributes too (`record.free_blocks`): the
    nano-vllm engine's `lengths` and `free_blocks` (after schedule()), the radix engine's pool and tree sizes
    (`available`, `evictable`, `protected`), V1's `output` (the SchedulerOutput), the asynchronous loop's
    `seqs`, `starts`, `num_scheduled`, `samples`, `epochs` and `tokens`, speculation's per-sequence `verified`.
    """
    step: int
    is_prefill: bool | None                 # None: a step that mixes prefills and decodes (vLLM V1)
    scheduled: list[tuple[str, int]]        # (name, tokens computed)
    cached: list[tuple[str, int]]           # (name, tokens with KV before the step)
    preempted: list[str]                    # by this schedule() call
    finished: list[str] | dict[str, str] = field(default_factory=list)  # V1: request id -> "stop" | "length"
    waiting: list[str] = field(default_factory=list)   # after postprocess
    running: list[str] = field(default_factory=list)   # after postprocess
    extra: dict[str, Any] = field(default_factory=dict)
    batch: Any = field(default=None, repr=False, compare=False)   # what the family's schedule() returned

    def __getattr__(self, name: str):
        extra = self.__dict__.get("extra")
        if extra is not None and name in extra:
            return extra[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def kind(self) -> str:
        return "M" if self.is_prefill is None else "P" if self.is_prefill else "D"

    @property
    def num_batched_tokens(self) -> int:
        return sum(n for _, n in self.scheduled)


@runtime_checkable
class Family(Protocol):
    """What `drive` needs of a scheduler family: the scheduler's add / schedule / postprocess / is_finished, and
    the model's run in between (`forward`), each adapted by a few lines where the family names them otherwise."""

    trace: list[StepRecord]   # the records so far; drive appends to it
    stuck_when_idle: bool     # schedule() may return an empty step instead of raising when nothing fits (V1)

    def add(self, request) -> None: ...

    def is_finished(self) -> bool: ...

    def schedule(self) -> StepRecord | None:
        """Schedule the next step; None when nothing runs (every request done, or waiting on a step in flight)."""

    def forward(self, record: StepRecord) -> Any:
        """Run the model on the step: its output, for postprocess."""

    def postprocess(self, record: StepRecord, output: Any) -> Any:
        """Hand the output to the scheduler and fill in the record's finished, waiting and running."""


def run_step(family: Family, more_coming: bool = True) -> StepRecord:
    """One synchronous step: schedule, run the model, postprocess; the record joins `family.trace`."""
    record = family.schedule()
    if family.stuck_when_idle and not more_coming and record.num_batched_tokens == 0:
        raise RuntimeError(f"step {record.step}: nothing could be scheduled and nothing else will arrive")
    family.postprocess(record, family.forward(record))
    family.trace.append(record)
    return record


def drive(family: Family, requests: Iterable = (), arrivals: dict[int, list] | None = None,
          max_steps: int = 100_000, *, overlap: bool = False, in_flight: StepRecord | None = None) -> list[StepRecord]:
    """Add `requests` now and each `arrivals[k]` just before step k, and step `family` until all are done.

    Steps count schedule() calls: an idle family takes the next arrivals at once. With `overlap`, step n+1 is
    scheduled before step n's output is postprocessed, and the model runs on n+1 after that (one step in
    flight, the asynchronous scheduler's loop); `in_flight` continues such a run from a step scheduled by hand.
    Returns `family.trace`."""
    pending = dict(arrivals or {})
    if any(k < 0 for k in pending):
        raise ValueError(f"arrival steps must be >= 0, got {sorted(pending)}")
    for req in requests:
        family.add(req)
    flight = None if in_flight is None else (in_flight, family.forward(in_flight))
    while pending or flight is not None or not family.is_finished():
        now = len(family.trace)
        due = [k for k in pending if k <= now] or ([min(pending)] if pending and family.is_finished() else [])
        for k in sorted(due):
            for req in pending.pop(k):
                family.add(req)
        if now >= max_steps:
            raise RuntimeError(f"not finished after {max_steps} steps")
        if not overlap:
            run_step(family, more_coming=bool(pending))
            continue
        ahead = family.schedule()
        if flight is not None:
            family.postprocess(*flight)
        flight = None if ahead is None else (ahead, family.forward(ahead))
        if ahead is not None:
            family.trace.append(ahead)
    return family.trace


class Engine:
    """The nano-vllm family: drives a Scheduler one step at a time; requests may be added between any two steps."""

    stuck_when_idle = False

    def __init__(self, scheduler: Scheduler, model: Callable[[list[Sequence]], list[int]] = fake_model):
        self.scheduler = scheduler
        self.model = model
        self.trace: list[StepRecord] = []

    def add(self, seq: Sequence):
        self.scheduler.add(seq)

    add_request = add

    def is_finished(self) -> bool:
        return self.scheduler.is_finished()

    def schedule(self) -> StepRecord:
        sch = self.scheduler
        was_running = list(sch.running)
        seqs, is_prefill = sch.schedule()
        return StepRecord(
            step=len(self.trace), is_prefill=is_prefill, scheduled=[(s.name, s.num_scheduled_tokens) for s in seqs],
            cached=[(s.name, s.num_cached_tokens) for s in seqs],
            preempted=[s.name for s in was_running if s.status == SequenceStatus.WAITING],
            extra={"lengths": [(s.name, len(s)) for s in seqs],          # when scheduled
                   "free_blocks": sch.block_manager.num_free_blocks},    # after schedule(), before postprocess
            batch=seqs)

    def forward(self, record: StepRecord) -> list[int]:
        return self.model(record.batch)

    def postprocess(self, record: StepRecord, output) -> list:
        """Returns the sequences that finished."""
        sch = self.scheduler
        finished = sch.postprocess(record.batch, output, record.is_prefill)
        record.finished = [s.name for s in finished]
        record.waiting = [s.name for s in sch.waiting]
        record.running = [s.name for s in sch.running]
        return finished

    def step(self) -> StepRecord:
        return run_step(self)

    def run(self, requests: Iterable[Sequence] = (), arrivals: dict[int, list[Sequence]] | None = None,
            max_steps: int = 100_000) -> list[StepRecord]:
        """Add `requests` now and each `arrivals[k]` just before step k; step until all are done.

        Steps count schedule() calls: an idle engine takes the next arrivals at once.
        """
        return drive(self, requests, arrivals, max_steps)
