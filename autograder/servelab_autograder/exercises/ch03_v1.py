"""Chapter 03's vLLM V1 exercise, ``v1_schedule``: a whole workload run through the learner's ``schedule`` on
``servelab.schedulers.vllm_scheduler.Scheduler`` (:func:`drive_v1_schedule`), the run read back as plain data and
shown step by step, and the chapter's V1 workloads (:data:`V1_CASES`)."""

from __future__ import annotations

from servelab.engine import v1 as v1_driver
from servelab.schedulers import vllm_scheduler
from servelab_autograder.exercises import common
from servelab_autograder.exercises.spec import Shape

_short = common.short_repr(12, 120)


def v1_workload(workload) -> dict[int, list[vllm_scheduler.Request]]:
    """The Requests of a V1 case, by the step they arrive at: each entry is [arrival step, request id, prompt
    token ids, max_tokens, priority] (arrival_time is the entry's place in the list, so ties cannot happen)."""
    out: dict[int, list[vllm_scheduler.Request]] = {}
    for k, (step, rid, prompt, max_tokens, priority) in enumerate(workload):
        out.setdefault(step, []).append(vllm_scheduler.Request(rid, list(prompt), max_tokens, ignore_eos=True,
                                                               priority=priority, arrival_time=float(k)))
    return out


def v1_trace(records) -> list[dict]:
    """A run's steps as plain data: scheduled (id, tokens) in order, admitted, resumed, preempted, finished ids,
    free blocks after scheduling."""
    return [{"scheduled": [[rid, n] for rid, n in r.output.num_scheduled_tokens.items()],
             "new": list(r.output.scheduled_new_reqs), "resumed": list(r.output.scheduled_resumed_reqs),
             "preempted": list(r.output.preempted_req_ids), "hits": dict(r.output.num_hit_tokens),
             "finished": sorted(r.finished), "free_blocks": r.output.num_free_blocks} for r in records]


def drive_v1_schedule(fn, config, workload) -> dict:
    """The V1 case's workload run to the end with ``fn`` as the ``schedule`` of a vllm_scheduler.Scheduler of
    ``config`` (the fake model samples one token whenever a request's scheduled range reaches its end); its steps,
    or where the run stopped."""
    scheduler = type("YourV1", (vllm_scheduler.Scheduler,), {"schedule": fn})(**config)
    limit = 20 * sum(len(prompt) + max_tokens for _, _, prompt, max_tokens, _ in workload) + 50
    try:
        return {"steps": v1_trace(v1_driver.run(scheduler, v1_workload(workload), max_steps=limit))}
    except NotImplementedError:
        raise
    except RuntimeError as e:   # stuck, or never finishing: what happened, as data
        return {"steps": [], "stopped": str(e)[:300]}


def norm_v1(raw, args) -> tuple:
    if not isinstance(raw, dict) or not isinstance(raw.get("steps"), list):
        raise Shape(f"expected the driver's answer, not {_short.repr(raw)}")
    if raw.get("stopped"):
        return ("stopped", raw["stopped"])
    steps = []
    for k, st in enumerate(raw["steps"]):
        if not isinstance(st, dict) or not isinstance(st.get("scheduled"), list):
            raise Shape(f"step {k} is {_short.repr(st)}")
        steps.append((tuple((str(r), common.as_int(n, f"step {k}'s tokens for {r}", "tokens", _short))
                            for r, n in st["scheduled"]),
                      tuple(st["new"]), tuple(st["resumed"]), tuple(st["preempted"]),
                      tuple(sorted((str(r), int(n)) for r, n in st["hits"].items())), tuple(st["finished"]),
                      common.as_int(st["free_blocks"], f"step {k}'s free blocks", "blocks", _short)))
    return ("steps", tuple(steps))


def step_text(st) -> str:
    scheduled, new, resumed, preempted, hits, finished, free = st
    text = common.some((f"{r}:{n}" for r, n in scheduled), " ") or "nothing"
    extra = [f"{label} {common.some(ids)}" for label, ids in (("admitted", new), ("resumed", resumed),
                                                        ("preempted", preempted)) if ids]
    extra += [f"hit {common.some(f'{r}:{n}' for r, n in hits if n)}"] if any(n for _, n in hits) else []
    return text + (f" ({'; '.join(extra)})" if extra else "") + f", {free} free blocks"


