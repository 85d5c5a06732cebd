"""servelab.simulator.fair: the token-fair scheduler and the priority policy with a KV quota, in the step loop.

Two tenants queued at once: first come first served in alternation gives the long-document tenant its documents'
share of the GPU (request_fair_shares), the counter brings it near half; a tenant that idled is lifted, not
handed the GPU. Priority classes: the batch class held at its quota, the victim of a preemption the lowest class and
latest arrival (vLLM's key), and ServingState.preempt taking a sequence from the middle of `running`.
"""

from __future__ import annotations

import numpy as np
import pytest

from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B
from servelab.analytic.fairness import ContextWeights, TokenWeights, request_fair_shares, token_weights
from servelab.simulator import MixedBudget, Priority, Requests, ServingState, TokenFair, Traced, simulate
from servelab.simulator.fair import measured_service, tenant_service

W = token_weights(LLAMA3_8B, H100_SXM, 2000, 64, 2000)


def _two_tenants(n=40, doc=20000):
    tenant = np.array([0, 1] * n)
    return tenant, Requests(np.zeros(2 * n), np.array([doc, 300] * n), np.array([100, 100] * n))


def _docs_share(policy, tenant, reqs):
    traced = Traced(policy)
    simulate(reqs, traced, LLAMA3_8B, H100_SXM)
    served = tenant_service(traced.steps, tenant, W)
    last_chat = int(np.flatnonzero(tenant == 1)[-1])
    k = next(k for k, step in enumerate(traced.steps) if any(i == last_chat for i, _ in step))
    return served[k, 0] / served[k].sum()


def test_request_turns_give_the_documents_their_share_and_the_counter_evens_it():
    tenant, reqs = _two_tenants()
    turns = _docs_share(MixedBudget(max_num_batched_tokens=2048, max_num_seqs=16), tenant, reqs)
    assert turns == pytest.approx(request_fair_shares({"d": (20000, 100), "c": (300, 100)}, W)["d"], abs=0.03)
    fair = _docs_share(TokenFair(tenant, W, max_num_batched_tokens=2048, max_num_seqs=16), tenant, reqs)
    assert fair < 0.7 < turns


def test_the_lift_rule_stops_a_returning_tenant_from_taking_the_gpu():
    n_doc, n_chat, back = 60, 100, 5.0
    tenant = np.concatenate([np.zeros(n_doc, int), np.ones(n_chat, int)])
    reqs = Requests(np.concatenate([np.zeros(n_doc), np.full(n_chat, back)]),
                    np.concatenate([np.full(n_doc, 8000), np.full(n_chat, 300)]), np.full(n_doc + n_chat, 200))

    def docs_share_after_return(lift):
        policy = TokenFair(tenant, W, max_num_batched_tokens=2048, max_num_seqs=64, lift=lift)
        traced = Traced(policy)
        res = simulate(reqs, traced, LLAMA3_8B, H100_SXM)
        served = tenant_service(traced.steps, tenant, W)
        ends = np.cumsum(res.step_duration_s)
        i0, i1 = np.searchsorted(ends, back), np.searchsorted(ends, back + 3)
        window = served[i1] - served[i0]
        return window[0] / window.sum(), policy.counters[1]
    lifted, lifted_chat = docs_share_after_return(True)
    banked, banked_chat = docs_share_after_return(False)
    # without the lift the chat tenant starts at 0 against the documents' seconds of service and takes the grants
    assert banked < lifted - 0.05 and banked_chat < lifted_chat
    assert lifted == pytest.approx(0.5, abs=0.1)


def test_priority_holds_the_batch_class_at_its_quota_and_admits_chats_first():
    n_batch, n_chat = 8, 8
    klass = np.array([1] * n_batch + [0] * n_chat)
    reqs = Requests(np.zeros(16), np.array([4000] * n_batch + [500] * n_chat), np.full(16, 20))
    policy = Traced(Priority(klass, batch_kv_quota=2 * 4000, max_num_batched_tokens=8192))
    simulate(reqs, policy, LLAMA3_8B, H100_SXM)
    assert set(range(n_batch, 16)) <= {i for i, _ in policy.steps[0]}          # every chat in the first step
    assert max(len({i for i, _ in step} & set(range(n_batch))) for step in policy.steps) == 2   # at its quota
    res = simulate(reqs, Priority(klass, None), LLAMA3_8B, H100_SXM)
    assert bool((res.generated == 20).all())


