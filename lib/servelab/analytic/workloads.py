"""Seeded synthetic workloads: output lengths and arrival steps.

Every generator takes a ``seed`` and uses its own ``random.Random(seed)``, so the same call returns the
same list on every machine and never touches global random state.

Length distributions (all lengths are integers >= 1; parameters and defaults):

=============  ===============================================  ==============================================
``dist``       parameters (defaults)                            a request generates
=============  ===============================================  ==============================================
``constant``   ``length=100``                                   exactly ``length`` tokens
``uniform``    ``lo=1, hi=200``                                 ``lo..hi`` tokens, equally likely
``geometric``  ``mean=100, max_len=None``                       stops after each token with prob ``1/mean``
``lognormal``  ``mu=log(100), sigma=1.0, max_len=2048``         ``round(exp(N(mu, sigma^2)))``, clipped
``bimodal``    ``short=50, long=1000, p_long=0.1``              ``long`` with prob ``p_long``, else ``short``
=============  ===============================================  ==============================================

:func:`length_pmf` gives the exact pmf of each (``pmf[k - 1] = P(L = k)``), the input of
:func:`servelab.analytic.batching.expected_max`.
"""

from __future__ import annotations

import math
import numbers
import random

from servelab.analytic.batching import constant_pmf, geometric_pmf, uniform_pmf

__all__ = ["DISTRIBUTIONS", "engine_requests", "length_pmf", "output_lengths", "poisson_arrivals"]

DISTRIBUTIONS: dict[str, dict] = {
    "constant": {"length": 100},
    "uniform": {"lo": 1, "hi": 200},
    "geometric": {"mean": 100, "max_len": None},
    "lognormal": {"mu": math.log(100), "sigma": 1.0, "max_len": 2048},
    "bimodal": {"short": 50, "long": 1000, "p_long": 0.1},
}


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def _params(dist: str, params: dict) -> dict:
    """Defaults for ``dist`` overridden by ``params``, checked."""
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"unknown dist {dist!r}; choose one of {', '.join(DISTRIBUTIONS)}")
    unknown = sorted(set(params) - set(DISTRIBUTIONS[dist]))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)} for dist {dist!r}; "
            f"it takes {', '.join(DISTRIBUTIONS[dist])}"
        )
    p = {**DISTRIBUTIONS[dist], **params}
    if dist == "constant" and not (_is_int(p["length"]) and p["length"] >= 1):
        raise ValueError(f"length must be an integer >= 1, got {p['length']!r}")
    if dist == "uniform" and not (_is_int(p["lo"]) and _is_int(p["hi"]) and 1 <= p["lo"] <= p["hi"]):
        raise ValueError(f"need integers 1 <= lo <= hi, got lo={p['lo']!r}, hi={p['hi']!r}")
    if dist == "geometric" and not (_is_real(p["mean"]) and p["mean"] >= 1):
        raise ValueError(f"mean must be a number >= 1, got {p['mean']!r}")
    if dist == "lognormal" and not (_is_real(p["mu"]) and _is_real(p["sigma"]) and p["sigma"] > 0):
        raise ValueError(f"need a finite mu and sigma > 0, got mu={p['mu']!r}, sigma={p['sigma']!r}")
    if dist in ("geometric", "lognormal") and p["max_len"] is not None:
        if not (_is_int(p["max_len"]) and p["max_len"] >= 1):
            raise ValueError(f"max_len must be an integer >= 1 or None, got {p['max_len']!r}")
    if dist == "lognormal" and p["max_len"] is None:
        raise ValueError("lognormal needs a max_len (a max_tokens cap) so its pmf is finite")
    if dist == "bimodal":
        if not (_is_int(p["short"]) and _is_int(p["long"]) and 1 <= p["short"] and 1 <= p["long"]):
            raise ValueError(f"short and long must be integers >= 1, got {p['short']!r}, {p['long']!r}")
        if not (_is_real(p["p_long"]) and 0 <= p["p_long"] <= 1):
            raise ValueError(f"p_long must be a probability in [0, 1], got {p['p_long']!r}")
    return p


