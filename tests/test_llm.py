"""The engine's output does not depend on batching: every request equals generating it alone.

Seeded random workloads on a tiny random model, with a KV cache and token budget small enough to force
chunked prefill, preemption by recompute and prefix-cache hits, and requests arriving between steps. Each
request's greedy output must be the tokens `model.generate_alone` produces for it; where a step's top-2 logit
gap alone is below fp32 noise, the test compares up to that step and says so.
"""

from __future__ import annotations

import random

import pytest
import torch

from servelab.engine import llm as L
from servelab.engine import model as sm
from servelab.schedulers import scheduler as sched

NEAR_TIE = 1e-4


@pytest.fixture(scope="module")
def tiny():
    return sm.Model.random(sm.ModelConfig.tiny("qwen3", vocab_size=64), seed=0)


def _alone(model, prompt, n):
    """Greedy tokens alone, and the first step whose top-2 gap is a near tie (or None)."""
    cache = sm.ContiguousCache(model.config.num_layers)
    step, out, tie = torch.tensor(prompt), [], None
    with torch.no_grad():
        for i in range(n):
            logits = model.logits(model(step, torch.arange(cache.length, cache.length + len(step)), cache.attend))[-1]
            top = logits.topk(2).values
            if tie is None and float(top[0] - top[1]) < NEAR_TIE:
                tie = i
            out.append(int(logits.argmax()))
            step = torch.tensor([out[-1]])
    return out, tie


