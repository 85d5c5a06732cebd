"""servelab.simulator.clients: deadlines, abandonment, served-but-dead work and retries with backoff.

A burst far above what the engine prefills in a deadline: with abandon=True the late ones leave the queue and
nothing served waited past its deadline to be scheduled; with abandon=False every request is served and the late
ones are counted dead; refused requests come back after their backoff, synchronised without jitter and spread
with it. Without clients (or with an infinite deadline) every trace is the one the simulator made before.
"""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B
from servelab.simulator import (
    V1,
    BacklogAdmission,
    Backoff,
    Clients,
    MixedBudget,
    QueueCap,
    Requests,
    RetryAfter,
    burst_arrivals,
    clients,
    fixed_lengths,
    merge_requests,
    poisson_arrivals,
    simulate,
)

POLICY = MixedBudget(max_num_batched_tokens=8192)


def _burst(n=300, prompt=2000, output=16):
    return Requests(burst_arrivals(n, n, 1.0), fixed_lengths(n, prompt), fixed_lengths(n, output))


def _run(reqs, **kw):
    return simulate(reqs, POLICY, LLAMA3_8B, H100_SXM, **kw)


def test_the_doctests_hold():
    assert doctest.testmod(clients).failed == 0


def test_without_clients_or_with_patient_ones_the_trace_is_unchanged():
    reqs = Requests(poisson_arrivals(200, 40.0, seed=3), fixed_lengths(200, 1500), fixed_lengths(200, 32))
    base = _run(reqs)
    for c in (Clients(math.inf), Clients(math.inf, abandon=False, retry=Backoff(0.5, 4.0))):
        res = _run(reqs, clients=c)
        assert np.array_equal(res.token_step, base.token_step) and np.array_equal(res.step_end_s, base.step_end_s)
        assert not res.dead.any() and not res.abandoned.any() and res.dead_tokens == 0
    assert set(_run(reqs, clients=Clients(1e9)).summary()) - set(base.summary()) == {
        "abandoned", "retries", "dead", "dead_tokens"}
    assert not base.dead.any() and base.attempts.tolist() == [1] * 200


def test_abandoning_clients_leave_the_queue_and_nothing_served_started_late():
    reqs, deadline = _burst(), 2.0
    res = _run(reqs, clients=Clients(deadline))
    gone = res.abandoned
    assert 0 < gone.sum() < len(reqs) and not res.rejected.any()
    assert (res.generated[gone] == 0).all() and np.isnan(res.ttft[gone]).all()
    assert (res.queueing_delay[res.served] <= deadline).all()     # admitted at a step start before its deadline
    assert (res.generated[res.served] == 16).all()
    # the queue is FCFS: the ones that left are the last to arrive
    assert gone[-gone.sum():].all()


def test_clients_the_engine_never_hears_from_make_dead_work():
    reqs, deadline = _burst(), 2.0
    res = _run(reqs, clients=Clients(deadline, abandon=False))
    assert res.served.all() and not res.abandoned.any()
    dead = res.dead
    assert dead.sum() > 0 and (res.ttft[dead] > deadline).all() and (res.ttft[~dead] <= deadline).all()
    assert res.dead_tokens == int(dead.sum()) * (2000 + 16)
    # leaving takes the dead work away: the abandoning run is shorter, and serves nothing late
    left = _run(reqs, clients=Clients(deadline))
    assert left.dead.sum() == 0 or left.dead_tokens < res.dead_tokens
    assert left.duration_s < res.duration_s


def test_a_deadline_aware_rule_refuses_what_would_be_late():
    base = Requests(poisson_arrivals(300, 16.0, seed=1), fixed_lengths(300, 2000), fixed_lengths(300, 16))
    spike = Requests(poisson_arrivals(400, 66.0, seed=2, start_s=5.0), fixed_lengths(400, 2000), fixed_lengths(400, 16))
    reqs, _ = merge_requests(base, spike)
    deadline = 1.5
    all_in = _run(reqs, clients=Clients(deadline, abandon=False))
    rate = 2000 / (all_in.step_duration_s[all_in.step_tokens > 4000].mean() / (8192 / 2000) * 1.0)
    smart = _run(reqs, clients=Clients(deadline, abandon=False),
                 admission=BacklogAdmission(int(0.8 * rate * deadline)))
    assert all_in.dead.sum() > 50
    assert smart.rejected.sum() > 0 and smart.dead.sum() < all_in.dead.sum() / 5
    in_time = (lambda r: int((r.served & ~r.dead).sum()))
    assert in_time(smart) > in_time(all_in)


