"""A step-driven serving simulator: requests arrive, a scheduler builds each step, the cost model prices it.

The loop is an engine's, with the GPU replaced by `servelab.analytic.costmodel`:

    admit the requests that have arrived by `now`
    ids, tokens = policy.schedule(state)          # which sequences compute how many tokens this step
    now += step time of that batch                # roofline + fixed overhead
    sequences whose KV now covers all their tokens emit one token; finished ones free their KV

Every sequence is handled the same way, as in vLLM V1: it has `seq_len` tokens (prompt
+ tokens generated so far) and `computed` of them have KV. A step computes some of the rest; when
`computed == seq_len` the step's logits give a new token. A prefill is "many tokens to compute", a decode
is "one token to compute", a recompute after preemption is a prefill of prompt + generated tokens.

Memory, in tokens (one KV slot holds one token; block rounding is left out): a sequence reserves KV for
its whole current length when it is admitted (as nano-vllm allocates blocks for the whole prompt), and
one more slot before each decode. When a decode finds no free slot, the most recently admitted running
sequence is preempted: its KV is dropped and it goes back to the front of the waiting queue, to be
prefilled again later (recompute). Admission is FCFS from the head of the queue, never skipping ahead.

Two policies share this machinery and differ only in what a step holds:

* `PrefillFirst` (nano-vllm): if any prefill can be scheduled, the step is prefill only; only the first
  prefill of a step may be cut to fit `max_num_batched_tokens`; otherwise the step decodes the running
  sequences. A long prompt therefore stops every running decode for as long as its prefill takes, and
  chunking does not help: a part-prefilled prompt keeps every step a prefill step until it is done.
  With KV in tokens this is servelab.schedulers.scheduler at block size 1 without prefix caching, step for step.
* `MixedBudget` (decodes first, Sarathi-Serve's stall-free batching): every running sequence decodes in
  every step, then prefill chunks fill what is left of `max_num_batched_tokens`. A long prompt is spread over many
  steps, and no step is longer than the budget's worth of work.

`V1` is vLLM V1's step itself, run by `servelab.schedulers.vllm_scheduler`'s `Scheduler` inside this loop: running
requests first, then admissions from what is left of the budget, any request chunked, KV allocated in blocks
step by step (the cache is kv_capacity // block_size blocks), recompute preemption of the last running one.

`MixedBudget(prefill_order="shortest_first")` hands the leftover budget to the prompts with the fewest
tokens left instead of the oldest: scheduling by the half of a request's work that is known on arrival.

Preemption: `simulate(..., preemption="recompute")` (the default) drops a victim's KV, to be prefilled again;
`preemption=Swap(host_kv_tokens, link_bandwidth, copy_latency_s, block_size)` (or "swap" with defaults) copies
it to a host pool and back, one copy per block per layer per K and V, and adds the copy time to the step that
makes it (`SimResult.step_swap_s`); when the host pool is full the victim is recomputed (`preemption` module).

Speculative decoding: `simulate(..., speculation=Speculation(k, alpha, draft, seed))` makes each decode a
verification of up to k drafts (in the token budget, look-ahead KV reserved, rejected drafts rolled back and
their slots given back), each accepted with probability alpha given the ones before; the draft model's steps,
if any, are priced too (`speculative` module; counters in `SimResult.speculation`).

Admission control: `simulate(..., admission=rule)` asks `rule(state, i)` about each request as it arrives;
a rejected request is never served (no tokens, NaN latencies) and counts against goodput.
`BacklogAdmission` is the rule derived from the TTFT and TPOT targets (`costmodel.max_backlog_tokens`):
admit only if the prompt tokens queued ahead plus the request's own can be prefilled in time.

Clients: `simulate(..., clients=Clients(deadline_s, abandon=True, retry=Backoff(base_s, cap_s, jitter,
max_retries, seed)))` puts a client with a first-token deadline behind each request: a request still waiting at
its deadline leaves the queue (`abandon=True`; the engine hears of the disconnect), an admitted one whose first
token comes later is served-but-dead (`SimResult.dead`, `dead_tokens`), and a refused one is sent again after
its backoff delay (`SimResult.attempts`). `QueueCap(max_waiting)` is a queue-length refusal rule (`clients`).

Tenants and classes (`fair`): `TokenFair(tenant, weights, ...)` shares the budget left after the decodes between
tenants by virtual token counters (roofline token weights, the smallest counter first, a returning tenant lifted
to the smallest backlogged one); `Priority(priority, batch_kv_quota, ...)` admits interactive requests first,
caps the batch class's KV and preempts batch sequences for an interactive request that does not fit.

Per request the result holds the time of every token (as a step index: no per-token Python objects), so
TTFT, TPOT, every inter-token gap, queueing delay and finish time all come out of arrays. `Traced` wraps a
policy and keeps every step's (request id, tokens) pairs, for tables and for step-by-step comparisons.

One concept per module: `arrivals` (arrival times, lengths, `Requests`), `state` (`ServingState`, what a
policy sees), `policies` (`PrefillFirst`, `MixedBudget`, `Traced`), `admission` (rules applied on arrival),
`v1` (`V1`, vLLM V1's scheduler as a policy, through `servelab.schedulers.vllm_scheduler`), `preemption` (`Swap`),
`speculative` (`Speculation`), `clients` (`Clients`, `Backoff`, `QueueCap`), `fair` (`TokenFair`, `Priority`),
`loop` (`simulate`), `mixed_fast` (the loop's fast form for a plain `MixedBudget()`: the same result, bit for
bit, without per-sequence work in every step) and `metrics` (`SimResult`, `percentiles`); every name is
importable from `servelab.simulator` itself.

Time is in seconds throughout (arrivals, step times). `servelab.analytic.workloads.poisson_arrivals` is chapter 1's
step-clock generator and returns integer *steps*; `poisson_arrivals` here returns float *seconds*.

>>> from servelab.analytic.costmodel import LLAMA3_8B, H100_SXM
>>> reqs = Requests(poisson_arrivals(200, rate=5.0, seed=1), fixed_lengths(200, 512), fixed_lengths(200, 64))
>>> res = simulate(reqs, MixedBudget(max_num_batched_tokens=2048), LLAMA3_8B, H100_SXM)
>>> bool((res.generated == 64).all()), bool(res.tpot.max() < 0.02)
(True, True)
"""