def _workload(seed, vocab=64):
    rng = random.Random(seed)
    system = [rng.randrange(vocab) for _ in range(10)]   # a shared prefix: block-cache hits
    reqs = []
    for i in range(10):
        own = [rng.randrange(vocab) for _ in range(rng.randint(1, 14))]
        prompt = (system + own) if i % 2 == 0 else own + system[:3]
        reqs.append((rng.randint(0, 6), prompt, rng.randint(1, 10)))   # (arrival step, prompt, max tokens)
    return reqs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batched_equals_alone(tiny, seed):
    engine = L.LLM(tiny, block_size=4, num_blocks=18, max_num_batched_tokens=12, max_num_seqs=4)
    preempted = hits = chunked = 0
    real_preempt, real_allocate = engine.scheduler.preempt, engine.scheduler.block_manager.allocate

    def count_preempt(seq):
        nonlocal preempted
        preempted += 1
        real_preempt(seq)

    def count_hits(seq, n):
        nonlocal hits
        hits += n
        real_allocate(seq, n)

    engine.scheduler.preempt = count_preempt
    engine.scheduler.block_manager.allocate = count_hits
    reqs, seqs, step = _workload(seed), {}, 0
    while len(seqs) < len(reqs) or not engine.is_finished():
        for i, (arrival, prompt, n) in enumerate(reqs):
            if arrival == step and i not in seqs:
                seqs[i] = engine.add_request(prompt, L.SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
        if not engine.is_finished():
            before = {s.seq_id: s.num_scheduled_tokens for s in engine.scheduler.waiting}
            engine.step()
            chunked += any(s.num_cached_tokens < len(s) and s.block_table for s in engine.scheduler.waiting
                           if s.seq_id in before)
        step += 1
    assert preempted and hits and chunked, (preempted, hits, chunked)   # the workload exercised all three
    for i, (_, prompt, n) in enumerate(reqs):
        want, tie = _alone(tiny, prompt, n)
        got = seqs[i].completion_token_ids
        if tie is not None:
            print(f"request {i}: step {tie} is a near tie; compared {tie} tokens")
        assert got[:tie] == want[:tie], (i, got, want)


def test_generate_returns_each_prompts_tokens(tiny):
    engine = L.LLM(tiny, block_size=4, num_blocks=32, max_num_batched_tokens=16, max_num_seqs=3)
    prompts = [[1, 2, 3], [5, 6, 7, 8, 9, 10, 11], [1, 2, 3, 4]]
    outs = engine.generate(prompts, L.SamplingParams(temperature=0, max_tokens=5, ignore_eos=True), use_tqdm=True)
    assert [o["token_ids"] for o in outs] == [_alone(tiny, p, 5)[0] for p in prompts]


def test_sampling_is_batch_invariant(tiny):
    """At temperature > 0 each request draws from its own seeded generator: alone or batched, the same tokens."""
    p = [3, 1, 4, 1, 5]
    sp = L.SamplingParams(temperature=1.0, max_tokens=6, ignore_eos=True, seed=11)
    alone = L.LLM(tiny, block_size=4, num_blocks=32, max_num_batched_tokens=16).generate([p], sp)
    others = [[9, 2, 6], [5, 3, 5, 8, 9, 7]]
    batched = L.LLM(tiny, block_size=4, num_blocks=32, max_num_batched_tokens=6).generate(
        [others[0], p, others[1]], [L.SamplingParams(temperature=1.0, max_tokens=4, seed=2), sp,
                                    L.SamplingParams(temperature=0.7, max_tokens=9, seed=3)])
    assert batched[1]["token_ids"] == alone[0]["token_ids"]


def test_prepare_prefill_skips_the_cached_prefix_and_continues_positions():
    s = sched.Sequence(list(range(10)), sched.SamplingParams(max_tokens=2), block_size=4)
    s.block_table, s.num_cached_tokens, s.num_scheduled_tokens = [7, 3, 5], 4, 5
    b = L.prepare_prefill([s], 4)
    assert b.positions.tolist() == [4, 5, 6, 7, 8] and b.input_ids.tolist() == [4, 5, 6, 7, 8]
    assert b.slot_mapping.tolist() == [12, 13, 14, 15, 20]     # block 3, then block 5
    assert b.context_lens.tolist() == [9] and b.cu_seqlens_q.tolist() == [0, 5] and b.cu_seqlens_k.tolist() == [0, 9]


def test_prepare_decode_writes_the_last_token_at_its_own_slot():
    s = sched.Sequence(list(range(9)), sched.SamplingParams(max_tokens=2), block_size=4)
    s.block_table = [2, 6, 1]          # position 8 is the first of the third block
    b = L.prepare_decode([s], 4)
    assert b.positions.tolist() == [8] and b.slot_mapping.tolist() == [4] and b.context_lens.tolist() == [9]


@pytest.mark.parametrize("seed", range(3))
def test_the_runners_batched_attention_is_the_reference_without_its_loop(seed):
    """paged_attention_batched (the runner's default) stores and reads exactly as paged_attention does, row for
    row, on a prefill step of chunks after cached prefixes and on a decode step: GQA, blocks out of order."""
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    block_size, heads, kv, d = 4, 4, 2, 8
    seqs = []
    for _ in range(4):
        s = sched.Sequence(list(range(rng.randint(3, 20))), sched.SamplingParams(max_tokens=4), block_size=block_size)
        s.block_table = rng.sample(range(40), -(-len(s) // block_size))
        s.num_cached_tokens = rng.randrange(0, len(s)) // block_size * block_size
        s.num_scheduled_tokens = rng.randint(1, len(s) - s.num_cached_tokens)
        seqs.append(s)
    for batch in (L.prepare_prefill(seqs, block_size), L.prepare_decode(seqs, block_size)):
        n = len(batch.input_ids)
        q, k, v = (torch.randn(n, h, d, generator=gen) for h in (heads, kv, kv))
        cache = torch.randn(2, 40, block_size, kv, d, generator=gen)
        mine, theirs = cache.clone(), cache.clone()
        got = L.paged_attention_batched(q, k, v, mine, batch)
        want = L.paged_attention(q, k, v, theirs, batch)
        assert torch.equal(mine, theirs)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert L.ModelRunner.paged_attention is L.paged_attention_batched


def test_the_runner_uses_the_pieces_a_notebook_swaps_in(tiny):
    """A chapter plugs the learner's prepare_prefill / prepare_decode / paged_attention into the runner."""
    calls = []

    def spy(name, fn):
        def wrapped(*args):
            calls.append(name)
            return fn(*args)
        return wrapped

    engine = L.LLM(tiny, block_size=4, num_blocks=32, max_num_batched_tokens=16)
    for name in ("prepare_prefill", "prepare_decode", "paged_attention"):
        setattr(engine.runner, name, spy(name, getattr(L.ModelRunner, name)))
    out = engine.generate([[1, 2, 3, 4, 5]], L.SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    assert out[0]["token_ids"] == _alone(tiny, [1, 2, 3, 4, 5], 3)[0]
    step = lambda prepare: [prepare] + ["paged_attention"] * tiny.config.num_layers  # noqa: E731
    assert calls == step("prepare_prefill") + step("prepare_decode") * 2
    assert [kind for kind, _, _ in engine.steps] == ["prefill", "decode", "decode"]
    assert [(tokens, seqs) for _, tokens, seqs in engine.steps] == [(5, 1), (1, 1), (1, 1)]


def test_serve_adds_requests_at_their_steps_and_counts_preemptions(tiny):
    from servelab.analytic.workloads import engine_requests

    reqs = engine_requests(seed=0, vocab=64)
    assert reqs == engine_requests(seed=0, vocab=64) and reqs != engine_requests(seed=1, vocab=64)
    engine = L.LLM(tiny, block_size=4, num_blocks=18, max_num_batched_tokens=12, max_num_seqs=4)
    params = [L.SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for _, _, n in reqs]
    outs = L.serve(engine, [(a, p, sp) for (a, p, _), sp in zip(reqs, params, strict=True)])
    assert engine.preemptions > 0
    for (_, prompt, n), got in zip(reqs, outs, strict=True):
        want, tie = _alone(tiny, prompt, n)
        assert got[:tie] == want[:tie]
    with pytest.raises(ValueError, match="arrival step"):
        L.serve(engine, [(-1, [1], params[0])])
    with pytest.raises(ValueError, match="n >= 1"):
        engine_requests(n=0)


def test_bad_input_is_refused(tiny):
    engine = L.LLM(tiny, block_size=4, num_blocks=4, max_num_batched_tokens=16)
    with pytest.raises(ValueError, match="could never finish"):
        engine.add_request(list(range(20)), L.SamplingParams(temperature=0, max_tokens=2))
    with pytest.raises(ValueError, match=r"token ids in \[0, 64\)"):
        engine.add_request([1, 64])
    with pytest.raises(ValueError, match="SGLang's"):
        L.LLM(tiny, cache="trie")


def test_the_triton_kernels_give_the_torch_reference_tokens(tiny):
    """Attention through chapter 06's kernels (the interpreter here) serves the same tokens as the torch path,
    under chunked prefill over a cached prefix and decode across block boundaries."""
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4, 5, 6, 7, 8, 30, 31], [40, 41]]
    sp = L.SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    runs = {a: L.LLM(tiny, block_size=4, num_blocks=16, max_num_batched_tokens=8, max_num_seqs=3,
                     attention=a).generate(prompts, sp) for a in ("torch", "triton")}
    assert [o["token_ids"] for o in runs["triton"]] == [o["token_ids"] for o in runs["torch"]]
    with pytest.raises(ValueError, match="the ch06 kernels"):
        L.LLM(tiny, attention="cuda")


@pytest.mark.parametrize("seed", [0, 1])
def test_batched_equals_alone_through_the_radix_cache(tiny, seed):
    engine = L.LLM(tiny, block_size=4, num_blocks=14, max_num_batched_tokens=24, max_num_seqs=4,
                   cache="radix")
    retracted = 0
    real = engine.scheduler.preempt

    def count(req):
        nonlocal retracted
        retracted += 1
        real(req)

    engine.scheduler.preempt = count
    reqs, seqs, step = _workload(seed), {}, 0
    while len(seqs) < len(reqs) or not engine.is_finished():
        for i, (arrival, prompt, n) in enumerate(reqs):
            if arrival == step and i not in seqs:
                seqs[i] = engine.add_request(prompt, L.SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
        if not engine.is_finished():
            engine.step()
            engine.scheduler.check_invariants()
        step += 1
    hits = sum(hit for r in seqs.values() for _, hit in r.admissions)
    assert retracted and hits, (retracted, hits)   # the workload retracted requests and hit the tree
    for i, (_, prompt, n) in enumerate(reqs):
        want, tie = _alone(tiny, prompt, n)
        assert seqs[i].completion_token_ids[:tie] == want[:tie], i


def test_the_engine_bench_runs_and_its_three_ways_agree(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_engine.py"
    spec = importlib.util.spec_from_file_location("bench_engine", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--tokens", "2"]) == 0
    assert "outputs agree: True" in capsys.readouterr().out


def test_text_prompts_go_through_the_tokenizer(tiny, tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(64)}, unk_token="w0"))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.Whitespace(), decoders.WordPiece()
    tok.save(str(tmp_path / "tokenizer.json"))
    engine = L.LLM(tiny, block_size=4, num_blocks=32, max_num_batched_tokens=16,
                   tokenizer=tmp_path / "tokenizer.json")
    sp = L.SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    out = engine.generate(["w3 w1 w4 w1 w5"], sp)[0]
    assert out["token_ids"] == _alone(tiny, [3, 1, 4, 1, 5], 4)[0]
    assert out["text"] == " ".join(f"w{t}" for t in out["token_ids"])
    with pytest.raises(ValueError, match="needs a tokenizer"):
        L.LLM(tiny, block_size=4, num_blocks=32).add_request("w1 w2")


def _script(name: str):
    """scripts/<name>.py as a module (scripts/ is no package)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_the_gpu_engine_script_runs_its_smoke_test(capsys):
    """scripts/gpu_engine.py measures on a GPU only; --smoke checks it on the CPU and labels what it prints."""
    script = _script("gpu_engine")
    assert script.main(["--smoke", "--steps", "1"]) == 0
    assert "not a GPU figure" in capsys.readouterr().out
    config = script.llama3_8b()
    assert (config.num_layers, config.hidden_size, config.num_kv_heads, config.vocab_size) == (32, 4096, 8, 128256)


def test_the_gpu_profile_script_measures_nothing_without_a_gpu(capsys):
    """scripts/gpu_engine_profile.py imports here and, with no CUDA device, says so instead of measuring."""
    script = _script("gpu_engine_profile")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the script would measure (run it by hand)")
    assert script.main() == 0
    assert capsys.readouterr().out == "no CUDA device: nothing measured\n"


def test_the_graph_cliff_script_runs_its_smoke_test(capsys):
    """scripts/gpu_graph_cliff.py: eager only on the CPU, labelled; without --smoke and without a GPU, nothing."""
    script = _script("gpu_graph_cliff")
    assert script.main(["--smoke", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "not a GPU figure" in out and "| 4 |" in out
    if not torch.cuda.is_available():
        assert script.main([]) == 0
        assert "nothing measured" in capsys.readouterr().out


def test_asynchronous_scheduling_generates_what_each_request_generates_alone(tiny, seed=0):
    """Step n+1 scheduled before step n's tokens exist (servelab.schedulers.async_scheduler): batched == alone still."""
    engine = L.LLM(tiny, block_size=4, num_blocks=18, max_num_batched_tokens=12, max_num_seqs=4,
                   async_scheduling=True)
    reqs = [(a, p, L.SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)) for a, p, n in _workload(seed)]
    got = L.serve(engine, reqs)
    assert engine.preemptions and engine.scheduler.block_manager.num_free_blocks == 18
    for i, (_, prompt, p) in enumerate(reqs):
        want, tie = _alone(tiny, prompt, p.max_tokens)
        assert got[i][:tie] == want[:tie], (i, got[i], want)


def test_asynchronous_sampling_and_eos_match_synchronous(tiny):
    """At temperature > 0 with end-of-sequence tokens: the same tokens as the synchronous engine, and the decode
    scheduled after an eos (when the next step was a decode) is counted as a wasted slot."""
    prompts = [list(range(k, k + 3 + k % 5)) for k in range(6)]
    params = [L.SamplingParams(temperature=1.5, max_tokens=10, seed=k) for k in range(6)]
    outs = {}
    for mode in (False, True):
        engine = L.LLM(tiny, block_size=4, num_blocks=24, max_num_batched_tokens=16, max_num_seqs=4,
                       async_scheduling=mode)
        engine.scheduler.eos = 7          # a common token of the tiny model at this temperature
        outs[mode] = [o["token_ids"] for o in engine.generate(prompts, params)]
        if mode:
            stopped = sum(t[-1] == 7 for t in outs[mode])
            assert stopped and 0 < engine.scheduler.wasted_slots <= stopped
    assert outs[True] == outs[False]


def test_asynchronous_scheduling_needs_the_block_cache(tiny):
    with pytest.raises(ValueError, match="use cache=\"blocks\""):
        L.LLM(tiny, cache="radix", async_scheduling=True)


def test_speculative_decoding_generates_what_greedy_decoding_generates_alone(tiny, seed=0):
    """Prompt-lookup drafts verified greedily in one pass over k + 1 tokens: the same tokens as one-token steps
    (where a top-2 logit gap is a near tie, up to that step)."""
    engine = L.LLM(tiny, block_size=4, num_blocks=40, max_num_batched_tokens=16, max_num_seqs=4,
                   num_speculative_tokens=3)
    reqs = [(a, p, L.SamplingParams(temperature=0, max_tokens=3 * n, ignore_eos=True))
            for a, p, n in _workload(seed)]
    got = L.serve(engine, reqs)
    sch = engine.scheduler
    assert sch.num_accepted_tokens and sch.num_draft_tokens > sch.num_accepted_tokens and sch.num_released_blocks
    assert sch.block_manager.num_free_blocks == 40
    for i, (_, prompt, p) in enumerate(reqs):
        want, tie = _alone(tiny, prompt, p.max_tokens)
        assert got[i][:tie] == want[:tie], (i, got[i], want)


def test_speculative_decoding_is_greedy_and_synchronous_only(tiny):
    engine = L.LLM(tiny, num_speculative_tokens=2)
    with pytest.raises(ValueError, match="temperature=0"):
        engine.add_request([1, 2, 3], L.SamplingParams(temperature=1.0))
    with pytest.raises(ValueError, match="synchronous scheduling"):
        L.LLM(tiny, num_speculative_tokens=2, async_scheduling=True)