def test_refused_clients_retry_after_their_backoff_together_without_jitter():
    reqs = _burst(200, 1000, 8)
    cap = QueueCap(40)
    plain = _run(reqs, admission=cap, clients=Clients(60.0, retry=Backoff(0.5, 4.0, jitter=False, max_retries=3)))
    jitter = _run(reqs, admission=cap, clients=Clients(60.0, retry=Backoff(0.5, 4.0, jitter=True, max_retries=3)))
    for res in (plain, jitter):
        assert res.attempts.max() <= 4 and (res.attempts[res.rejected] == 4).all()
        assert res.retry_arrival_s.size == int(res.attempts.sum()) - len(reqs)
        assert np.all(np.diff(res.retry_arrival_s) >= 0)
    # every refused client of the burst comes back at the same instants: one per retry round
    assert len(np.unique(plain.retry_arrival_s)) <= 3 * 2
    assert len(np.unique(jitter.retry_arrival_s)) > 50
    assert jitter.rejected.sum() < plain.rejected.sum()
    no_retry = _run(reqs, admission=cap)
    assert no_retry.rejected.sum() == 160 and no_retry.attempts.max() == 1


class _Recorded(RetryAfter):
    """A RetryAfter whose calls and refusals are written down: (now, request id) and (now, id, Retry-After)."""

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "calls", [])
        object.__setattr__(self, "refusals", [])

    def __call__(self, state, i):
        self.calls.append((state.now, i))
        return super().__call__(state, i)

    def seconds(self, state, rng):
        s = super().seconds(state, rng)
        self.refusals.append((state.now, self.calls[-1][1], s))
        return s


def _storm(header, backoff=None, honour=True):
    reqs = _burst(200, 1000, 8)
    backoff = backoff or Backoff(0.5, 4.0, jitter=False, max_retries=3)
    return _run(reqs, admission=header, clients=Clients(60.0, retry=backoff, honour_retry_after=honour))


def test_a_retry_after_that_never_binds_or_is_not_honoured_leaves_the_clients_as_they_were():
    backoff = Backoff(1.0, 4.0, jitter=False, max_retries=3)            # every backoff >= the 1 s minimum
    plain = _storm(QueueCap(40), backoff, honour=False)
    for header, honour in ((RetryAfter(QueueCap(40), 10**9, 60_000.0), True),        # drains at once: 1 s
                           (RetryAfter(QueueCap(40), 0, 60_000.0, jitter_s=9.0), False),
                           (QueueCap(40), True)):                                       # no header at all
        res = _storm(header, backoff, honour)
        assert np.array_equal(res.retry_arrival_s, plain.retry_arrival_s)
        assert np.array_equal(res.step_end_s, plain.step_end_s) and np.array_equal(res.attempts, plain.attempts)


def test_retries_never_come_before_their_retry_after_and_without_jitter_they_come_together():
    for jitter in (0.0, 3.0):
        rec = _Recorded(QueueCap(40), 39_000, 60_000.0, jitter_s=jitter, seed=2)
        res = _storm(rec)
        assert rec.refusals and len(rec.refusals) == res.retry_arrival_s.size
        seen = {}
        for t, i in rec.calls:
            seen.setdefault(i, []).append(t)
        for t, i, s in rec.refusals:
            assert isinstance(s, int) and s >= 1
            later = [u for u in seen[i] if u > t]
            assert later and later[0] >= t + s                              # the next attempt of i
        first = [(i, s) for t, i, s in rec.refusals if t == 0.0]            # refused together at the burst
        assert len(first) == 160
        if jitter == 0:
            assert {s for _, s in first} == {1}
            assert np.count_nonzero(res.retry_arrival_s == 1.0) == 160      # all of them at the same instant
        else:
            assert len({s for _, s in first}) == 4                          # spread over whole seconds 1..4
            assert np.count_nonzero(res.retry_arrival_s == 1.0) < 80


def test_bad_parameters_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="deadline_s"):
        Clients(0.0)
    with pytest.raises(ValueError, match="max_retries"):
        Backoff(0.5, 4.0, max_retries=-1)
    with pytest.raises(ValueError, match="base_s"):
        Backoff(float("nan"), 4.0)
    with pytest.raises(ValueError, match="retry must be"):
        Clients(1.0, retry=(0.5, 4.0))
    with pytest.raises(ValueError, match="clients must be"):
        _run(_burst(4), clients=2.0)
    with pytest.raises(ValueError, match="V1 keeps its own waiting queue"):
        simulate(_burst(4), V1(max_num_batched_tokens=8192), LLAMA3_8B, H100_SXM, clients=Clients(1.0))
    with pytest.raises(ValueError, match="max_waiting"):
        QueueCap(-1)
    with pytest.raises(ValueError, match="honour_retry_after"):
        Clients(1.0, honour_retry_after=1)
    with pytest.raises(ValueError, match="prefill_tokens_per_s"):
        RetryAfter(QueueCap(4), 100, 0.0)
    with pytest.raises(ValueError, match="jitter_s"):
        RetryAfter(QueueCap(4), 100, 1.0, jitter_s=-1.0)
    with pytest.raises(ValueError, match="admit_line_tokens"):
        RetryAfter(QueueCap(4), -1, 1.0)
