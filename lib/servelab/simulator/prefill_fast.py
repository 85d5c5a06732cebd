"""`simulate`'s fast form for a plain `PrefillFirst()` (nano-vllm's policy; recompute, no admission rule, clients,
speculation or asynchronous scheduling): the same steps, the same floats, without per-sequence work in decode steps.

A PrefillFirst step is all prefill (FCFS from the head of `waiting`, only its first sequence cut to the budget)
or all decode: the first `max_num_seqs` running sequences, one token each. Running order only changes by
appending admissions, dropping finished sequences and preempting the tail, so a sequence in that window (`active`,
admission order) stays in it until it finishes or is preempted, and the others (`queued`) enter it in order as
places free up. What `loop.simulate` recomputes every step is therefore known in advance here:

* an active sequence needs no per-step record: it entered the window before decode step `d0` (decode steps
  counted apart from prefill ones) with `L0` tokens, so after decode step d it has `L0 + d + 1 - d0`; its token
  times are the steps of decode steps d0, d0+1, ... (`dsteps`), copied in one slice when it leaves the window
  (`_write_run`), and the decode step that emits its last token is known when it enters (`finish_at`);
* a decode step's totals are the window's size `active_n` and context sum `context`, kept incrementally; only
  prefill steps look at sequences one by one, as `PrefillFirst.schedule` does.

Everything else follows `PrefillFirst.schedule`, `ServingState.reserve_decode_slots` (preempting the most recently
admitted running sequence, in or past the window, while KV is short) and the loop line by line, and each step is
priced by `costmodel.roofline_s` on the same integer totals, so every step and token time is bit for bit the loop's.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import deque

import numpy as np

from servelab.analytic.costmodel import roofline_s
from servelab.simulator import fast_common
from servelab.simulator.metrics import SimResult
from servelab.simulator.policies import PrefillFirst

_REFERENCE_SCHEDULE = PrefillFirst.schedule


def applies(policy, admission, swap, async_scheduling, speculation, clients) -> bool:
    """Whether `simulate` may take the fast form: a `PrefillFirst` itself (not a subclass, a `Traced` or a
    replaced `schedule`, which all run through the general loop) with nothing else switched on."""
    return fast_common.plain(policy, PrefillFirst, _REFERENCE_SCHEDULE, admission, swap, async_scheduling,
                             speculation, clients)


def simulate_prefill_first(requests, policy: PrefillFirst, model, gpu, kv_capacity: int,
                           overhead_s: float) -> SimResult:
    """`loop.simulate(requests, policy, model, gpu, kv_capacity_tokens=kv_capacity, overhead_s=overhead_s)`
    for a policy `applies` accepts (arguments already checked by `simulate`)."""
    n = len(requests)
    arrival = requests.arrival_s.tolist()
    token_offset, base, token_step = fast_common.token_layout(requests)   # token k: slot base[i] + seq_len before it
    final = (requests.prompt_len + requests.output_len).tolist()
    seq_len = requests.prompt_len.tolist()              # up to date for every sequence outside the window
    first_scheduled = [float("nan")] * n
    preemptions = [0] * n
    victim_tokens = array("q")
    records = fast_common.step_records()
    starts, ends, step_tokens, step_seqs, step_decodes, step_kv = records
    budget_total, max_seqs = policy.max_num_batched_tokens, policy.max_num_seqs

    waiting: deque[int] = deque()
    head_computed = 0                                   # tokens with KV of waiting[0] if it is part-prefilled
    active: dict[int, None] = {}                        # the first max_seqs running sequences, admission order
    queued: deque[int] = deque()                        # the running ones after them, admission order
    d0 = [0] * n                                        # an active sequence's first decode step in the window
    len0 = [0] * n                                      # ... and its seq_len before it
    finish_at: dict[int, list[int]] = {}                # decode step -> active sequences whose last token it emits
    active_n = context = 0                              # len(active) and the sum of its sequences' contexts
    dsteps = np.empty(1024, dtype=np.int32)             # decode step d ran as step dsteps[d]
    decode = 0                                          # decode steps so far
    kv_free = kv_capacity
    now, next_arrival, num_finished, step = 0.0, 0, 0, 0

    def _write_run(i: int, upto: int) -> None:
        """Token times of i's decodes in decode steps d0[i] .. upto - 1: consecutive slots."""
        start = base[i] + len0[i]
        token_step[start:start + upto - d0[i]] = dsteps[d0[i]:upto]

    while num_finished < n:
        if next_arrival < n and arrival[next_arrival] <= now:
            upto = bisect_right(arrival, now, next_arrival)
            waiting.extend(range(next_arrival, upto))
            next_arrival = upto
        if not waiting and not active_n:
            if next_arrival == n:
                raise RuntimeError("nothing to run and nothing left to arrive, yet some request is unfinished")
            now = arrival[next_arrival]                 # idle: jump to the next arrival
            continue

        # prefill: FCFS from the head while KV and max_seqs allow; only the step's first one may be cut
        chunks = []                                     # (id, tokens) in schedule order
        budget, c = budget_total, head_computed
        while waiting and len(chunks) < max_seqs and budget:
            i = waiting[0]
            length = seq_len[i]
            if not c:                                   # fresh: reserve its whole length
                if kv_free < length:
                    break                               # head-of-line: never skip ahead
                if budget < length and chunks:
                    break
                kv_free -= length
                if first_scheduled[i] != first_scheduled[i]:    # NaN: never scheduled before
                    first_scheduled[i] = now
            t = length - c if length - c < budget else budget
            budget -= t
            chunks.append((i, t))
            if t < length - c:
                break                                   # cut: it stays at the head, the budget is spent
            waiting.popleft()
            c = 0

        if chunks:
            num_tokens = budget_total - budget
            ones = 0
            dot_tt = 0
            for _, t in chunks:
                dot_tt += t * t
                ones += t == 1
            c = head_computed                           # only the first chunk can have KV before the step
            pairs = chunks[0][1] * c + (dot_tt + num_tokens) // 2
            starts.append(now)
            step_kv.append(kv_capacity - kv_free)
            now += roofline_s(model, gpu, num_tokens, len(chunks), pairs, c) + overhead_s
            ends.append(now)
            step_tokens.append(num_tokens)
            step_seqs.append(len(chunks))
            step_decodes.append(ones)

            head_computed = 0
            for i, t in chunks:
                length = seq_len[i]
                if c + t < length:                      # cut: the rest next step
                    head_computed = c + t
                    break
                c = 0
                token_step[base[i] + length] = step     # all its tokens have KV: it samples one
                length += 1
                seq_len[i] = length
                if length == final[i]:
                    kv_free += length - 1
                    num_finished += 1
                elif active_n < max_seqs:               # into the window: decodes from the next decode step
                    active[i] = None
                    active_n += 1
                    d0[i], len0[i] = decode, length
                    context += length - 1
                    finish_at.setdefault(decode + final[i] - length - 1, []).append(i)
                else:
                    queued.append(i)
            step += 1
            continue

        # decode: a KV slot for each of the window's sequences, preempting the tail of running while short
        while kv_free < active_n:
            if queued:                                  # past the window: between decodes, seq_len - 1 in KV
                v = queued.pop()
                held = seq_len[v] - 1
            else:
                v = active.popitem()[0]
                active_n -= 1
                length = len0[v] + decode - d0[v]
                _write_run(v, decode)
                finish_at[d0[v] + final[v] - len0[v] - 1].remove(v)
                seq_len[v] = length
                held = length - 1
                context -= held
            kv_free += held
            victim_tokens.append(held)
            preemptions[v] += 1
            waiting.appendleft(v)
        if not active_n:
            raise RuntimeError(f"{policy.name} scheduled nothing at t={now:.6f}s with work pending")
        kv_free -= active_n
        starts.append(now)
        step_kv.append(kv_capacity - kv_free)
        now += roofline_s(model, gpu, active_n, active_n, context + active_n, context) + overhead_s
        ends.append(now)
        step_tokens.append(active_n)
        step_seqs.append(active_n)
        step_decodes.append(active_n)
        if decode == dsteps.size:
            dsteps = np.concatenate([dsteps, np.empty_like(dsteps)])
        dsteps[decode] = step
        context += active_n
        decode += 1
        done = finish_at.pop(decode - 1, None)
        if done:
            for i in done:
                _write_run(i, decode)
                del active[i]
                seq_len[i] = length = final[i]
                kv_free += length - 1
                context -= length - 1
            active_n -= len(done)
            num_finished += len(done)
            while queued and active_n < max_seqs:       # the next running ones move up into the window
                i = queued.popleft()
                active[i] = None
                active_n += 1
                length = seq_len[i]
                d0[i], len0[i] = decode, length
                context += length - 1
                finish_at.setdefault(decode + final[i] - length - 1, []).append(i)
        step += 1
    assert kv_free == kv_capacity and not waiting, "every slot comes back when all are done"
    return fast_common.result(policy, requests, kv_capacity, seq_len, first_scheduled, preemptions, token_offset,
                              token_step, records, victim_tokens)