def show_v1(result) -> str:
    kind, body = result
    if kind == "stopped":
        return f"a run that stopped: {body}"
    return f"{len(body)} steps, starting: " + " | ".join(step_text(st) for st in body[:3])


def v1_note(args, got, want) -> str:
    if got[0] == "stopped" or want[0] == "stopped":
        return ""
    for k, (g, w) in enumerate(zip(got[1], want[1])):
        if g != w:
            return f" First difference, step {k}: yours {step_text(g)}; expected {step_text(w)}."
    return f" Yours took {len(got[1])} steps, the reference {len(want[1])}."


def tokens_from(first: int, n: int) -> list[int]:
    return list(range(first, first + n))


# The chapter's V1 cases, (config, workload): the visible test's and the first of the grader's fixed ones.
V1_CASES = {
    # three prompts of 6, 5 and 3 tokens, 4 new tokens each, 8 tokens a step: the walkthrough's A, B, C
    "abc": (dict(block_size=4, num_blocks=64, max_num_batched_tokens=8, max_num_seqs=8),
            [[0, "A", tokens_from(100, 6), 4, 0], [0, "B", tokens_from(200, 5), 4, 0],
             [0, "C", tokens_from(300, 3), 4, 0]]),
    # two identical 40-token prompts in one step: B hits the two full blocks A is computing in that very step
    "twins": (dict(block_size=16, num_blocks=16, max_num_batched_tokens=256, max_num_seqs=8),
              [[0, "A", tokens_from(100, 40), 2, 0], [0, "B", tokens_from(100, 40), 2, 0]]),
    # a lone request ignores the threshold: 53 tokens, then 23
    "lone": (dict(block_size=16, num_blocks=16, max_num_batched_tokens=53, max_num_seqs=8,
                  long_prefill_token_threshold=32), [[0, "A", tokens_from(100, 76), 2, 0]]),
    # two long prompts under a threshold of 16 share a 48-token budget; a short one arriving later gets in
    "threshold": (dict(block_size=4, num_blocks=64, max_num_batched_tokens=48, max_num_seqs=8,
                       long_prefill_token_threshold=16),
                  [[0, "A", tokens_from(100, 60), 2, 0], [0, "B", tokens_from(200, 40), 2, 0],
                   [1, "C", tokens_from(300, 6), 3, 0]]),
    # six usable blocks of 4 for three growing requests: the tail of running is preempted, nobody is admitted then
    "preempt": (dict(block_size=4, num_blocks=7, max_num_batched_tokens=64, max_num_seqs=8,
                     enable_prefix_caching=False),
                [[0, "A", tokens_from(100, 7), 8, 0], [0, "B", tokens_from(200, 7), 8, 0],
                 [1, "C", tokens_from(300, 4), 4, 0]]),
    # the same under "priority": the victim is the largest priority value (B is 2), wherever it runs
    "priority": (dict(block_size=4, num_blocks=7, max_num_batched_tokens=64, max_num_seqs=8, policy="priority",
                      enable_prefix_caching=False),
                 [[0, "A", tokens_from(100, 7), 8, 0], [0, "B", tokens_from(200, 7), 8, 2],
                  [1, "C", tokens_from(300, 4), 4, 1]]),
    # at most two running: the third waits although the budget has room
    "max_num_seqs": (dict(block_size=4, num_blocks=64, max_num_batched_tokens=64, max_num_seqs=2),
                     [[0, "A", tokens_from(100, 5), 3, 0], [0, "B", tokens_from(200, 5), 2, 0],
                      [0, "C", tokens_from(300, 5), 2, 0]]),
    # B's first chunk would fit, its whole prompt does not: it waits for A's blocks
    "gate": (dict(block_size=4, num_blocks=9, max_num_batched_tokens=8, max_num_seqs=8,
                  enable_prefix_caching=False),
             [[0, "A", tokens_from(100, 12), 6, 0], [1, "B", tokens_from(200, 28), 2, 0]]),
}


def v1_call(args) -> str:
    config, workload = args
    knobs = ", ".join(f"{k}={v}" for k, v in config.items())
    return f"V1 schedule over {len(workload)} requests ({knobs})"
