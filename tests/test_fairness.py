"""servelab.analytic.fairness: token weights, the virtual token counter and its lift rule, the batch class's KV quota.

A small step loop serves two tenants one request at a time (the tenant picked by the counter), and the GPU time
each gets is checked: request-fair turn-taking gives the long-document tenant its documents' share, the counter
gives each tenant half, and the lift rule stops a tenant that idled from taking the GPU until it catches up.
"""

from __future__ import annotations

import doctest

import pytest

from servelab.analytic import costmodel, fairness
from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B
from servelab.analytic.fairness import (
    TokenWeights,
    VirtualTokenCounter,
    batch_kv_quota,
    request_fair_shares,
    token_weights,
)

W = TokenWeights(prefill_s=15e-6, decode_s=120e-6)
REQ = {"docs": (30_000, 200), "chat": (300, 200)}


def serve(pick, steps, arrivals_from=None):
    """Serve one whole request a step, of the tenant `pick(backlogged)` names; GPU seconds per tenant. A tenant in
    `arrivals_from` {tenant: step} has no work before that step."""
    vtc_time = {t: 0.0 for t in REQ}
    arrivals_from = arrivals_from or {}
    for step in range(steps):
        backlogged = {t for t in REQ if step >= arrivals_from.get(t, 0)}
        t = pick(backlogged, step)
        vtc_time[t] += W.cost(*REQ[t])
    return vtc_time


def test_request_fair_turns_give_the_long_documents_their_share_and_the_counter_evens_it():
    order = sorted(REQ)
    turns = serve(lambda backlogged, step: order[step % 2], 2000)
    total = sum(turns.values())
    assert turns["docs"] / total == pytest.approx(request_fair_shares(REQ, W)["docs"])
    vtc = VirtualTokenCounter(W)

    def by_counter(backlogged, step):
        t = vtc.pick(backlogged)
        vtc.charge(t, *REQ[t])
        return t
    fair = serve(by_counter, 4000)
    assert fair["docs"] / sum(fair.values()) == pytest.approx(0.5, abs=0.01)


def test_the_lift_rule_stops_an_idle_tenant_from_banking_credit():
    def run(lift: bool):
        vtc, served, active = VirtualTokenCounter(W), [], set()
        for step in range(3000):
            backlogged = {"docs"} | ({"chat"} if step >= 2000 else set())
            for t in backlogged - active:
                if lift:
                    vtc.activate(t, active)
            active = backlogged
            t = vtc.pick(backlogged)
            vtc.charge(t, *REQ[t])
            served.append(t)
        return served[2000:]
    # without the lift, chat's counter is still 0 after 2000 steps of docs alone: it takes every step until it
    # has spent docs' whole lead; with it, chat starts level and the two share the GPU from the first step
    assert run(lift=False)[:900].count("chat") == 900
    lifted = run(lift=True)[:900]
    chat_time = lifted.count("chat") * W.cost(*REQ["chat"])
    docs_time = lifted.count("docs") * W.cost(*REQ["docs"])
    assert chat_time / (chat_time + docs_time) == pytest.approx(0.5, abs=0.05)


def test_token_weights_are_the_capacity_module_prices():
    w = token_weights(LLAMA3_8B, H100_SXM, 2000, 128, 2000)
    step = costmodel.step_time(LLAMA3_8B, H100_SXM, decode_context_lens=[2000] * 128)
    assert w.decode_s == pytest.approx(step / 128) and w.decode_s > 5 * w.prefill_s


def test_the_batch_quota_is_the_most_kv_that_keeps_the_interactive_step_in_time_and_fits():
    def step(k, chats=64, chat_ctx=2000, ctx=8000):
        return costmodel.step_time(LLAMA3_8B, H100_SXM, decode_context_lens=[chat_ctx] * chats + [ctx] * k)

    cap = costmodel.kv_capacity_tokens(LLAMA3_8B, H100_SXM)
    # 30 ms beside 64 chats: time for 62 sequences of 8,000, room in the cache for 42: the cache binds
    q = batch_kv_quota(LLAMA3_8B, H100_SXM, 0.030, 64, 2000, 8000)
    n = q // 8000
    assert q % 8000 == 0 and n == (cap - 64 * 2000) // 8000 and step(n + 1) <= 0.030
    # 15 ms beside 40 chats: time for 9 sequences of 17,000, room for 22: the target binds
    q = batch_kv_quota(LLAMA3_8B, H100_SXM, 0.015, 40, 2100, 17000)
    n = q // 17000
    assert step(n, 40, 2100, 17000) <= 0.015 < step(n + 1, 40, 2100, 17000) and (n + 1) * 17000 + 40 * 2100 <= cap
    # chats that fill the cache leave the batch class nothing, however loose the target
    assert batch_kv_quota(LLAMA3_8B, H100_SXM, 10.0, 240, 2000, 8000) == 0
    q = batch_kv_quota(LLAMA3_8B, H100_SXM, 0.030, 64, 2000, 8000)
    assert batch_kv_quota(LLAMA3_8B, H100_SXM, 0.004, 64, 2000, 8000) == 0     # the chats alone miss 4 ms
    assert batch_kv_quota(LLAMA3_8B, H100_SXM, 0.030, 128, 2000, 8000) < q    # more chats leave less room


def test_bad_input_is_refused_and_the_examples_hold():
    with pytest.raises(ValueError, match="no backlogged"):
        VirtualTokenCounter(W).pick(set())
    with pytest.raises(ValueError, match="token counts"):
        VirtualTokenCounter(W).charge("a", -1)
    with pytest.raises(ValueError, match="tpot_target_s"):
        batch_kv_quota(LLAMA3_8B, H100_SXM, 0, 1, 1, 1)
    with pytest.raises(ValueError, match="no tenants"):
        request_fair_shares({}, W)
    assert doctest.testmod(fairness).failed == 0


def test_interactive_tpot_is_the_step_of_both_classes():
    both = fairness.interactive_tpot(LLAMA3_8B, H100_SXM, 64, 2000, 20, 16000)
    alone = fairness.interactive_tpot(LLAMA3_8B, H100_SXM, 64, 2000, 0, 0)
    step = costmodel.step_time(LLAMA3_8B, H100_SXM, decode_context_lens=[2000] * 64 + [16000] * 20)
    assert both == step and both > 2 * alone
    with pytest.raises(ValueError, match="batch_decodes"):
        fairness.interactive_tpot(LLAMA3_8B, H100_SXM, 1, 1, -1, 1)


def test_the_document_length_gives_its_share_back():
    L = fairness.document_len_for_share(0.96, (300, 200), 200, W)
    assert request_fair_shares({"docs": (L, 200), "chat": (300, 200)}, W)["docs"] == pytest.approx(0.96)
    assert fairness.document_len_for_share(0.5, (300, 200), 200, W) == pytest.approx(300)
    with pytest.raises(ValueError, match="share"):
        fairness.document_len_for_share(1.0, (300, 200), 200, W)


def test_next_tenant_charges_lifts_and_picks_without_changing_its_input():
    counters = {"A": 100.0, "B": 90.0, "C": 5.0}
    pick, new = fairness.next_tenant(counters, {"B": (20, 1)}, TokenWeights(1.0, 8.0), {"A", "B", "C"}, {"C"})
    assert (pick, new) == ("A", {"A": 100.0, "B": 118.0, "C": 100.0}) and counters["C"] == 5.0
    # nobody stayed backlogged: nothing to lift to, and a new tenant starts at 0
    assert fairness.next_tenant({"A": 3.0}, {}, W, {"A", "B"}, {"A", "B"}) == ("B", {"A": 3.0, "B": 0.0})
