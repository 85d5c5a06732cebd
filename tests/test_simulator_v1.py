"""servelab.simulator.V1: vLLM V1's scheduler (servelab.schedulers.vllm_scheduler) driven from inside the simulator.

Hand-derived step tables from vLLM V1's rules, then the same steps from a `vllm_scheduler.Scheduler` driven
directly (so the simulator adds no rules of its own), Poisson workloads that preempt, the long-prefill threshold,
bad parameters, reuse across simulations; and scripts/bench_vllm_scheduler.py with the bench/results.md sections.
"""

import argparse
import datetime as dt
import doctest
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B
from servelab.engine import llm
from servelab.engine import v1 as v1_driver
from servelab.schedulers import vllm_scheduler as vs
from servelab.simulator import (
    V1,
    Requests,
    ServingState,
    Traced,
    lognormal_lengths,
    poisson_arrivals,
    simulate,
)
from servelab.simulator import v1 as v1_module
from servelab.simulator.v1 import SAMPLED_TOKEN, prompt_token_ids

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
THREE = Requests([0, 0, 0], [6, 5, 3], [4, 4, 4])


def _script(name):
    spec = importlib.util.spec_from_file_location(f"script_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def dummy_model(scheduler, output):
    """What V1 feeds its scheduler: the same token for every request whose scheduled range reaches its end."""
    return {rid: [SAMPLED_TOKEN] if output.samples(rid, scheduler.requests[rid].num_tokens) else []
            for rid in output.num_scheduled_tokens}


def traced_run(reqs, policy, kv):
    traced = Traced(policy)
    res = simulate(reqs, traced, LLAMA3_8B, H100_SXM, kv_capacity_tokens=kv)
    return traced.steps, res


def direct(reqs, policy: V1, kv, step_start_s):
    """The same requests through a vllm_scheduler.Scheduler driven by servelab.engine.v1.run: request i is added just
    before the first step that starts at or after its arrival, as the simulator's loop adds it."""
    sch = vs.Scheduler(block_size=policy.block_size, num_blocks=kv // policy.block_size + 1,
                       max_num_batched_tokens=policy.max_num_batched_tokens, max_num_seqs=policy.max_num_seqs,
                       long_prefill_token_threshold=policy.long_prefill_token_threshold,
                       enable_prefix_caching=policy.enable_prefix_caching, policy=policy.policy,
                       reserve_full_prompt=policy.reserve_full_prompt)
    joins = np.searchsorted(step_start_s, reqs.arrival_s, side="left")
    by_step, requests = {}, []
    for i, k in enumerate(joins.tolist()):
        r = vs.Request(i, prompt_token_ids(i, int(reqs.prompt_len[i])), int(reqs.output_len[i]), ignore_eos=True,
                       arrival_time=float(i))
        by_step.setdefault(k, []).append(r)
        requests.append(r)
    trace = v1_driver.run(sch, by_step, model=dummy_model)
    return [list(rec.output.num_scheduled_tokens.items()) for rec in trace], trace, requests


def test_the_module_doctests_pass():
    assert doctest.testmod(v1_module).failed == 0


# ---- (a) hand-derived step tables ----

# Budget 8, KV to spare. Step 0: nobody runs; admit 0 (6 tokens, 2 left), admit 1 chunked to 2 (0 left).
# Step 1: running first: 0 decodes (1), 1 gets its last 3 prompt tokens (4 left); admit 2 with 3 (1 left).
# Steps 2-3: three decodes; 0 has its 4 tokens after step 3 and leaves. Step 4: 1 and 2 decode their last.
AMPLE = [[(0, 6), (1, 2)], [(0, 1), (1, 3), (2, 3)], [(0, 1), (1, 1), (2, 1)], [(0, 1), (1, 1), (2, 1)],
         [(1, 1), (2, 1)]]
# Threshold 4 (3 requests, so it applies): step 0 admits 0 with 4 and 1 with 4 (budget gone). Step 1: 0 gets its
# last 2, 1 its last 1, then 2 is admitted with all 3 (under the threshold). Then everyone decodes together.
THRESHOLD_4 = [[(0, 4), (1, 4)], [(0, 2), (1, 1), (2, 3)]] + [[(0, 1), (1, 1), (2, 1)]] * 3
# Block size 4, a 12-token cache: 3 usable blocks. Step 0: admit 0 (6 tokens, 2 blocks, 1 free); 1 needs 2 blocks
# for its whole prompt: head-of-line, nobody else. Steps 1-3: 0 decodes alone (its 9th token takes the 3rd block)
# and finishes. Step 4: admit 1 (5 tokens, 2 blocks) and 2 (3 tokens, 1 block). Step 5: both decode (2 reaches 4
# tokens, still 1 block). Step 6: 2 needs a 2nd block, none is free: 2 is the last of running, so it preempts
# itself; 1 decodes, nobody is admitted. Step 7: 2 (5 tokens now) needs 2 blocks, 1 is free: 1 decodes alone and
# finishes. Step 8: 2 recomputes its 3 + 2 tokens. Step 9: its last token.
TIGHT = [[(0, 6)], [(0, 1)], [(0, 1)], [(0, 1)], [(1, 5), (2, 3)], [(1, 1), (2, 1)], [(1, 1)], [(1, 1)], [(2, 5)],
         [(2, 1)]]


@pytest.mark.parametrize("block_size", [1, 4])
def test_three_requests_step_table_running_first_then_admissions(block_size):
    policy = V1(max_num_batched_tokens=8, block_size=block_size)
    steps, res = traced_run(THREE, policy, 64)
    assert steps == AMPLE
    assert direct(THREE, policy, 64, res.step_start_s)[0] == steps
    assert res.generated.tolist() == [4, 4, 4] and res.preemptions.tolist() == [0, 0, 0]
    # KV in blocks: step 0 holds 0's 6 tokens and 1's first 2, rounded up to blocks
    assert res.step_kv_used[0] == (-(-6 // block_size) + -(-2 // block_size)) * block_size


def test_the_threshold_caps_every_request_but_is_off_for_a_lone_one():
    policy = V1(max_num_batched_tokens=8, long_prefill_token_threshold=4)
    steps, res = traced_run(THREE, policy, 64)
    assert steps == THRESHOLD_4
    assert direct(THREE, policy, 64, res.step_start_s)[0] == steps
    lone, _ = traced_run(Requests([0], [6], [2]), policy, 64)
    assert lone == [[(0, 6)], [(0, 1)]]     # alone, nobody to starve: the whole prompt in one step


def test_blocks_head_of_line_blocking_and_self_preemption_by_hand():
    policy = V1(max_num_batched_tokens=8, block_size=4)
    steps, res = traced_run(THREE, policy, 12)
    assert steps == TIGHT
    direct_steps, _, requests = direct(THREE, policy, 12, res.step_start_s)
    assert direct_steps == steps
    assert res.preemptions.tolist() == [0, 0, 1] == [r.num_preemptions for r in requests]
    # blocks held, in tokens: 0 holds 2 blocks, then 3 from step 3; 1 and 2 hold 2 + 1; after 2's preemption 1's 2
    assert res.step_kv_used.tolist() == [8, 8, 8, 12, 12, 12, 8, 8, 8, 8]
    assert res.first_scheduled_s[2] == res.step_start_s[4]       # its first scheduling, not its resumption
    run = policy.last_run
    assert run.finished == {0: "length", 1: "length", 2: "length"} and run.num_preemptions == 1
    assert not run.scheduler.has_unfinished_requests()


# ---- (b) Poisson workloads that preempt ----

def poisson(n=300, seed=3):
    return Requests(poisson_arrivals(n, 40.0, seed=seed),
                    lognormal_lengths(n, median=256, sigma=1.0, seed=seed + 1, high=2048),
                    lognormal_lengths(n, median=64, sigma=1.0, seed=seed + 2, high=512))


@pytest.mark.parametrize("policy", [
    V1(max_num_batched_tokens=512, max_num_seqs=64),
    V1(max_num_batched_tokens=512, max_num_seqs=64, long_prefill_token_threshold=128, enable_prefix_caching=True,
       block_size=8),
    V1(max_num_batched_tokens=384, max_num_seqs=32, policy="priority", reserve_full_prompt=False),
], ids=["fcfs", "threshold-prefix-caching", "priority-no-full-prompt-gate"])
def test_poisson_workloads_finish_preempt_and_match_the_scheduler_driven_directly(policy):
    reqs, kv = poisson(), 6000
    steps, res = traced_run(reqs, policy, kv)
    assert (res.generated == reqs.output_len).all()
    assert np.isfinite(res.ttft).all() and np.isfinite(res.tpot[reqs.output_len > 1]).all()
    run = policy.last_run
    assert res.preemptions.sum() > 0 and res.preemptions.sum() == run.num_preemptions
    assert res.preemptions.tolist() == [run.requests[i].num_preemptions for i in range(len(reqs))]
    assert run.finished == dict.fromkeys(range(len(reqs)), "length")
    assert (res.step_kv_used <= kv).all() and res.step_tokens.max() <= policy.max_num_batched_tokens
    direct_steps, trace, requests = direct(reqs, policy, kv, res.step_start_s)
    assert direct_steps == steps                             # same ids, same tokens, every step
    assert [r.num_preemptions for r in requests] == res.preemptions.tolist()
    assert {rid for rec in trace for rid in rec.finished} == set(range(len(reqs)))
    hits = sum(sum(rec.output.num_hit_tokens.values()) for rec in trace)
    assert (hits > 0) == policy.enable_prefix_caching       # resumed requests hit their own freed blocks


def test_poisson_runs_are_deterministic():
    policy = V1(max_num_batched_tokens=512, max_num_seqs=64)
    a = simulate(poisson(), policy, LLAMA3_8B, H100_SXM, kv_capacity_tokens=6000)
    b = simulate(poisson(), V1(max_num_batched_tokens=512, max_num_seqs=64), LLAMA3_8B, H100_SXM,
                 kv_capacity_tokens=6000)
    for name in ("token_step", "step_tokens", "step_end_s", "preemptions", "step_kv_used"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


# ---- (c) the long-prefill threshold ----

def test_the_threshold_gets_a_short_request_behind_a_long_prompt_out_sooner():
    # A 8000-token prompt at t=0, a 32-token one just after. Budget 2048. Step 0 holds the long one alone: the
    # threshold is off with one request, so it gets 2048 either way, and the short one joins before step 1.
    # Without the threshold the long prompt takes all 2048 of steps 1 and 2 and 1856 of step 3, leaving 192:
    # the short one is admitted in step 3, and its first token comes at the end of step 3.
    # With a threshold of 512 the long prompt gets 512 a step, so the short one is admitted in step 1 and has its
    # first token at the end of step 1. The long prompt pays while the short one decodes (steps 2-4, its 4th token
    # in step 4); alone again from step 5, it gets 2048 and then its last 1856: its first token comes in step 6
    # instead of step 3.
    reqs = Requests([0.0, 1e-6], [8000, 32], [4, 4])
    runs = {t: traced_run(reqs, V1(long_prefill_token_threshold=t), 20_000) for t in (0, 512)}
    (off, res_off), (on, res_on) = runs[0], runs[512]
    assert off[:4] == [[(0, 2048)], [(0, 2048)], [(0, 2048)], [(0, 1856), (1, 32)]]
    assert on[:7] == [[(0, 2048)], [(0, 512), (1, 32)]] + [[(0, 512), (1, 1)]] * 3 + [[(0, 2048)], [(0, 1856)]]
    first = {t: r.token_step[r.token_offset] for t, (_, r) in runs.items()}
    assert first[0].tolist() == [3, 3] and first[512].tolist() == [6, 1]
    assert res_on.ttft[1] < res_off.ttft[1] and res_on.ttft[0] > res_off.ttft[0]


# ---- (d) errors, (e) reuse ----

@pytest.mark.parametrize("kwargs, match", [
    ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),
    ({"max_num_seqs": 1.5}, "max_num_seqs"),
    ({"long_prefill_token_threshold": -1}, "long_prefill_token_threshold"),
    ({"block_size": 0}, "block_size"),
    ({"enable_prefix_caching": "yes"}, "enable_prefix_caching"),
    ({"reserve_full_prompt": 1}, "reserve_full_prompt"),
    ({"policy": "lifo"}, "policy must be one of"),
])
def test_bad_parameters_are_rejected_clearly(kwargs, match):
    with pytest.raises(ValueError, match=match):
        V1(**kwargs)


def test_a_cache_too_small_in_blocks_is_rejected_clearly():
    with pytest.raises(ValueError, match="holds no block of 16 tokens"):
        simulate(Requests([0], [4], [2]), V1(), LLAMA3_8B, H100_SXM, kv_capacity_tokens=8)
    # 17 tokens of KV fit a 20-token cache, but not its 2 blocks of 8
    with pytest.raises(ValueError, match="request 0 needs 17 tokens of KV, 3 blocks of 8"):
        simulate(Requests([0], [14], [4]), V1(block_size=8), LLAMA3_8B, H100_SXM, kv_capacity_tokens=20)


def test_driving_it_outside_the_loop_is_caught():
    state = ServingState(np.array([6]), np.array([2]), 64)
    state.waiting.append(0)
    policy = V1()
    policy.schedule(state)
    with pytest.raises(RuntimeError, match="disagree"):
        policy.schedule(state)        # the loop never advanced request 0


def test_one_object_serves_two_simulations_alike():
    policy = V1(max_num_batched_tokens=256, max_num_seqs=16, block_size=4)
    reqs = poisson(60, seed=7)
    a = simulate(reqs, policy, LLAMA3_8B, H100_SXM, kv_capacity_tokens=3000)
    first = policy.last_run
    b = simulate(reqs, policy, LLAMA3_8B, H100_SXM, kv_capacity_tokens=3000)
    assert policy.last_run is not first
    for name in ("token_step", "step_tokens", "step_end_s", "preemptions", "step_kv_used", "first_scheduled_s"):
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
    assert policy == V1(max_num_batched_tokens=256, max_num_seqs=16, block_size=4)


# ---- scripts/bench_vllm_scheduler.py ----

def test_the_bench_runs_on_a_tiny_workload_without_writing(capsys, tmp_path, monkeypatch):
    bench = _script("bench_vllm_scheduler")
    monkeypatch.setattr(bench, "RESULTS", tmp_path / "results.md")
    assert bench.main(["--requests", "50"]) == 0
    out = capsys.readouterr().out
    assert "| steps | requests | wall | CPU |" in out and "| 50 |" in out
    assert not (tmp_path / "results.md").exists()


def test_each_bench_script_keeps_the_other_sections_of_results_md(tmp_path, monkeypatch, capsys):
    path = tmp_path / "results.md"
    ours, engine, whole = _script("bench_vllm_scheduler"), _script("bench_engine"), _script("bench")
    for module in (ours, engine, whole):
        monkeypatch.setattr(module, "RESULTS", path)

    def between(text, start, end=None):
        return text[text.index(start):text.index(end) if end else None]

    # scripts/bench.py's part, then an engine section as scripts/bench_engine.py writes it (it runs to the end)
    whole.write_results([], argparse.Namespace(skip_tests=True), dt.datetime.now(dt.UTC))
    path.write_text(path.read_text() + "\n" + llm.BENCH_MARK + "\n\n## engine\n\n- date: d; tiny\n\n"
                    "| way | generated tokens/s (wall) | wall | CPU | vs plain loop |\n|---|---:|---:|---:|---:|\n"
                    "| engine | 903 | 0.57 s | 1.12 s | 1.76x |\n")
    engine_part = between(path.read_text(), llm.BENCH_MARK)
    ours.main(["--requests", "20", "--write"])                 # a first section: just before the engine's
    text = path.read_text()
    assert text.index("# Benchmark") < text.index(ours.MARK) < text.index(llm.BENCH_MARK)
    assert between(text, llm.BENCH_MARK) == engine_part
    ours.main(["--requests", "30", "--write"])                 # replaced in place
    text = path.read_text()
    assert text.count(ours.MARK) == 1 and "| 30 |" in text and "| 20 |" not in text
    assert between(text, llm.BENCH_MARK) == engine_part
    ours_part = between(text, ours.MARK, llm.BENCH_MARK)
    assert engine.main(["--tokens", "1", "--write"]) == 0      # the real engine bench keeps our section
    text = path.read_text()
    assert between(text, ours.MARK, llm.BENCH_MARK) == ours_part and "| engine | 903 |" not in text
    engine_part = between(text, llm.BENCH_MARK)
    whole.write_results([], argparse.Namespace(skip_tests=False), dt.datetime.now(dt.UTC))   # keeps both
    text = path.read_text()
    assert "- scope: all figures" in text
    assert between(text, ours.MARK, llm.BENCH_MARK) == ours_part and between(text, llm.BENCH_MARK) == engine_part
    capsys.readouterr()


def test_record_puts_the_section_at_the_end_of_a_file_without_sections():
    ours = _script("bench_vllm_scheduler")
    assert ours.record("", ours.MARK + "\n\nx\n") == ours.MARK + "\n\nx\n"
    assert ours.record("# head\n\n", ours.MARK + "\nx") == "# head\n\n" + ours.MARK + "\nx\n"
    old = "# head\n\n" + ours.MARK + "\nold\n"
    assert ours.record(old, ours.MARK + "\nnew") == "# head\n\n" + ours.MARK + "\nnew\n"


def test_a_rewritten_section_keeps_the_hand_written_sections_after_it():
    """The engine bench's section is followed by sections written by hand (the simulator's profile) and by
    scripts/test_durations.py: rewriting it replaces it alone."""
    engine = _script("bench_engine")
    hand = "<!-- simulator profile: by hand -->\n\n## profiled\n"
    durations = "<!-- test durations: scripts/test_durations.py -->\n## durations\n<!-- end test durations -->\n"
    old = "# head\n\n" + llm.BENCH_MARK + "\n\nold\n\n" + hand + "\n" + durations
    new = engine.results_md.record(old, llm.BENCH_MARK + "\n\nnew\n", llm.BENCH_MARK)
    assert new == "# head\n\n" + llm.BENCH_MARK + "\n\nnew\n\n" + hand + "\n" + durations


def test_the_simulator_bench_records_what_it_printed(tmp_path, monkeypatch, capsys):
    """`make bench` records both simulator runs (the policies' rates, the million-request goals) as sections of
    their own, and the sections after them stay."""
    sim = _script("bench_simulator")
    path = tmp_path / "results.md"
    hand = "<!-- simulator profile: by hand -->\n\n## profiled\n"
    path.write_text("# head\n\n" + hand)
    monkeypatch.setattr(sim, "RESULTS", path)
    sim.main(["-n", "300", "--write"])
    sim.main(["-n", "300", "--million", "--write"])
    printed = capsys.readouterr().out
    text = path.read_text()
    assert max(text.index(sim.MARKS[False]), text.index(sim.MARKS[True])) < text.index(hand)
    rates, goals = (text.split(sim.MARKS[m])[1].split("<!-- ")[0] for m in (False, True))
    assert "goal prefill-first >= 50,000" in rates and "prefill-first" in rates
    assert "goal 300 prefill-first requests under 30 CPU s" in goals and "token-fair" not in goals
    assert "token-fair, 4 tenants" in printed and text.count("<!-- simulator") == 3
