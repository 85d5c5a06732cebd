"""Driving the asynchronous scheduler with one step in flight: `AsyncEngine` adapts it to
`servelab.engine.driver.drive`; `run_async` schedules step n+1, takes step n's tokens, then runs n+1; `walk` shows
the same run as table rows; `trace_of` turns a run into plain data.

>>> from servelab.engine.driver import expected
>>> sch = AsyncScheduler(num_blocks=8, block_size=4, max_num_batched_tokens=16, max_num_seqs=4)
>>> a = Sequence([1, 2, 3], SamplingParams(max_tokens=3), name="A")
>>> sch.add(a)
>>> steps = run_async(sch)
>>> a.completion_token_ids == expected([1, 2, 3], 3), [s.kind for s in steps], sch.wasted_slots
(True, ['P', 'D', 'D'], 0)
"""

from __future__ import annotations

from collections.abc import Callable

from servelab.engine.driver import StepRecord, drive
from servelab.schedulers.async_scheduler import AsyncScheduler, SamplingParams, Sequence, Step  # noqa: F401 - examples
from servelab.schedulers.scheduler import SequenceStatus

__all__ = ["AsyncEngine", "fake_model", "run_async", "trace_of", "walk"]


def fake_model(step: Step) -> list[int | None]:
    """servelab.engine.driver's fake model, on a step: a hash of the sequence's tokens up to the last one this step
    computes (None where the step samples nothing). By the time step n+1 runs its placeholders are filled in."""
    return [(sum(seq.token_ids[:start + n]) * 31 + 7) % 1000 if sample else None
            for seq, start, n, sample in zip(step.seqs, step.starts, step.num_scheduled, step.samples)]


class AsyncEngine:
    """The asynchronous family as `servelab.engine.driver.drive` steps it with one step in flight (overlap=True):
    its records carry the scheduler's Step (`seqs`, `starts`, `num_scheduled`, `samples`, `epochs`, `tokens`), and
    `finished`, `waiting` and `running` once postprocess has taken the step's tokens. With `rows`, it also keeps
    one row a loop turn for `walk`."""

    stuck_when_idle = False

    def __init__(self, scheduler: AsyncScheduler, model: Callable[[Step], list] = fake_model, rows: bool = False):
        self.scheduler = scheduler
        self.model = model
        self.trace: list[StepRecord] = []
        self.rows: list[dict] | None = [] if rows else None

    def add(self, seq: Sequence):
        self.scheduler.add(seq)

    def is_finished(self) -> bool:
        return self.scheduler.is_finished()

    def schedule(self) -> StepRecord | None:
        sch = self.scheduler
        was_running = list(sch.running)
        ahead = sch.schedule() if not sch.is_finished() else None
        if self.rows is not None:      # what schedule(n+1) saw and scheduled; a placeholder input marked '?'
            self.rows.append({"scheduled": "-" if ahead is None else f"{ahead.index} {ahead.kind}: " + ", ".join(
                f"{s.name}@{st}{'?' if not ahead.is_prefill and st >= len(s) else ''}"
                for s, st in zip(ahead.seqs, ahead.starts)),
                "placeholders": ", ".join(f"{s.name}:{s.num_placeholders}" for s in (*sch.running, *sch.waiting)),
                "filled": "-", "finished": "-", "wasted": 0})
        return None if ahead is None else self.record(ahead, was_running)

    def record(self, step: Step, was_running=()) -> StepRecord:
        """The record of `step` (scheduled by this engine, or by hand)."""
        return StepRecord(step=step.index, is_prefill=step.is_prefill,
                          scheduled=[(s.name, n) for s, n in zip(step.seqs, step.num_scheduled)],
                          cached=[(s.name, start) for s, start in zip(step.seqs, step.starts)],
                          preempted=[s.name for s in was_running if s.status == SequenceStatus.WAITING],
                          extra={"seqs": step.seqs, "starts": step.starts, "num_scheduled": step.num_scheduled,
                                 "samples": step.samples, "epochs": step.epochs, "tokens": step.tokens},
                          batch=step)

    def forward(self, record: StepRecord) -> list:
        record.batch.tokens = record.extra["tokens"] = self.model(record.batch)
        return record.batch.tokens

    def postprocess(self, record: StepRecord, tokens) -> list[Sequence]:
        sch, step = self.scheduler, record.batch
        before = sch.wasted_slots
        gone = {id(s) for s in step.seqs if s.is_finished}     # stopped before: its token is dropped
        finished = sch.postprocess(step)
        record.finished = [s.name for s in finished]
        record.waiting = [s.name for s in sch.waiting]
        record.running = [s.name for s in sch.running]
        if self.rows is not None:      # what postprocess(n) filled in, who finished, the slots it found wasted
            self.rows[-1].update(filled=f"{step.index}: " + ", ".join(
                f"{s.name}={t}{' (dropped)' if id(s) in gone else ''}"
                for s, t, smp in zip(step.seqs, step.tokens, step.samples) if smp),
                finished=", ".join(s.name for s in finished) or "-", wasted=sch.wasted_slots - before)
        return finished


def run_async(scheduler: AsyncScheduler, model: Callable[[Step], list] = fake_model,
              max_steps: int = 100_000, in_flight: Step | None = None) -> list[StepRecord]:
    """Drive `scheduler` with one step in flight: schedule step n+1, then take step n's tokens, then run n+1.
    `in_flight` continues a run whose last step was scheduled by hand and not run yet (it runs first).
    Returns the records of the steps in the order they ran."""
    engine = AsyncEngine(scheduler, model)
    return drive(engine, max_steps=max_steps, overlap=True,
                 in_flight=None if in_flight is None else engine.record(in_flight))


def trace_of(steps: list[StepRecord] | list[Step]) -> list[list[list]]:
    """A run's steps (records, or the scheduler's Steps) as plain data: each step a list of slots [name, first
    position, tokens computed, token sampled or None] (what `wasted_work` reads)."""
    return [[[seq.name, start, n, token if sample else None]
             for seq, start, n, sample, token in zip(st.seqs, st.starts, st.num_scheduled, st.samples, st.tokens)]
            for st in steps]


def walk(scheduler: AsyncScheduler, model: Callable[[Step], list] = fake_model, max_steps: int = 100) -> list[dict]:
    """`run_async`, turn by turn, as rows for a table: what schedule(n+1) saw and scheduled (a slot whose input
    is a placeholder marked '?'), then what postprocess(n) filled in and who finished."""
    engine = AsyncEngine(scheduler, model, rows=True)
    drive(engine, max_steps=max_steps, overlap=True)
    return engine.rows
