"""What a simulation returns: per-request token times and per-step records, and the metrics read off them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servelab.simulator.arrivals import Requests


def percentiles(values, qs=(50, 90, 99)) -> dict[int, float]:
    """{q: q-th percentile}, ignoring NaNs (TPOT is NaN for single-token outputs)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {q: float("nan") for q in qs}
    return {q: float(v) for q, v in zip(qs, np.percentile(values, qs))}


@dataclass(frozen=True)
class SimResult:
    """What happened. Per-request arrays are indexed like the `Requests`; per-step arrays by step number.

    Token k of request i (k = 0 .. output_len[i]-1) was emitted at the end of step
    `token_step[token_offset[i] + k]`, i.e. at `step_end_s[...]`. A request rejected by admission control
    (`rejected[i]`) emitted nothing: its token steps are -1 and its latencies NaN; so did one whose client left
    the queue at its deadline (`abandoned[i]`, with `simulate(..., clients=Clients(...))`).

    With clients (servelab.simulator.clients), `attempts[i]` is how many times request i was sent, and
    `attempt_arrival_s[i]` when its last attempt arrived; latencies stay measured from the first
    (`arrival_s`). `dead` marks the served requests whose first token came after their attempt's deadline.
    """

    policy: str
    kv_capacity: int
    requests: Requests
    generated: np.ndarray         # tokens each request generated, as counted by the simulator
    first_scheduled_s: np.ndarray
    preemptions: np.ndarray
    token_offset: np.ndarray
    token_step: np.ndarray
    step_start_s: np.ndarray
    step_end_s: np.ndarray
    step_tokens: np.ndarray       # tokens computed in the step (decodes + prefill chunks)
    step_seqs: np.ndarray         # sequences in the step
    step_decodes: np.ndarray      # sequences that computed exactly one token
    step_kv_used: np.ndarray      # KV slots reserved while the step ran
    rejected: np.ndarray | None = None   # per request: turned away on arrival by admission control
    # swap preemption (all zeros under recompute): per step, the seconds its swap copies added; per request,
    # swaps out, swaps back in, and preemptions recomputed because the host pool was full
    step_swap_s: np.ndarray | None = None
    swaps_out: np.ndarray | None = None
    swaps_in: np.ndarray | None = None
    swap_fallbacks: np.ndarray | None = None
    host_kv_capacity: int = 0            # host pool, tokens of KV (0: recompute)
    victim_tokens: np.ndarray | None = None   # each preemption in order: the tokens of KV its victim had
    wasted_slots: int = 0                # asynchronous scheduling: decodes computed for requests already done
    speculation: object = None           # speculative decoding: its counters (speculative.SpecStats), else None
    # clients with deadlines (servelab.simulator.clients); without them nobody leaves, retries or is late
    abandoned: np.ndarray | None = None  # per request: left the waiting queue at its deadline, never served
    attempts: np.ndarray | None = None   # per request: times it was sent (1 + its retries)
    attempt_arrival_s: np.ndarray | None = None   # per request: when its last attempt arrived
    deadline_s: float = float("inf")     # each attempt's first-token deadline
    retry_arrival_s: np.ndarray | None = None     # when each retry arrived, in order (none without clients)

    def __post_init__(self):
        if self.rejected is None:
            object.__setattr__(self, "rejected", np.zeros(len(self.requests), dtype=bool))
        if self.step_swap_s is None:
            object.__setattr__(self, "step_swap_s", np.zeros(self.step_end_s.size))
        if self.abandoned is None:
            object.__setattr__(self, "abandoned", np.zeros(len(self.requests), dtype=bool))
        if self.attempts is None:
            object.__setattr__(self, "attempts", np.ones(len(self.requests), dtype=np.int64))
        if self.attempt_arrival_s is None:
            object.__setattr__(self, "attempt_arrival_s", self.requests.arrival_s)
        if self.retry_arrival_s is None:
            object.__setattr__(self, "retry_arrival_s", np.empty(0))
        if self.victim_tokens is None:
            object.__setattr__(self, "victim_tokens", np.zeros(int(self.preemptions.sum()), dtype=np.int64))
        for name in ("swaps_out", "swaps_in", "swap_fallbacks"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, np.zeros(len(self.requests), dtype=np.int64))

    @property
    def swap_s(self) -> float:
        """Seconds of the run's steps spent copying KV to and from the host (0 under recompute)."""
        return float(self.step_swap_s.sum())

    # ---- per request ----
    @property
    def arrival_s(self) -> np.ndarray:
        return self.requests.arrival_s

    @property
    def served(self) -> np.ndarray:
        """Requests that were admitted and computed (all of them without admission control or clients)."""
        return ~(self.rejected | self.abandoned)

    @property
    def dead(self) -> np.ndarray:
        """Served-but-dead: requests computed whose first token came after their attempt's deadline, so their
        client had given up (none without clients)."""
        with np.errstate(invalid="ignore"):
            return self.served & (self.first_token_s - self.attempt_arrival_s > self.deadline_s)

    @property
    def dead_tokens(self) -> int:
        """Tokens computed for nobody: the prompt and output tokens of the served-but-dead requests."""
        dead = self.dead
        return int(self.requests.prompt_len[dead].sum() + self.generated[dead].sum())

    def _times(self, token_index=None) -> np.ndarray:
        """Emission times of the given token slots (default: all of them); NaN for a rejected request's."""
        steps = self.token_step if token_index is None else self.token_step[token_index]
        if not self.step_end_s.size:
            return np.full(np.shape(steps), np.nan)
        times = self.step_end_s[steps]
        return np.where(steps >= 0, times, np.nan) if not self.served.all() else times

    def token_times(self, i: int) -> np.ndarray:
        start = self.token_offset[i]
        return self._times(np.arange(start, start + self.requests.output_len[i]))

    def gaps(self, i: int) -> np.ndarray:
        """Request i's inter-token gaps (seconds), output_len - 1 of them (NaN if it was rejected)."""
        return np.diff(self.token_times(i))

    @property
    def first_token_s(self) -> np.ndarray:
        return self._times(self.token_offset)

    @property
    def finish_s(self) -> np.ndarray:
        return self._times(self.token_offset + self.requests.output_len - 1)

    @property
    def ttft(self) -> np.ndarray:
        return self.first_token_s - self.arrival_s

    @property
    def tpot(self) -> np.ndarray:
        """Mean time per output token after the first: (finish - first token) / (output_len - 1); NaN when
        a request generates a single token (or was rejected)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.requests.output_len > 1,
                            (self.finish_s - self.first_token_s) / (self.requests.output_len - 1), np.nan)

    @property
    def queueing_delay(self) -> np.ndarray:
        """Arrival until the start of the first step that computed any of the request's tokens."""
        return self.first_scheduled_s - self.arrival_s

    def _gaps_all(self) -> tuple[np.ndarray, np.ndarray]:
        """(gap, keep): np.diff over every token slot, and which entries are true inter-token gaps of a
        served request (not the jump from one request's last token to the next one's first)."""
        gaps = np.diff(self._times())
        keep = np.ones(gaps.size, dtype=bool)
        keep[self.token_offset[1:] - 1] = False        # the step from one request's last token to the next's first
        if not self.served.all():
            keep &= ~np.isnan(gaps)
        return gaps, keep

    def inter_token_gaps(self) -> np.ndarray:
        """Every inter-token gap of every served request, concatenated (request 0's first). Memory: 8 bytes
        per generated token."""
        gaps, keep = self._gaps_all()
        return gaps[keep]

    def gap_timeline(self, ids=None) -> tuple[np.ndarray, np.ndarray]:
        """(emitted_s, gap_s): for every inter-token gap of the given requests (default: all served ones),
        when the later token came out and how long after the one before it. For plotting gaps over time."""
        ids = np.flatnonzero(self.served) if ids is None else np.asarray(ids, dtype=np.int64).ravel()
        times, gaps = [], []
        for i in ids:
            t = self.token_times(int(i))
            if t.size > 1 and not np.isnan(t[0]):
                times.append(t[1:])
                gaps.append(np.diff(t))
        if not times:
            return np.empty(0), np.empty(0)
        return np.concatenate(times), np.concatenate(gaps)

    @property
    def max_gap(self) -> np.ndarray:
        """Each request's longest inter-token gap (NaN for single-token outputs and rejected requests)."""
        out = np.full(len(self.requests), np.nan)
        multi = (self.requests.output_len > 1) & self.served
        if multi.any():
            gaps, keep = self._gaps_all()
            gaps[~keep] = -np.inf                       # between requests: never a maximum
            out[multi] = np.maximum.reduceat(gaps, self.token_offset[multi])
        return out

    @property
    def step_duration_s(self) -> np.ndarray:
        return self.step_end_s - self.step_start_s

    # ---- aggregate ----
    @property
    def duration_s(self) -> float:
        """First arrival to last token."""
        return float(np.nanmax(self.finish_s) - self.arrival_s.min()) if self.served.any() else float("nan")

    def throughput(self) -> float:
        """Output tokens per second over `duration_s`."""
        return float(self.requests.output_len[self.served].sum() / self.duration_s)

    def slo_met(self, ttft_s: float, tpot_s: float) -> np.ndarray:
        """Which requests met both targets (a single-token request has no TPOT to miss; a rejected one
        met nothing)."""
        tpot = self.tpot
        return self.served & (self.ttft <= ttft_s) & ((tpot <= tpot_s) | np.isnan(tpot))

    def goodput(self, ttft_s: float, tpot_s: float) -> float:
        """Requests per second that met both the TTFT and the TPOT target."""
        return float(self.slo_met(ttft_s, tpot_s).sum() / self.duration_s)

    def goodput_tokens(self, ttft_s: float, tpot_s: float) -> float:
        """Output tokens per second of the requests that met both targets: the throughput users feel."""
        return float(self.requests.output_len[self.slo_met(ttft_s, tpot_s)].sum() / self.duration_s)

    def summary(self, ttft_s: float | None = None, tpot_s: float | None = None) -> dict[str, float]:
        out = {"requests": len(self.requests), "steps": self.step_end_s.size, "duration_s": self.duration_s,
               "throughput_tok_s": self.throughput(), "requests_per_s": len(self.requests) / self.duration_s,
               "preemptions": int(self.preemptions.sum()), "rejected": int(self.rejected.sum())}
        if self.deadline_s != float("inf"):             # clients only: the summary without them is unchanged
            out["abandoned"] = int(self.abandoned.sum())
            out["retries"] = int(self.attempts.sum() - len(self.requests))
            out["dead"] = int(self.dead.sum())
            out["dead_tokens"] = self.dead_tokens
        for metric in ("ttft", "tpot", "queueing_delay"):
            for q, v in percentiles(getattr(self, metric)).items():
                out[f"{metric}_p{q}_s"] = v
        out["max_gap_s"] = float(np.nanmax(self.max_gap)) if np.any(~np.isnan(self.max_gap)) else float("nan")
        if self.host_kv_capacity:                       # swap preemption only: recompute's summary is unchanged
            out["swaps"] = int(self.swaps_out.sum())
            out["swap_fallbacks"] = int(self.swap_fallbacks.sum())
            out["swap_s"] = self.swap_s
        if ttft_s is not None and tpot_s is not None:
            out["goodput_req_s"] = self.goodput(ttft_s, tpot_s)
            out["slo_attainment"] = float(self.slo_met(ttft_s, tpot_s).mean())
        return out