from __future__ import annotations

from servelab.simulator.admission import Admission, BacklogAdmission, prefill_backlog
from servelab.simulator.arrivals import (
    Requests,
    burst_arrivals,
    fixed_lengths,
    lognormal_lengths,
    merge_requests,
    poisson_arrivals,
    trace_arrivals,
    uniform_lengths,
)
from servelab.simulator.clients import Backoff, Clients, QueueCap
from servelab.simulator.fair import Priority, TokenFair
from servelab.simulator.loop import simulate
from servelab.simulator.metrics import SimResult, percentiles
from servelab.simulator.policies import MixedBudget, Policy, PrefillFirst, Traced
from servelab.simulator.preemption import Swap
from servelab.simulator.speculative import SpecStats, Speculation
from servelab.simulator.state import ServingState
from servelab.simulator.v1 import V1

__all__ = [
    "Admission",
    "BacklogAdmission",
    "Backoff",
    "Clients",
    "MixedBudget",
    "Policy",
    "PrefillFirst",
    "Priority",
    "QueueCap",
    "Requests",
    "ServingState",
    "SimResult",
    "SpecStats",
    "Speculation",
    "Swap",
    "TokenFair",
    "Traced",
    "V1",
    "burst_arrivals",
    "fixed_lengths",
    "lognormal_lengths",
    "merge_requests",
    "percentiles",
    "poisson_arrivals",
    "prefill_backlog",
    "simulate",
    "trace_arrivals",
    "uniform_lengths",
]
