"""Driving vLLM V1's scheduler with a fake model: `V1Engine` adapts it to `servelab.engine.driver.drive`, and
`run` adds requests at their steps and steps until all finish, recording one `StepRecord` a step. The fake
model's token is a function of every token before it, so chunking, batching and recompute are invisible in
what a request generates."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from servelab.engine.driver import StepRecord, drive
from servelab.schedulers.vllm_scheduler import Request, Scheduler, SchedulerOutput, hash_block_tokens

__all__ = ["StepRecord", "V1Engine", "fake_model", "fake_next_token", "run"]


def fake_next_token(token_ids: Iterable[int], vocab: int = 1000) -> int:
    """The fake model's next token: a function of every token before it (deterministic across processes)."""
    return int(hash_block_tokens(None, token_ids), 16) % vocab


def fake_model(scheduler: Scheduler, output: SchedulerOutput, vocab: int = 1000) -> dict[str, list[int]]:
    """One token for each request whose scheduled range reaches its last token (then every token has KV), [] for
    one in the middle of its prompt. Chunking, batching and recompute are invisible in what it samples."""
    sampled = {}
    for rid in output.num_scheduled_tokens:
        request = scheduler.requests[rid]
        sampled[rid] = ([fake_next_token(request.all_token_ids, vocab)] if output.samples(rid, request.num_tokens)
                        else [])
    return sampled


class V1Engine:
    """The V1 family as `servelab.engine.driver.drive` steps it: add_request, schedule, the model,
    update_from_output. A step mixes prefills and decodes (its record's is_prefill is None); `finished` maps each
    request id to its reason, and `output` is the step's SchedulerOutput. V1 returns an empty step when nothing
    fits, so drive stops the run once nothing else will arrive."""

    stuck_when_idle = True

    def __init__(self, scheduler: Scheduler,
                 model: Callable[[Scheduler, SchedulerOutput], dict[str, list[int]]] = fake_model):
        self.scheduler = scheduler
        self.model = model
        self.trace: list[StepRecord] = []

    def add(self, request: Request):
        self.scheduler.add_request(request)

    def is_finished(self) -> bool:
        return not self.scheduler.has_unfinished_requests()

    def schedule(self) -> StepRecord:
        output = self.scheduler.schedule()
        return StepRecord(step=len(self.trace), is_prefill=None, scheduled=list(output.num_scheduled_tokens.items()),
                          cached=list(output.num_computed_tokens_before.items()),
                          preempted=list(output.preempted_req_ids), extra={"output": output}, batch=output)

    def forward(self, record: StepRecord) -> dict[str, list[int]]:
        return self.model(self.scheduler, record.batch)

    def postprocess(self, record: StepRecord, sampled: dict[str, list[int]]) -> dict[str, str]:
        sch = self.scheduler
        record.finished = sch.update_from_output(record.batch, sampled)
        record.waiting = [r.request_id for r in sch.waiting]
        record.running = [r.request_id for r in sch.running]
        return record.finished


def run(scheduler: Scheduler, requests_by_step: dict[int, list[Request]],
        model: Callable[[Scheduler, SchedulerOutput], dict[str, list[int]]] = fake_model,
        max_steps: int = 100_000) -> list[StepRecord]:
    """Add requests_by_step[k] just before the k-th schedule() call (counting from 0) and step until all finish.

    An idle scheduler takes the next arrivals at once.
    """
    return drive(V1Engine(scheduler, model), arrivals={k: list(v) for k, v in requests_by_step.items()},
                 max_steps=max_steps)
