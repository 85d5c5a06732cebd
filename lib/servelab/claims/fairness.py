"""Chapter 13's numbers: interference, KV quotas, measured shares."""

from __future__ import annotations

import numpy as np

from servelab.analytic import costmodel
from servelab.analytic.costmodel import H100_SXM, LLAMA31_8B
from servelab.analytic.serving import ServingPoint
from servelab.claims.core import Claim, full_cache


def ch13() -> list[Claim]:
    """The interference and the KV quota of chapter 13's interview answer, on the steps they describe."""
    from servelab.analytic import fairness

    a = "ch13_fairness_and_priority"
    chats = (2000,) * 64
    quota = fairness.batch_kv_quota(LLAMA31_8B, H100_SXM, 0.030, 64, 2000, 16000)
    alone = fairness.interactive_tpot(LLAMA31_8B, H100_SXM, 64, 2000, 0, 0) * 1e3
    beside = fairness.interactive_tpot(LLAMA31_8B, H100_SXM, 64, 2000, 20, 16000) * 1e3
    return [
        Claim(a, "cell-27", "64 chats at 2K alone, ms a step", alone, "step takes {:.1f} ms",
              ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=chats)),
        Claim(a, "cell-27", "the same beside 20 documents of 16K", beside, "make it {:.1f} ms",
              ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=chats + (16000,) * 20)),
        Claim(a, "cell-27", "the batch class's KV quota at 30 ms", quota, "({:,} tokens)",
              ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=chats + (16000,) * (quota // 16000))),
        Claim(a, "cell-27", "the KV cache the quota is cut from", costmodel.kv_capacity_tokens(LLAMA31_8B, H100_SXM),
              "holds {:,} tokens", full_cache(LLAMA31_8B, H100_SXM)),
        *_ch13_shares(a),
        *_ch13_interview(a),
        *_ch13_drills(a),
    ]


def _ch13_interview(a: str) -> list[Claim]:
    """The interview answer's token prices and the documents the 30 ms target alone would allow."""
    from servelab.analytic import fairness

    flat = fairness.token_weights(LLAMA31_8B, H100_SXM, prompt_len=2000, batch=64, context_len=2000)
    by_target = max(n for n in range(0, 200)
                    if fairness.interactive_tpot(LLAMA31_8B, H100_SXM, 64, 2000, n, 16000) <= 0.030)
    return [
        Claim(a, "cell-27", "a prompt token's flat price, us", flat.prefill_s * 1e6, "a prompt token costs {:.0f} us",
              ServingPoint(LLAMA31_8B, H100_SXM, prefill_chunks=(2000,) * 4)),
        Claim(a, "cell-27", "an output token's flat price over a prompt token's", flat.decode_s / flat.prefill_s,
              "takes about {:.0f} times the GPU time", ServingPoint.decode(LLAMA31_8B, H100_SXM, 64, 2000)),
        Claim(a, "cell-27", "documents of 16K the 30 ms target alone allows", by_target,
              "the step has time for {} documents", None,
              "a count the KV cache then refuses: the sentence goes on to the 21 that fit"),
    ]


def _ch13_drills(a: str) -> list[Claim]:
    """The drills' answers as the solution's drills cell prints them, on their steps."""
    from servelab.analytic import fairness

    d1 = fairness.interactive_tpot(LLAMA31_8B, H100_SXM, 96, 1500, 12, 24000) * 1e3
    d2 = fairness.batch_kv_quota(LLAMA31_8B, H100_SXM, 0.020, 96, 1500, 24000)
    w = fairness.token_weights(LLAMA31_8B, H100_SXM, 2000, 64, 2000)
    chat = 500 * w.prefill_s + 300 * w.decode_s
    d3 = (0.9 / (1 - 0.9) * chat - 300 * w.decode_s) / w.prefill_s
    w4 = fairness.token_weights(LLAMA31_8B, H100_SXM, 2000, 32, 4000)
    chats = (1500,) * 96
    return [
        Claim(a, "cell-28", "drill 1", d1, "drill_1 = {:.2f} ms",
              ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=chats + (24000,) * 12)),
        Claim(a, "cell-28", "drill 2", d2, "drill_2 = {:,} tokens",
              ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=chats + (24000,) * (d2 // 24000))),
        Claim(a, "cell-28", "drill 3", d3, "drill_3 = {:,.0f} tokens", None,
              "a prompt length that gives a share under request turns, priced at flat weights"),
        Claim(a, "cell-28", "drill 4", w4.decode_s / w4.prefill_s, "drill_4 = {:.2f}",
              ServingPoint.decode(LLAMA31_8B, H100_SXM, 32, 4000)),
    ]


def _ch13_shares(a: str) -> list[Claim]:
    """The document tenant's share of the GPU beside a chat tenant (cell-03, the interview), measured in the
    simulator from step durations while both are backlogged, under three schedulers."""
    from servelab.analytic import fairness
    from servelab.simulator import MixedBudget, Requests, TokenFair, Traced, simulate
    from servelab.simulator.fair import measured_service, tenant_service

    flat = fairness.token_weights(LLAMA31_8B, H100_SXM, prompt_len=2000, batch=64, context_len=2000)
    priced = fairness.ContextWeights(LLAMA31_8B, H100_SXM, batch=64)
    doc_len = round(fairness.document_len_for_share(0.96, (300, 200), 200, flat))
    tenant = np.array([0, 1] * 80)
    reqs = Requests(np.zeros(160), np.array([doc_len, 300] * 80), np.array([200, 200] * 80))
    why = "a share measured over a simulated run of hundreds of steps"
    shares = {}
    for label, policy in (("turns", MixedBudget(max_num_batched_tokens=2048, max_num_seqs=64)),
                          ("flat", TokenFair(tenant, flat, max_num_batched_tokens=2048, max_num_seqs=64)),
                          ("context", TokenFair(tenant, priced, max_num_batched_tokens=2048, max_num_seqs=64))):
        traced = Traced(policy)
        res = simulate(reqs, traced, LLAMA31_8B, H100_SXM)
        used = measured_service(traced.steps, traced.contexts, res.step_duration_s, tenant, LLAMA31_8B, H100_SXM)
        counted = tenant_service(traced.steps, tenant, flat)
        k = next(k for k, step in enumerate(traced.steps) if any(i == 159 for i, _ in step))
        shares[label] = (used[k - 1, 0] / used[k - 1].sum(), counted[k - 1, 0] / counted[k - 1].sum())
    doc_decode = ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=(doc_len,) + (300,) * 63)
    return [
        Claim(a, "cell-03", "documents' share under request turns", shares["turns"][0], "gets {:.1%} of the", None,
              why),
        Claim(a, "cell-03", "flat prices' share for the documents", 0.96, "The {:.0%} often", None,
              "the share flat prices give; it sets the document length"),
        Claim(a, "cell-03", "the document length for 96% at flat prices", doc_len, "requests are {:,}-token", None,
              "a prompt length chosen to reproduce a share"),
        Claim(a, "cell-03", "a prompt token's flat price", flat.prefill_s * 1e6, "{:.1f} us a prompt token",
              ServingPoint(LLAMA31_8B, H100_SXM, prefill_chunks=(2000,) * 4)),
        Claim(a, "cell-03", "an output token's flat price", flat.decode_s * 1e6, "{:.1f} us an output token",
              ServingPoint.decode(LLAMA31_8B, H100_SXM, 64, 2000)),
        Claim(a, "cell-03", "the flat counter's own books", shares["flat"][1], "shows {:.1%} in its own", None, why),
        Claim(a, "cell-03", "the flat counter, measured", shares["flat"][0], "gives the documents {:.1%}", None, why),
        Claim(a, "cell-03", "an output token at a document's context over the flat price",
              priced.cost(0, 1, doc_len) / flat.decode_s, "costs {:.1f} times the flat price", doc_decode),
        Claim(a, "cell-03", "the context-priced counter, measured", shares["context"][0], "brings them to {:.1%}",
              None, why),
        Claim(a, "cell-27", "request turns in the interview", shares["turns"][0], "turns leave the documents {:.1%}",
              None, why),
        Claim(a, "cell-27", "the flat counter in the interview", shares["flat"][0], "flat prices {:.1%}", None, why),
        Claim(a, "cell-27", "the context counter in the interview", shares["context"][0], "context prices {:.1%}",
              None, why),
    ]
