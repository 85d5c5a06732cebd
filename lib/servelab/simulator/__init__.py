"""A step-driven serving simulator: requests arrive, a scheduler builds each step, the cost model prices it.

The loop is an engine's, with the GPU replaced by `servelab.analytic.costmodel`:

    admit the requests that have arrived by `now`
    ids, tokens = policy.schedule(state)          # which sequences compute how many tokens this step
    now += step time of that batch                # roofline + fixed overhead
    sequences whose KV now covers all their tokens emit one token; finished ones free their KV

Every sequence has `seq_len` tokens and `computed` of them with KV, as in vLLM V1; memory is counted in tokens,
time in seconds. Policies (`PrefillFirst`, nano-vllm's; `MixedBudget`, decodes first; `V1`, vLLM V1's; `Ordered`,
a running set re-chosen every step) decide what a step holds; `simulate` takes options for preemption (recompute or
`Swap`), speculative decoding (`Speculation`), admission rules (`BacklogAdmission`), clients with deadlines and retries
(`Clients`) and tenants (`TokenFair`, `Priority`): docs/simulator.md says what each does and which module holds it.

>>> from servelab.analytic.costmodel import LLAMA3_8B, H100_SXM
>>> reqs = Requests(poisson_arrivals(200, rate=5.0, seed=1), fixed_lengths(200, 512), fixed_lengths(200, 64))
>>> res = simulate(reqs, MixedBudget(max_num_batched_tokens=2048), LLAMA3_8B, H100_SXM)
>>> bool((res.generated == 64).all()), bool(res.tpot.max() < 0.02)
(True, True)
"""

from __future__ import annotations

from servelab.simulator.admission import Admission, BacklogAdmission, RetryAfter, prefill_backlog
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
from servelab.simulator.disaggregated import SplitResult, simulate_split  # noqa: F401 (chapter 14)
from servelab.simulator.fair import Priority, TokenFair
from servelab.simulator.loop import simulate
from servelab.simulator.metrics import SimResult, percentiles
from servelab.simulator.moe import sample_routing, simulate_moe_decode  # noqa: F401 (chapter 17)
from servelab.simulator.ordered import Ordered
from servelab.simulator.parallel import TPResult, simulate_tp_decode  # noqa: F401 (chapter 16)
from servelab.simulator.policies import MixedBudget, Policy, PrefillFirst, Traced
from servelab.simulator.preemption import Swap
from servelab.simulator.replicas import CacheAware, PrefixHash, simulate_replicas  # noqa: F401 (chapter 15)
from servelab.simulator.speculative import SpecStats, Speculation
from servelab.simulator.state import ServingState
from servelab.simulator.v1 import V1

__all__ = [
    "Admission",
    "BacklogAdmission",
    "Backoff",
    "Clients",
    "MixedBudget",
    "Ordered",
    "Policy",
    "PrefillFirst",
    "Priority",
    "QueueCap",
    "Requests",
    "RetryAfter",
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
