"""`simulate`'s fast form for a plain `MixedBudget()` (FCFS, recompute, no admission rule, clients, speculation
or asynchronous scheduling): the same steps, the same floats, without per-sequence work in every step.

Under MixedBudget every running sequence is in every step, so once a sequence has finished its prompt it emits
one token per step until it finishes or is preempted. What `loop.simulate` recomputes each step over the
running array is therefore known in advance here:

* a decoding sequence needs no per-step record: it started decoding at step `s0` with `L0` tokens, so at step
  s it has `L0 + s - s0` tokens, `L0 + s - s0 - 1` of them with KV (its context), one reserved slot per token
  but the last; its token times are the consecutive steps s0, s0+1, ..., written in one slice when its run of
  decodes ends (`_write_run`), and it finishes at the step known when it starts decoding (`finish_at`);
* the step's four totals (`costmodel.cost_from_totals`) are sums over the running set, kept incrementally:
  `decodes` and their context sum `context`, which grows by `decodes` every step; only the few sequences
  still in their prompt (`prefilling`, in admission order) are looked at one by one.

Everything else follows `MixedBudget.schedule` and the loop line by line: decodes first with a slot each
(preempting the most recently admitted sequence while short), prompt chunks in admission order from what is
left of the budget, then FCFS admissions unless something was preempted, and the step priced by
`costmodel.roofline_s` on the same integer totals, so every step time and token time is bit for bit the
loop's. The tests run both on random workloads and compare every array.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import deque

import numpy as np

from servelab.analytic.costmodel import roofline_s
from servelab.simulator import fast_common
from servelab.simulator.metrics import SimResult
from servelab.simulator.policies import MixedBudget

_REFERENCE_SCHEDULE = MixedBudget.schedule


def applies(policy, admission, swap, async_scheduling, speculation, clients) -> bool:
    """Whether `simulate` may take the fast form: a `MixedBudget` itself (not a subclass, a `Traced` or a
    replaced `schedule`, which all run through the general loop) with nothing else switched on."""
    return (fast_common.plain(policy, MixedBudget, _REFERENCE_SCHEDULE, admission, swap, async_scheduling,
                              speculation, clients) and policy.prefill_order == "fcfs")


def simulate_mixed(requests, policy: MixedBudget, model, gpu, kv_capacity: int, overhead_s: float) -> SimResult:
    """`loop.simulate(requests, policy, model, gpu, kv_capacity_tokens=kv_capacity, overhead_s=overhead_s)`
    for a policy `applies` accepts (arguments already checked by `simulate`)."""
    prompt_arr, output_arr = requests.prompt_len, requests.output_len
    n = len(requests)
    arrival = requests.arrival_s.tolist()
    token_offset, base, token_step = fast_common.token_layout(requests)   # token k: slot base[i] + seq_len before it
    final = (prompt_arr + output_arr).tolist()
    seq_len = prompt_arr.tolist()                       # up to date for every sequence that is not decoding
    first_scheduled = [float("nan")] * n
    preemptions = [0] * n
    victim_tokens = array("q")
    records = fast_common.step_records()
    starts, ends, step_tokens, step_seqs, step_decodes, step_kv = records
    budget_total, cap = policy.max_num_batched_tokens, min(policy.max_num_seqs, policy.max_num_batched_tokens)

    waiting: deque[int] = deque()
    running: list[int] = []                             # admission order, as ServingState.running
    prefilling: list[int] = []                          # the running ones still in their prompt, same order
    computed: dict[int, int] = {}                       # their tokens with KV
    s0: dict[int, int] = {}                             # decoding ones: the step of their first token this run
    len0: dict[int, int] = {}                           # ... and their seq_len before it
    finish_at: dict[int, list[int]] = {}                # step -> the decoding sequences whose last token it emits
    decodes = context = 0                               # how many decode, and the sum of their contexts
    kv_free = kv_capacity
    now, next_arrival, num_finished, step = 0.0, 0, 0, 0

    def _write_run(i: int, upto: int) -> None:
        """Token times of i's decodes from step s0[i] to upto - 1: consecutive steps, consecutive slots."""
        start = base[i] + len0[i]
        token_step[start:start + upto - s0[i]] = np.arange(s0[i], upto, dtype=np.int32)

    while num_finished < n:
        if next_arrival < n and arrival[next_arrival] <= now:
            upto = bisect_right(arrival, now, next_arrival)
            waiting.extend(range(next_arrival, upto))
            next_arrival = upto
        if not waiting and not running:
            if next_arrival == n:
                raise RuntimeError("nothing to run and nothing left to arrive, yet some request is unfinished")
            now = arrival[next_arrival]                 # idle: jump to the next arrival
            continue

        # 1. decodes, a KV slot each; preempt the most recently admitted while short (MixedBudget step 1)
        preempted = False
        while kv_free < decodes:
            v = running.pop()
            preempted = True
            if prefilling and prefilling[-1] == v:      # holds KV for its whole current length
                prefilling.pop()
                kv_free += seq_len[v]
                victim_tokens.append(computed.pop(v))
            else:                                       # decoding: its last token has no slot yet
                length = len0[v] + step - s0[v]
                _write_run(v, step)
                finish_at[s0[v] + final[v] - len0[v] - 1].remove(v)
                seq_len[v] = length
                kv_free += length - 1
                victim_tokens.append(length - 1)
                decodes -= 1
                context -= length - 1
            preemptions[v] += 1
            waiting.appendleft(v)
        kv_free -= decodes

        # 2. prompt chunks in admission order from what the decodes left (every running sequence has 1 counted)
        budget = budget_total - len(running)
        chunks = []                                     # (id, tokens, computed before) of the non-decodes
        for i in prefilling:
            c = computed[i]
            left = seq_len[i] - c
            t = 1
            if left > 1 and budget > 0:
                t = min(left, budget + 1)
                budget -= t - 1
            chunks.append((i, t, c))

        # 3. admissions, FCFS, unless something was preempted
        if not preempted:
            while waiting and budget > 0 and len(running) < cap and kv_free >= seq_len[waiting[0]]:
                i = waiting.popleft()
                kv_free -= seq_len[i]
                if first_scheduled[i] != first_scheduled[i]:    # NaN: never scheduled before
                    first_scheduled[i] = now
                t = min(seq_len[i], budget)
                budget -= t
                running.append(i)
                prefilling.append(i)
                chunks.append((i, t, 0))
        if not running:
            raise RuntimeError(f"{policy.name} scheduled nothing at t={now:.6f}s with work pending")

        # price the step as the loop does: tokens, sequences, (query, key) pairs, cached tokens read
        num_tokens, kv_read, dot_tc, dot_tt, not_one = decodes, context, context, decodes, 0
        for _, t, c in chunks:
            num_tokens += t
            kv_read += c
            dot_tc += t * c
            dot_tt += t * t
            not_one += t != 1
        pairs = dot_tc + (dot_tt + num_tokens) // 2
        starts.append(now)
        step_kv.append(kv_capacity - kv_free)
        now += roofline_s(model, gpu, num_tokens, len(running), pairs, kv_read) + overhead_s
        ends.append(now)
        step_tokens.append(num_tokens)
        step_seqs.append(len(running))
        step_decodes.append(len(running) - not_one)

        # postprocess: every decode emitted; some finished; prompts that are now all in KV emit their first token
        context += decodes
        done = finish_at.pop(step, ())
        for i in done:
            _write_run(i, step + 1)
            seq_len[i] = final[i]
            kv_free += final[i] - 1
            decodes -= 1
            context -= final[i] - 1
        done = set(done)
        if chunks:
            prefilling = []
            for i, t, c in chunks:
                c += t
                if c < seq_len[i]:
                    computed[i] = c
                    prefilling.append(i)
                    continue
                computed.pop(i, None)                   # a new one was never in it
                length = seq_len[i]
                if length + 1 == final[i]:              # its only token left: done at once
                    token_step[base[i] + length] = step
                    seq_len[i] = final[i]
                    kv_free += length
                    done.add(i)
                else:                                   # decodes from now on, one token a step
                    s0[i], len0[i] = step, length
                    finish_at.setdefault(step + final[i] - length - 1, []).append(i)
                    decodes += 1
                    context += c
        if done:
            num_finished += len(done)
            running = [i for i in running if i not in done]
        step += 1
    assert kv_free == kv_capacity and not waiting, "every slot comes back when all are done"

    return fast_common.result(policy, requests, kv_capacity, seq_len, first_scheduled, preemptions, token_offset,
                              token_step, records, victim_tokens)
