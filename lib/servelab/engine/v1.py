"""Driving vLLM V1's scheduler with a fake model: `run` adds requests at their steps and calls schedule() and
update_from_output() until all finish, recording one `StepRecord` a step. The fake model's token is a function of
every token before it, so chunking, batching and recompute are invisible in what a request generates."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from servelab.schedulers.vllm_scheduler import Request, Scheduler, SchedulerOutput, hash_block_tokens

__all__ = ["StepRecord", "fake_model", "fake_next_token", "run"]


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


@dataclass
class StepRecord:
    output: SchedulerOutput
    finished: dict[str, str]     # request id -> "stop" | "length"
    waiting: list[str]           # after the step
    running: list[str]           # after the step


def run(scheduler: Scheduler, requests_by_step: dict[int, list[Request]],
        model: Callable[[Scheduler, SchedulerOutput], dict[str, list[int]]] = fake_model,
        max_steps: int = 100_000) -> list[StepRecord]:
    """Add requests_by_step[k] just before the k-th schedule() call (counting from 0) and step until all finish.

    An idle scheduler takes the next arrivals at once.
    """
    pending = {k: list(v) for k, v in requests_by_step.items()}
    trace: list[StepRecord] = []
    while pending or scheduler.has_unfinished_requests():
        now = len(trace)
        due = [k for k in pending if k <= now] or ([min(pending)] if not scheduler.has_unfinished_requests() else [])
        for k in sorted(due):
            for request in pending.pop(k):
                scheduler.add_request(request)
        if now >= max_steps:
            raise RuntimeError(f"not finished after {max_steps} steps")
        output = scheduler.schedule()
        if output.total_num_scheduled_tokens == 0 and not pending:
            raise RuntimeError(f"step {now}: nothing could be scheduled and nothing else will arrive")
        finished = scheduler.update_from_output(output, model(scheduler, output))
        trace.append(StepRecord(output, finished, [r.request_id for r in scheduler.waiting],
                                [r.request_id for r in scheduler.running]))
    return trace
