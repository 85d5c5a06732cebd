"""Sampled expert routing: the experts a batch touches and the tokens each gets, step by step, priced on the roofline.

Each token of a step picks `experts_per_token` distinct experts of `num_experts` in every MoE layer, by the experts'
popularity (uniform unless `skew` is given: popularity of the i-th expert proportional to 1 / (i + 1)^skew, drawn
without replacement as a router's top-k over noisy scores would). `sample_routing` counts, per layer, the distinct
experts touched and the busiest expert's tokens over the mean of the touched ones (the load imbalance an
expert-parallel layer waits on). `simulate_moe_decode` prices decode steps of a batch with the sampled weight reads:
the step's compute and KV from `costmodel.step_cost`, its weight bytes from the sampled experts instead of the
expected ones. Uniform routing matches `analytic.moe_mla.experts_touched` and `model.weight_bytes_read` on average.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servelab.analytic import costmodel
from servelab.analytic.costmodel import DEFAULT_STEP_OVERHEAD_S, GPUSpec, ModelSpec

__all__ = ["MoEDecode", "Routing", "sample_routing", "simulate_moe_decode"]


@dataclass(frozen=True)
class Routing:
    """Per sampled layer: `touched` (distinct experts picked) and `imbalance` (the busiest expert's tokens over the
    mean tokens of an expert, num_tokens x k / E)."""

    touched: np.ndarray
    imbalance: np.ndarray


def _popularity(num_experts: int, skew: float) -> np.ndarray:
    p = 1.0 / np.arange(1, num_experts + 1, dtype=float) ** skew
    return p / p.sum()


def sample_routing(num_experts: int, experts_per_token: int, num_tokens: int, layers: int, seed: int,
                   skew: float = 0.0) -> Routing:
    """Route `num_tokens` tokens in each of `layers` independent layers (Gumbel top-k: k distinct experts a token,
    drawn by popularity without replacement)."""
    rng = np.random.default_rng(seed)
    e, k = int(num_experts), int(experts_per_token)
    logp = np.log(_popularity(e, skew))
    touched, imbalance = np.empty(layers), np.empty(layers)
    for layer in range(layers):
        scores = logp + rng.gumbel(size=(num_tokens, e))
        picks = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        load = np.bincount(picks.ravel(), minlength=e)
        touched[layer] = np.count_nonzero(load)
        imbalance[layer] = load.max() / (num_tokens * k / e)
    return Routing(touched, imbalance)


@dataclass(frozen=True)
class MoEDecode:
    """Simulated decode steps of one batch: each step's seconds and weight bytes read, and the closed form's."""

    step_s: np.ndarray
    weight_bytes: np.ndarray
    expected_step_s: float
    expected_weight_bytes: float


def simulate_moe_decode(model: ModelSpec, gpu: GPUSpec, batch: int, context_len: int, steps: int, seed: int,
                        skew: float = 0.0, overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> MoEDecode:
    """`steps` decode steps of `batch` sequences at `context_len`, every MoE layer routed by `sample_routing`: each
    step reads the weights outside the routed experts once and the experts its tokens touched in each layer. The
    model is priced as given (pass a priced or sharded model for fp8 weights or a TP shard)."""
    cost = costmodel.step_cost(model, gpu, decode_context_lens=[context_len] * batch)
    layers = model.num_moe_layers
    per_expert = model.expert_params * model.bytes_per_param
    rest = model.weight_bytes - layers * model.num_experts * per_expert if layers else model.weight_bytes
    kv = cost.kv_read_bytes + cost.kv_write_bytes
    weights = np.empty(steps)
    for step in range(steps):
        if layers:
            routing = sample_routing(model.num_experts, model.experts_per_token, batch, layers, seed * 100_003 + step)
            weights[step] = rest + routing.touched.sum() * per_expert
        else:
            weights[step] = model.weight_bytes
    memory = (weights + kv) / gpu.hbm_bandwidth
    step_s = np.maximum(cost.compute_s, memory) + overhead_s
    return MoEDecode(step_s, weights, cost.seconds(overhead_s), cost.weight_bytes)
