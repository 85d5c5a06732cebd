"""Chapter 12's numbers: utilization limits, drains, retries, the storm under four ways of refusing."""

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
        *_ch12_storm(a),
        *_ch12_drills(a),
    ]


_STORM_NAMES = ("client backoff, no jitter", "client backoff, full jitter", "Retry-After, no jitter",
                "Retry-After + server jitter")


def storm_rows() -> dict[str, tuple[int, int, int, float, int]]:
    """The retry storm of chapter 12 as its cell runs it: 400 prompts of 1,000 tokens at once into QueueCap(50),
    clients with Backoff(0.5, 8.0, 4 retries) and, in the last two rows, a Retry-After (the line of 49 queued
    prompts, the prefill rate measured on the storm accepted whole, the server's jitter over 5 s in the last).
    Per row: retries, refused for good, peak retries in 100 ms, completion time (s), dead tokens."""
    from servelab.simulator import Backoff, Clients, MixedBudget, QueueCap, Requests, RetryAfter, simulate
    from servelab.simulator.arrivals import burst_arrivals, fixed_lengths

    storm = Requests(burst_arrivals(400, 400, 1.0), fixed_lengths(400, 1000), fixed_lengths(400, 8))
    engine = MixedBudget(max_num_batched_tokens=8192)
    rate = 400 * 1000 / simulate(storm, engine, LLAMA3_8B, H100_SXM).duration_s
    plain, spread = (Backoff(0.5, 8.0, jitter=j, max_retries=4, seed=1) for j in (False, True))
    rules = ((QueueCap(50), plain, False), (QueueCap(50), spread, False),
             (RetryAfter(QueueCap(50), 49_000, rate), plain, True),
             (RetryAfter(QueueCap(50), 49_000, rate, jitter_s=5.0, seed=1), plain, True))
    out = {}
    for name, (rule, backoff, honour) in zip(_STORM_NAMES, rules):
        res = simulate(storm, engine, LLAMA3_8B, H100_SXM, admission=rule,
                       clients=Clients(30.0, retry=backoff, honour_retry_after=honour))
        peak = int(np.histogram(res.retry_arrival_s, bins=np.arange(0.0, 30.0, 0.1))[0].max())
        out[name] = (int(res.attempts.sum()) - 400, int(res.rejected.sum()), peak, res.duration_s, res.dead_tokens)
    return out


def _ch12_storm(a: str) -> list[Claim]:
    """The storm's table (cell-27 prints it, each row's figures at their widths) and the sentences after it."""
    why = "a count of attempts or a time of the whole storm, not a step"
    rows = storm_rows()
    out = []
    for name, (retries, refused, peak, done, dead) in rows.items():
        out += [Claim(a, "cell-27", f"{name}: retries", retries, f"{name:<29}{{:>8}}", None, why),
                Claim(a, "cell-27", f"{name}: refused for good", refused, f"{{:>18}}{peak:>24}", None, why),
                Claim(a, "cell-27", f"{name}: peak retries in 100 ms", peak, f"{{:>24}}{done:>8.1f} s", None, why),
                Claim(a, "cell-27", f"{name}: done at", done, f"{{:>8.1f}} s{dead:>13,}", None, why),
                Claim(a, "cell-27", f"{name}: dead tokens", dead, "s{:>13,}", None, why)]
    _, fj, header, jittered = (rows[n] for n in _STORM_NAMES)
    dead = sum(r[4] for r in rows.values())
    return out + [
        Claim(a, "cell-35", "retries back in the same 100 ms, header without jitter", header[2],
              "the {} clients refused at once", None, why),
        Claim(a, "cell-35", "refused for good, header without jitter", header[1], "and {} are refused for good", None,
              why),
        Claim(a, "cell-35", "retries, header with the server's jitter", jittered[0], "({:,} against", None, why),
        Claim(a, "cell-35", "retries, client full jitter", fj[0], "against {:,})", None, why),
        Claim(a, "cell-35", "refused for good, client full jitter", fj[1], "(full jitter: {})", None, why),
        Claim(a, "cell-35", "completion, header with the server's jitter", jittered[3], "ends at {:.1f} s", None, why),
        Claim(a, "cell-35", "completion, client full jitter", fj[3], "instead\nof {:.1f} s", None, why),
        Claim(a, "cell-35", "peak retries in 100 ms, header with jitter", jittered[2], "({} retries in the busiest",
              None, why),
        Claim(a, "cell-35", "peak retries in 100 ms, client full jitter", fj[2], "jitter's {})", None, why),
        # "no row serves a dead token" while none does; the cell states the count otherwise
        Claim(a, "cell-35", "dead tokens over the four rows", dead, "no row serves a dead token" if dead == 0 else
              "{:,} dead tokens", None, why),
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
        Claim(a, "cell-30", "drill 6", queueing.retry_after(90_000, 30_000, 16_000), "drill_6 = {} s",
              None, why),
    ]
