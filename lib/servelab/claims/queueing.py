"""Chapter 12's numbers: utilization limits, drains, retries."""

from __future__ import annotations

import math

import numpy as np

from servelab.analytic import costmodel, queueing
from servelab.analytic.costmodel import DEFAULT_STEP_OVERHEAD_S, H100_SXM, LLAMA3_8B
from servelab.analytic.serving import ServingPoint
from servelab.claims.core import Claim


def _prefill_s(tokens: int) -> float:
    return costmodel.step_cost(LLAMA3_8B, H100_SXM, prefill_tokens=int(tokens)).seconds(DEFAULT_STEP_OVERHEAD_S)


def ch12() -> list[Claim]:
    """The utilization limits of chapter 12's opening: a prefill server whose one-prompt steps take 100 ms (the step
    is the point), with equal prompts and with log-normal ones, through the prefill times' cv2."""
    from servelab.simulator import lognormal_lengths

    a = "ch12_queueing_and_overload"
    prompt = min(range(1024, 16385, 16), key=lambda p: abs(_prefill_s(p) - 0.1))
    step = ServingPoint(LLAMA3_8B, H100_SXM, prefill_chunks=(prompt,))

    def times_cv2(sigma: float) -> float:
        lengths = lognormal_lengths(1500, prompt * math.exp(-sigma ** 2 / 2), sigma, seed=2, high=8 * prompt)
        times = np.array([_prefill_s(x) for x in lengths])
        return float(times.var() / times.mean() ** 2)

    def lengths_cv2(sigma: float) -> float:
        lengths = lognormal_lengths(1500, prompt * math.exp(-sigma ** 2 / 2), sigma, seed=2, high=8 * prompt)
        return float(np.var(lengths) / np.mean(lengths) ** 2)

    equal = queueing.utilization_limit(0.8, 0.1, 0.0)
    # a target on the mean: the largest rho whose M/D/1 mean wait rho s / (2 (1 - rho)) leaves 800 ms - s
    mean_target = 2 * (0.8 - 0.1) / (0.1 + 2 * (0.8 - 0.1))
    mean_wait = queueing.mg1_mean_wait(equal, 0.1)
    s08, s06 = (queueing.utilization_limit(0.8, 0.1, times_cv2(s)) for s in (0.8, 0.6))
    return [
        Claim(a, "cell-03", "p99 800 ms over 100 ms prefills, equal prompts", equal * 100, "{:.0f}% utilization", step),
        Claim(a, "cell-03", "the same, log-normal prompts at sigma 0.8", s08 * 100, "**{:.0f}%**", step),
        Claim(a, "cell-03", "the same, log-normal prompts at sigma 0.6", s06 * 100, "it is {:.0f}%", step),
        Claim(a, "cell-05", "the limit at sigma 0.8 in the walkthrough", s08, "{:.3f} at σ = 0.8", step),
        Claim(a, "cell-29", "the interview answer's equal prompts", equal * 100, "equal prompts allow {:.0f}%", step),
        Claim(a, "cell-29", "the interview answer's log-normal prompts", s08 * 100, "allow {:.0f}%.", step),
        Claim(a, "cell-29", "the prefill times' cv2 at sigma 0.8", times_cv2(0.8),
              "give prefill times with cv² = {:.2f}", step),
        Claim(a, "cell-29", "the lengths' cv2 at sigma 0.8", lengths_cv2(0.8), "more than the lengths' {:.2f}", step),
        Claim(a, "cell-29", "requests a one-minute spike at twice capacity leaves", (20 - 10) * 60.0,
              "capacity of 10 a second leaves {:.0f}\nrequests queued", None, "a queue length, not a step"),
        Claim(a, "cell-29", "seconds they take to drain", queueing.drain_time(20, 5, 10, 60), "still arriving, {:.0f} "
              "seconds", None, "a drain time, not a step"),
        Claim(a, "cell-29", "answers that go to clients who left", queueing.dead_requests(20, 5, 10, 60, 30),
              "client timeout, {:.0f} of those", None, "a count of requests, not a step"),
        Claim(a, "cell-29", "the p99 wait over the mean wait at the 70% limit",
              queueing.wait_quantile(0.99, equal, mean_wait) / mean_wait, "the p99 wait is {:.1f} times the mean",
              step),
        Claim(a, "cell-29", "the utilization a mean-TTFT target of 800 ms allows", mean_target * 100,
              "would allow {:.0f}% utilization", None, "a utilization of the queue, not a step"),
        Claim(a, "cell-29", "the p99 TTFT there", queueing.ttft_quantile(0.99, mean_target, 0.1),
              "the p99 TTFT is {:.1f} s", None, "a queueing delay, not a step"),
        *_ch12_drills(a),
    ]


def _ch12_drills(a: str) -> list[Claim]:
    """The drills' answers as the solution's drills cell prints them: queueing numbers, no single step."""
    why = "a queueing number (a utilization, a drain time, a count of requests), not a step"
    d4 = max((b for b in range(0, 30_001) if queueing.admit_by_deadline(b, 3000, 12_000, 2.0)), default=-1)
    return [
        Claim(a, "cell-30", "drill 1", queueing.utilization_limit(1.0, 0.15, math.exp(0.8 ** 2) - 1),
              "drill_1 = {:.3f},", None, why),
        Claim(a, "cell-30", "drill 2", queueing.drain_time(80, 25, 40, 60), "drill_2 = {:.1f} s", None, why),
        Claim(a, "cell-30", "drill 3", queueing.dead_requests(80, 25, 40, 60, 20), "drill_3 = {:,.0f} requests", None,
              why),
        Claim(a, "cell-30", "drill 4", d4, "drill_4 = {:,} tokens", None, why),
        Claim(a, "cell-30", "drill 5", sum(queueing.retry_delay(k, 0.25, 1.5) for k in range(5)), "drill_5 = {:.2f} s",
              None, why),
    ]
