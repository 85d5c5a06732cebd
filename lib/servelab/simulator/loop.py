"""The step loop: admit arrivals, let the policy build a step, price it with the cost model, emit tokens."""

from __future__ import annotations

import heapq
import math
import numbers
import random

import numpy as np

from servelab.analytic import costmodel
from servelab.analytic.costmodel import DEFAULT_STEP_OVERHEAD_S, GPUSpec, ModelSpec
from servelab.simulator import mixed_fast, prefill_fast
from servelab.simulator.admission import Admission, RetryAfter
from servelab.simulator.arrivals import Requests, _is_int
from servelab.simulator.clients import Clients, drop_expired
from servelab.simulator.metrics import SimResult
from servelab.simulator.policies import Policy
from servelab.simulator.preemption import Swap, resolve
from servelab.simulator.speculative import SpecRun, Speculation, budget_of
from servelab.simulator.state import ServingState
from servelab.simulator.v1 import V1


def simulate(requests: Requests, policy: Policy, model: ModelSpec, gpu: GPUSpec, *,
             kv_capacity_tokens: int | None = None,
             memory_fraction: float = costmodel.GPU_MEMORY_UTILIZATION,
             overhead_s: float = DEFAULT_STEP_OVERHEAD_S, admission: Admission | None = None,
             preemption: str | Swap = "recompute", async_scheduling: bool = False,
             speculation: Speculation | None = None, clients: Clients | None = None) -> SimResult:
    """Run `requests` through `policy` on one `gpu` serving `model` until every request has finished.

    The KV capacity is `kv_capacity_tokens` if given, else what fits next to the weights in
    `memory_fraction` of the GPU's memory. Each step lasts `costmodel`'s roofline time for its batch plus
    `overhead_s`; when nothing is waiting or running, the clock jumps to the next arrival. Arrivals are
    seen between steps: a request arriving while a step runs joins the queue when that step ends.
    `admission`, if given, is asked about each request as it joins (see `Admission`); a rejected request
    is never served.

    `preemption` is how a preempted sequence gets its KV back: "recompute" (the default: it is prefilled
    again), or "swap" / a `Swap(...)` (its KV goes to a host pool and comes back over the host link, each
    copy adding to the step it is made in; see `servelab.simulator.preemption`). `V1` preempts by recompute
    only, as vLLM V1 does.

    `async_scheduling=True` overlaps the CPU's part of a step (`overhead_s`: scheduling, preparing the inputs,
    launching) with the GPU's (the roofline time), as when step n+1 is scheduled while step n runs
    (servelab.schedulers.async_scheduler): a step lasts max(roofline, overhead_s) instead of their sum. The price of
    scheduling ahead: a request whose last token came out of step n stopped on an end-of-sequence token nobody
    could foresee, so it was already scheduled into step n+1; that step computes one decode more for each such
    request (priced, at the request's full context, and counted in `SimResult.wasted_slots`). If nothing else
    runs next, the wasted decodes are dropped with the step that would have held them.

    `speculation=Speculation(k, alpha, draft, seed)` makes every decode a verification of up to k draft tokens
    (in the token budget, with look-ahead KV, rejected ones rolled back; `servelab.simulator.speculative`);
    its counters are `SimResult.speculation`. Off by default, and not combined with `async_scheduling`.

    `clients=Clients(deadline_s, abandon, retry)` puts a client with a first-token deadline behind every request
    (`servelab.simulator.clients`): with `abandon=True` a request still waiting at its deadline leaves the queue;
    an admitted one whose first token comes too late is served-but-dead (`SimResult.dead`, `dead_tokens`); with
    `retry=Backoff(...)` a request the admission rule refuses arrives again after its backoff delay, or after the
    refusal's Retry-After when the rule is a `RetryAfter(...)`, `honour_retry_after=True` and that is later. Off by
    default (every request's client waits for ever and never retries).

    A plain `MixedBudget` with none of these options runs in `servelab.simulator.mixed_fast` instead: the same
    steps and the same result, bit for bit, in about a tenth of the CPU time (every running sequence is in every
    step, so a decoding one's token times are consecutive steps). A plain `PrefillFirst` likewise runs in
    `servelab.simulator.prefill_fast` (a decode step runs the same first max_num_seqs sequences until one finishes
    or is preempted). Any other policy, a subclass of either or a replaced `schedule` goes through the loop below.
    """
    if kv_capacity_tokens is None:
        kv_capacity_tokens = costmodel.kv_capacity_tokens(model, gpu, memory_fraction)
    if not _is_int(kv_capacity_tokens) or kv_capacity_tokens < 1:
        raise ValueError(f"kv_capacity_tokens must be an integer >= 1, got {kv_capacity_tokens!r}")
    if not isinstance(overhead_s, numbers.Real) or not overhead_s >= 0:
        raise ValueError(f"overhead_s must be a number >= 0 (seconds per step), got {overhead_s!r}")
    if not isinstance(async_scheduling, bool):
        raise ValueError(f"async_scheduling must be True or False, got {async_scheduling!r}")
    if admission is not None and not callable(admission):
        raise ValueError(f"admission must be a callable (state, request id) -> bool, got {admission!r}")
    swap = resolve(preemption)
    if clients is not None:
        if not isinstance(clients, Clients):
            raise ValueError(f"clients must be a Clients(deadline_s, ...) or None, got {clients!r}")
        if clients.abandon and (isinstance(policy, V1) or isinstance(getattr(policy, "policy", None), V1)):
            raise ValueError("V1 keeps its own waiting queue: use Clients(..., abandon=False) with it")
    if speculation is not None:
        if not isinstance(speculation, Speculation):
            raise ValueError(f"speculation must be a Speculation(k, alpha, ...) or None, got {speculation!r}")
        if async_scheduling:
            raise ValueError("speculation and async_scheduling together are not modelled: pick one")
        spec_run = SpecRun(speculation, budget_of(policy), gpu, overhead_s)
    if swap is not None and (isinstance(policy, V1) or isinstance(getattr(policy, "policy", None), V1)):  # Traced
        raise ValueError("V1 preempts by recompute only, as vLLM V1 does: use preemption='recompute' with it")
    n = len(requests)
    if n == 0:
        raise ValueError("no requests to simulate")
    worst = int(np.argmax(requests.max_kv_tokens))
    if requests.max_kv_tokens[worst] > kv_capacity_tokens:
        raise ValueError(f"request {worst} needs {requests.max_kv_tokens[worst]} tokens of KV (prompt "
                         f"{requests.prompt_len[worst]} + output {requests.output_len[worst]} - 1) but the KV "
                         f"cache holds {kv_capacity_tokens}: it could never finish")

    if mixed_fast.applies(policy, admission, swap, async_scheduling, speculation, clients):
        # the same steps without per-sequence work in each (servelab.simulator.mixed_fast)
        return mixed_fast.simulate_mixed(requests, policy, model, gpu, int(kv_capacity_tokens), overhead_s)
    if prefill_fast.applies(policy, admission, swap, async_scheduling, speculation, clients):
        # the same steps without per-sequence work in decode steps (servelab.simulator.prefill_fast)
        return prefill_fast.simulate_prefill_first(requests, policy, model, gpu, int(kv_capacity_tokens),
                                                   overhead_s)

    prompt, output, arrival = requests.prompt_len, requests.output_len, requests.arrival_s
    state = ServingState(prompt, output, int(kv_capacity_tokens), swap, model, arrival)
    token_offset = np.concatenate([[0], np.cumsum(output)[:-1]]).astype(np.int64)
    # token k of request i goes to token_offset[i] + k, and k = seq_len - prompt_len before the emission
    token_slot_base = token_offset - prompt
    token_step = np.full(int(output.sum()), -1, dtype=np.int32)
    final_len = prompt + output                         # seq_len once the last token is out
    finished = np.zeros(n, dtype=bool)
    rejected = np.zeros(n, dtype=bool)
    starts, ends, step_tokens, step_seqs, step_decodes, step_kv, step_swap = [], [], [], [], [], [], []
    seq_len, computed, reserved = state.seq_len, state.computed, state.reserved
    # clients (servelab.simulator.clients): each attempt's arrival, the retries still to come as a heap of
    # (time, request id), who left the queue; without clients none of it changes anything
    attempt_s = arrival.astype(np.float64)
    attempts = np.ones(n, dtype=np.int64)
    abandoned = np.zeros(n, dtype=bool)
    retries: list[tuple[float, int]] = []
    retried_at: list[float] = []                       # when each retry arrived, in order
    retry = clients.retry if clients is not None else None
    retry_rng = random.Random(retry.seed) if retry is not None else None
    # the refusal's Retry-After (servelab.simulator.admission.RetryAfter), for clients that honour it
    header = admission if retry is not None and clients.honour_retry_after and isinstance(admission, RetryAfter) \
        else None
    header_rng = header.rng() if header is not None else None
    deadline_s = clients.deadline_s if clients is not None else math.inf
    expires_s = attempt_s + deadline_s

    now, next_arrival, num_finished, step = 0.0, 0, 0, 0
    waste = np.empty(0, dtype=np.int64)   # async: contexts of the decodes scheduled for requests already done
    wasted_slots = 0
    while num_finished < n:
        if retries and retries[0][0] <= now:
            # first arrivals and retries that came by now, in the order they came (a retry keeps its request id)
            upto = int(np.searchsorted(arrival, now, side="right"))
            came = [(float(arrival[i]), i) for i in range(next_arrival, upto)]
            while retries and retries[0][0] <= now:
                came.append(heapq.heappop(retries))
                retried_at.append(came[-1][0])
            came.sort()
            next_arrival = upto
        elif next_arrival < n and arrival[next_arrival] <= now:
            upto = int(np.searchsorted(arrival, now, side="right"))
            came = range(next_arrival, upto) if retry is None else [(float(arrival[i]), i)
                                                                      for i in range(next_arrival, upto)]
            next_arrival = upto
        else:
            came = ()
        if came:
            if admission is None:
                state.waiting.extend(came if retry is None else (i for _, i in came))
            else:
                state.now = now
                for i in came:
                    if retry is not None:
                        at, i = i
                        attempt_s[i], expires_s[i] = at, at + deadline_s     # this attempt's own clock
                    if admission(state, i):
                        state.waiting.append(i)
                    elif retry is not None and attempts[i] <= retry.max_retries:
                        # refused (a 429, seen by its client now): it sends it again after its backoff, or after
                        # the Retry-After the refusal carries when that is later and the client honours it
                        wait = retry.delay(int(attempts[i]) - 1, retry_rng)
                        if header is not None:
                            wait = max(wait, header.seconds(state, header_rng))
                        heapq.heappush(retries, (now + wait, i))
                        attempts[i] += 1
                    else:
                        rejected[i] = finished[i] = True
                        num_finished += 1
        if clients is not None and clients.abandon and state.waiting:
            gone = drop_expired(state, now, expires_s)
            if gone:
                abandoned[gone] = finished[gone] = True
                num_finished += len(gone)
        if not state.waiting and not state.running.size:
            if next_arrival == n and not retries:
                if num_finished == n:
                    break                               # the last arrivals were all rejected (or left)
                raise RuntimeError("nothing to run and nothing left to arrive, yet some request is unfinished")
            # idle: jump to the next arrival (a first one or a retry)
            now = min(float(arrival[next_arrival]) if next_arrival < n else math.inf,
                      retries[0][0] if retries else math.inf)
            waste = waste[:0]                           # the wasted decodes went with the step nobody needed
            continue

        state.now, state.preempted_this_step, state.step_swap_s = now, False, 0.0
        ids, tokens = policy.schedule(state)
        ids, tokens = np.asarray(ids, dtype=np.int64), np.asarray(tokens, dtype=np.int64)   # lists are fine too
        if ids.size == 0:
            raise RuntimeError(f"{policy.name} scheduled nothing at t={now:.6f}s with work pending")

        if speculation is not None:                     # decodes become verifications: drafts, look-ahead KV
            tokens = spec_run.add_drafts(state, ids, tokens)

        # price the step from its four totals (costmodel.roofline_s: cost_from_totals' slower roof, no StepCost);
        # a chunk of c tokens on a prefix of p has c*p + c*(c+1)/2 (query, key) pairs, and sum(c*(c+1)) = c.c + sum(c)
        context = computed[ids]
        num_tokens = int(tokens.sum())
        pairs = int(np.dot(tokens, context)) + (int(np.dot(tokens, tokens)) + num_tokens) // 2
        if async_scheduling:
            # the decodes scheduled before their requests were seen to finish: one token on each full context
            w = int(waste.sum())
            roofline = costmodel.roofline_s(model, gpu, num_tokens + waste.size, ids.size + waste.size,
                                            pairs + w + waste.size, int(context.sum()) + w)
            wasted_slots += waste.size
            waste = waste[:0]
            step_s = max(roofline, overhead_s)
        else:
            # LM-head rows: one a sequence, and one more per draft (a verification samples at every position)
            rows = ids.size + (int(spec_run.drafts.sum()) if speculation is not None else 0)
            step_s = costmodel.roofline_s(model, gpu, num_tokens, rows, pairs, int(context.sum())) + overhead_s
            if speculation is not None:
                step_s += spec_run.draft_seconds(context)
        starts.append(now)
        step_kv.append(state.kv_used)
        now += step_s
        if state.step_swap_s:                           # swap copies block the step (never under recompute)
            now += state.step_swap_s
        step_swap.append(state.step_swap_s)
        ends.append(now)
        step_tokens.append(num_tokens)
        step_seqs.append(ids.size)
        step_decodes.append(ids.size - int(np.count_nonzero(tokens - 1)))

        # postprocess: advance the KV; a sequence whose KV now covers all its tokens samples one more
        new_computed = context + tokens
        if speculation is not None:                     # accepted drafts emitted, rejected ones rolled back
            new_computed = spec_run.verify(state, ids, new_computed, token_step, token_slot_base, step)
        computed[ids] = new_computed
        emit = ids[new_computed == seq_len[ids]]
        if emit.size:
            token_step[token_slot_base[emit] + seq_len[emit]] = step
            seq_len[emit] += 1
            done = emit[seq_len[emit] == final_len[emit]]
            if done.size:
                if async_scheduling:
                    waste = computed[done].copy()
                state.kv_free += int(reserved[done].sum())
                reserved[done] = 0
                finished[done] = True
                num_finished += done.size
                state.running = state.running[~finished[state.running]]
        step += 1
    assert state.kv_free == state.kv_capacity and not state.waiting, "every slot comes back when all are done"
    assert state.host_kv_free == state.host_kv_capacity, "every host slot comes back when all are done"

    return SimResult(policy=policy.name, kv_capacity=int(kv_capacity_tokens), requests=requests,
                     generated=state.produced, first_scheduled_s=state.first_scheduled_s,
                     preemptions=state.preemptions,
                     token_offset=token_offset, token_step=token_step,
                     step_start_s=np.array(starts), step_end_s=np.array(ends),
                     step_tokens=np.array(step_tokens, dtype=np.int64), step_seqs=np.array(step_seqs, dtype=np.int64),
                     step_decodes=np.array(step_decodes, dtype=np.int64),
                     step_kv_used=np.array(step_kv, dtype=np.int64), rejected=rejected,
                     step_swap_s=np.array(step_swap, dtype=np.float64), swaps_out=state.swaps_out,
                     swaps_in=state.swaps_in, swap_fallbacks=state.swap_fallbacks,
                     host_kv_capacity=int(state.host_kv_capacity),
                     victim_tokens=np.array(state.victim_tokens, dtype=np.int64), wasted_slots=wasted_slots,
                     speculation=spec_run.stats if speculation is not None else None,
                     **({} if clients is None else {"abandoned": abandoned, "attempts": attempts,
                                                    "attempt_arrival_s": attempt_s, "deadline_s": deadline_s,
                                                    "retry_arrival_s": np.array(retried_at)}))