def test_the_victim_is_the_lowest_class_latest_arrival_and_preempt_takes_it_from_the_middle():
    pol = Priority(np.array([0, 1, 1, 0]))
    state = ServingState(np.array([10, 10, 10, 10]), np.array([5, 5, 5, 5]), kv_capacity=100)
    for i in range(4):
        state.admit(i)
    state.running = np.arange(4)
    assert pol._victim(state) == 2 and pol._victim(state, below=1) is None
    state.preempt(2)
    assert state.running.tolist() == [0, 1, 3] and state.waiting[0] == 2 and state.kv_free == 70
    with pytest.raises(ValueError, match="not running"):
        state.preempt(2)


def test_defaults_and_bad_parameters():
    with pytest.raises(ValueError, match="quantum"):
        TokenFair([0], W, quantum=0)
    with pytest.raises(ValueError, match="batch_kv_quota"):
        Priority([0], batch_kv_quota=-1)
    assert tenant_service([[(0, 4), (1, 1)]], [0, 1], TokenWeights(1.0, 8.0)).tolist() == [[4.0, 8.0]]


def test_traced_contexts_and_measured_service_split_each_step_by_its_binding_resource():
    traced = Traced(MixedBudget(max_num_batched_tokens=8))
    res = simulate(Requests([0, 0, 0], [6, 5, 3], [4, 4, 4]), traced, LLAMA3_8B, H100_SXM)
    assert traced.contexts[:3] == [[0, 0], [6, 2, 0], [7, 5, 3]]   # tokens computed before each step
    used = measured_service(traced.steps, traced.contexts, res.step_duration_s, [0, 1, 2], LLAMA3_8B, H100_SXM)
    assert np.isclose(used[-1].sum(), res.step_duration_s.sum())    # every second goes to someone
    # step 0 is memory-bound: the weights' read split by tokens (6 and 2), the KV each writes on top
    kv = LLAMA3_8B.kv_bytes_per_token
    b0, b1 = LLAMA3_8B.weight_bytes * 6 / 8 + kv * 6, LLAMA3_8B.weight_bytes * 2 / 8 + kv * 2
    assert np.isclose(used[0, 0] / used[0, 1], b0 / b1)
    # a compute-bound step (a 4,000-token chunk beside a decode): split by FLOPs
    step = [(0, 4000), (1, 1)]
    got = measured_service([step], [[0, 500]], [0.1], [0, 1], LLAMA3_8B, H100_SXM)[0]
    m = LLAMA3_8B
    flops = [2.0 * m.matmul_params * n + 2.0 * m.vocab_size * m.hidden_size
             + 4.0 * m.num_layers * m.num_heads * m.head_dim * (n * c + n * (n + 1) / 2)
             for n, c in ((4000, 0), (1, 500))]
    assert np.isclose(got[0] / got[1], flops[0] / flops[1])


def test_context_prices_charge_a_long_documents_tokens_more_and_even_the_measured_share():
    flat = token_weights(LLAMA3_8B, H100_SXM, prompt_len=2000, batch=64, context_len=2000)
    priced = ContextWeights(LLAMA3_8B, H100_SXM, batch=64)
    assert np.isclose(priced.cost(0, 1, 2000), flat.decode_s, rtol=1e-3)          # the flat prices' own context
    assert priced.cost(0, 1, 50_000) > 10 * flat.decode_s                          # a document's KV read
    assert priced.cost(100, 0, 50_000) > priced.cost(100, 0, 0)                    # attention over the prefix
    tenant = np.array([0, 1] * 30)
    reqs = Requests(np.zeros(60), np.array([30_000, 300] * 30), np.array([100, 100] * 30))
    share = {}
    for label, weights in (("flat", flat), ("priced", priced)):
        traced = Traced(TokenFair(tenant, weights, max_num_batched_tokens=2048, max_num_seqs=32))
        res = simulate(reqs, traced, LLAMA3_8B, H100_SXM)
        used = measured_service(traced.steps, traced.contexts, res.step_duration_s, tenant, LLAMA3_8B, H100_SXM)
        k = next(k for k, step in enumerate(traced.steps) if any(i == 59 for i, _ in step))
        share[label] = used[k - 1, 0] / used[k - 1].sum()
    assert 0.5 < share["priced"] < share["flat"]