def output_lengths(n: int, dist: str, seed: int, **params) -> list[int]:
    """``n`` output lengths drawn from ``dist`` (see the module table) with ``random.Random(seed)``.

    >>> output_lengths(5, "uniform", seed=0, lo=1, hi=10)
    [7, 7, 1, 5, 9]
    >>> output_lengths(3, "constant", seed=0, length=4)
    [4, 4, 4]
    """
    if not _is_int(n) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    p = _params(dist, params)
    rng = random.Random(seed)
    if dist == "constant":
        return [p["length"]] * n
    if dist == "uniform":
        return [rng.randint(p["lo"], p["hi"]) for _ in range(n)]
    if dist == "geometric":
        q = 1.0 - 1.0 / p["mean"]
        cap = p["max_len"]
        out = []
        for _ in range(n):
            u = 1.0 - rng.random()  # in (0, 1]; P(L > k) = P(u <= q^k) = q^k
            L = 1 if q == 0.0 else 1 + math.floor(math.log(u) / math.log(q))
            out.append(L if cap is None else min(L, cap))
        return out
    if dist == "lognormal":
        return [
            min(p["max_len"], max(1, math.floor(rng.lognormvariate(p["mu"], p["sigma"]) + 0.5)))
            for _ in range(n)
        ]
    # bimodal
    return [p["long"] if rng.random() < p["p_long"] else p["short"] for _ in range(n)]


def length_pmf(dist: str, **params) -> list[float]:
    """The exact pmf of :func:`output_lengths` for the same ``dist`` and parameters: ``pmf[k - 1]`` is the
    probability of length ``k``.

    >>> length_pmf("bimodal", short=1, long=3, p_long=0.25)
    [0.75, 0.0, 0.25]
    """
    p = _params(dist, params)
    if dist == "constant":
        return constant_pmf(p["length"])
    if dist == "uniform":
        return uniform_pmf(p["lo"], p["hi"])
    if dist == "geometric":
        return geometric_pmf(p["mean"], max_len=p["max_len"])
    if dist == "lognormal":
        mu, sigma, cap = p["mu"], p["sigma"], p["max_len"]

        def cdf(x: float) -> float:  # P(exp(N(mu, sigma^2)) < x)
            return 0.5 * (1.0 + math.erf((math.log(x) - mu) / (sigma * math.sqrt(2.0))))

        # rounding x to the nearest integer gives k for x in [k - 0.5, k + 0.5); 1 and cap collect the tails
        edges = [cdf(k + 0.5) for k in range(1, cap)]
        probs = [b - a for a, b in zip([0.0] + edges, edges)]
        probs.append(1.0 - (edges[-1] if edges else 0.0))
        return probs
    probs = [0.0] * max(p["short"], p["long"])
    probs[p["short"] - 1] += 1.0 - p["p_long"]
    probs[p["long"] - 1] += p["p_long"]
    return probs


def poisson_arrivals(n: int, rate: float, seed: int) -> list[int]:
    """Arrival steps of ``n`` requests from a Poisson process with ``rate`` requests per step: exponential
    gaps with mean ``1 / rate``, each arrival time rounded down to an integer step. Non-decreasing.

    >>> poisson_arrivals(5, rate=0.5, seed=0)
    [3, 6, 7, 8, 9]
    """
    if not _is_int(n) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    if not _is_real(rate) or rate <= 0:
        raise ValueError(f"rate must be a number > 0 (requests per step), got {rate!r}")
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(math.floor(t))
    return out


def engine_requests(n: int = 10, seed: int = 0, vocab: int = 128, system_len: int = 10,
                    max_arrival: int = 6, max_tokens: int = 10) -> list[tuple[int, list[int], int]]:
    """(arrival step, prompt token ids, tokens to generate) for ``n`` requests to a tiny engine: every other
    prompt starts with one shared ``system_len``-token system prompt (prefix-cache hits), the others end with its
    first three tokens (near misses); own parts of 1-14 tokens; arrivals at steps ``0..max_arrival``."""
    if n < 1 or vocab < 2 or system_len < 3 or max_arrival < 0 or max_tokens < 1:
        raise ValueError("n >= 1, vocab >= 2, system_len >= 3, max_arrival >= 0 and max_tokens >= 1")
    rng = random.Random(seed)
    system = [rng.randrange(vocab) for _ in range(system_len)]
    out = []
    for i in range(n):
        own = [rng.randrange(vocab) for _ in range(rng.randint(1, 14))]
        prompt = system + own if i % 2 == 0 else own + system[:3]
        out.append((rng.randint(0, max_arrival), prompt, rng.randint(1, max_tokens)))
    return out
