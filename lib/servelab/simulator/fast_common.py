"""What `simulate`'s two fast forms share (`mixed_fast` for a plain `MixedBudget()`, `prefill_fast` for a plain
`PrefillFirst()`): when they apply, the token slots of a workload, and the `SimResult` built from their records.

Both keep their per-step records in `array`s (8 bytes a value, no Python object each) and hand them to the result
as numpy views; everything a recompute-only run without options leaves at zero is zero here too.
"""

from __future__ import annotations

from array import array

import numpy as np

from servelab.simulator.metrics import SimResult


def plain(policy, cls, reference, admission, swap, async_scheduling, speculation, clients) -> bool:
    """Whether `policy` is a `cls` itself (not a subclass, a `Traced` or a replaced `schedule`, `reference` being
    the original one, which all run through the general loop) with none of `simulate`'s options switched on."""
    return (type(policy) is cls and cls.schedule is reference and admission is None and swap is None
            and not async_scheduling and speculation is None and clients is None)


def token_layout(requests):
    """(token_offset, base, token_step): token k of request i goes to slot token_offset[i] + k, which is
    base[i] + seq_len just before it is emitted (base a list, for Python-speed indexing); token_step all -1."""
    prompt, output = requests.prompt_len, requests.output_len
    token_offset = np.concatenate([[0], np.cumsum(output)[:-1]]).astype(np.int64)
    token_step = np.full(int(output.sum()), -1, dtype=np.int32)
    return token_offset, (token_offset - prompt).tolist(), token_step


def step_records():
    """Per-step records: start and end times (floats), tokens, sequences, decodes and KV used (integers)."""
    return array("d"), array("d"), array("q"), array("q"), array("q"), array("q")


def ints(values: array) -> np.ndarray:
    """An int64 view of an `array("q")`, not a copy (an empty one gets an empty array)."""
    return np.frombuffer(values, dtype=np.int64) if len(values) else np.zeros(0, dtype=np.int64)


def result(policy, requests, kv_capacity: int, seq_len: list, first_scheduled: list, preemptions: list,
           token_offset, token_step, records, victim_tokens: array) -> SimResult:
    """The `SimResult` the general loop returns for the same run under recompute preemption without options."""
    starts, ends, step_tokens, step_seqs, step_decodes, step_kv = records
    n = len(requests)
    zeros = np.zeros(n, dtype=np.int64)
    return SimResult(policy=policy.name, kv_capacity=int(kv_capacity), requests=requests,
                     generated=np.array(seq_len, dtype=np.int64) - requests.prompt_len,
                     first_scheduled_s=np.array(first_scheduled, dtype=np.float64),
                     preemptions=np.array(preemptions, dtype=np.int64), token_offset=token_offset,
                     token_step=token_step, step_start_s=np.frombuffer(starts, dtype=np.float64),
                     step_end_s=np.frombuffer(ends, dtype=np.float64), step_tokens=ints(step_tokens),
                     step_seqs=ints(step_seqs), step_decodes=ints(step_decodes), step_kv_used=ints(step_kv),
                     rejected=np.zeros(n, dtype=bool), step_swap_s=np.zeros(len(ends), dtype=np.float64),
                     swaps_out=zeros, swaps_in=zeros.copy(), swap_fallbacks=zeros.copy(), host_kv_capacity=0,
                     victim_tokens=ints(victim_tokens), wasted_slots=0, speculation=None)
