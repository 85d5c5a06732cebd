"""The numbers the chapters state, each computed by library code and tied to the step it describes.

A `Claim` is one number a notebook states (in its text or in a cell's output): its value, computed here from the
library, how the notebook prints it (`fmt`), the notebook cell that states it (its nbformat id), and the serving
point it describes (`servelab.analytic.serving.ServingPoint`), or, for a number that describes no single step (a
queueing limit, a ratio of two prices), the reason why. tests/test_claims.py recomputes every claim, fails when the cell
states anything else, and fails when its point cannot run (`servelab.analytic.serving.check`).

To register a chapter's numbers: write a function `chNN() -> list[Claim]` in the module of its chapter family
(`batching` for 01-03, `prefix` 04-05, `kernels` 06, `engine` 07, `kv` 08, `capacity` 09, `asynchronous` 10, `spec`
11, `queueing` 12, `fairness` 13, `disaggregation` 14, `routing` 15, `parallelism` 16, `moe_mla` 17; `core` holds
`Claim` and the shared points) that computes them with the same library calls the notebook makes, and add it to
`CHAPTERS` under the chapter's assignment name. A number chosen to reproduce a figure from elsewhere is still a claim:
its cell must say so in words.
"""

from __future__ import annotations

from collections.abc import Callable

from servelab.claims import (
    asynchronous,
    batching,
    capacity,
    disaggregation,  # chapter 14
    engine,  # chapter 07
    fairness,
    kernels,
    kv,
    moe_mla,  # chapter 17
    parallelism,  # chapter 16
    prefix,
    queueing,
    routing,  # chapter 15
    spec,
)
from servelab.claims.core import Claim, full_cache

__all__ = ["CHAPTERS", "Claim", "full_cache", "of"]


CHAPTERS: dict[str, Callable[[], list[Claim]]] = {
    "ch01_continuous_batching": batching.ch01,
    "ch02_nanovllm_scheduler": batching.ch02,
    "ch03_token_budget": batching.ch03,
    "ch04_radix_cache": prefix.ch04,
    "ch05_lock_ref_eviction": prefix.ch05,
    "ch06_triton_paged_attention": kernels.ch06,
    "ch07_mini_engine": engine.ch07,
    "ch08_preemption_and_kv_tiers": kv.ch08,
    "ch09_capacity_and_concurrency": capacity.ch09,
    "ch10_async_scheduling": asynchronous.ch10,
    "ch11_speculative_decoding": spec.ch11,
    "ch12_queueing_and_overload": queueing.ch12,
    "ch13_fairness_and_priority": fairness.ch13,
    "ch14_disaggregated_serving": disaggregation.ch14,
    "ch15_routing_across_replicas": routing.ch15,
    "ch16_parallelism_and_cuda_graphs": parallelism.ch16,
    "ch17_quantization_moe_mla": moe_mla.ch17,
}


def of(assignment: str) -> list[Claim]:
    """Every registered claim of a chapter ([] for a chapter with none yet)."""
    fn = CHAPTERS.get(assignment)
    return fn() if fn else []
