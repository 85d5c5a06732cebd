"""The engine: nano-vllm's Scheduler and BlockManager (servelab.schedulers.scheduler), or the scheduler over SGLang's
radix cache (servelab.schedulers.radix_scheduler, `cache="radix"`), serving servelab.engine.model.

    llm = LLM(Model.random(ModelConfig.tiny(), seed=0), block_size=4, num_blocks=64,
              max_num_batched_tokens=32, max_num_seqs=8)
    outs = llm.generate([[1, 2, 3], [1, 2, 9, 9]], SamplingParams(temperature=0, max_tokens=8))
    outs[0]["token_ids"]                     # the same as generating [1, 2, 3] alone

Text prompts go through a `tokenizers` tokenizer (`LLM(..., tokenizer="tokenizer.json")`, or the one in a
checkpoint folder), and each output then carries its decoded `text`. `ModelRunner` turns each scheduled batch
into tensors and runs the model over the paged KV cache, attention in torch or through chapter 06's Triton
kernels (`attention=`); sampling is greedy at temperature 0, else seeded per request. A step tensor by tensor:
docs/engine.md.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from servelab.engine.model import Model, causal_attention, load_checkpoint
from servelab.schedulers import scheduler as sched
from servelab.schedulers.async_scheduler import AsyncScheduler
from servelab.schedulers.config import EngineConfig
from servelab.schedulers.radix_scheduler import RadixScheduler, Req
from servelab.schedulers.scheduler import SamplingParams
from servelab.schedulers.spec_decode import SpecScheduler, ngram_propose


@dataclass
class Batch:
    """What one step computes, as tensors (flat over the scheduled tokens of every sequence)."""
    input_ids: torch.Tensor       # [n]
    positions: torch.Tensor       # [n]
    slot_mapping: torch.Tensor    # [n]: cache slot (block * block_size + offset) each new token's K/V goes to
    cu_seqlens_q: torch.Tensor    # [b + 1]: sequence i's new tokens are rows cu_seqlens_q[i]:cu_seqlens_q[i+1]
    cu_seqlens_k: torch.Tensor    # [b + 1]: the same over whole contexts (cached + new)
    context_lens: torch.Tensor    # [b]: tokens each sequence attends to, the new ones included
    block_tables: torch.Tensor    # [b, max blocks], padded with -1
    is_prefill: bool = True
    last_rows: torch.Tensor = field(default=None)  # [b]: the row whose logits sample each sequence's token


def block_tables(seqs: list[sched.Sequence]) -> torch.Tensor:
    """[b, max blocks] long: each sequence's block table, padded with -1."""
    width = max(len(s.block_table) for s in seqs)
    return torch.tensor([s.block_table + [-1] * (width - len(s.block_table)) for s in seqs], dtype=torch.long)


def prepare_prefill(seqs: list[sched.Sequence], block_size: int) -> Batch:
    """Each sequence computes tokens num_cached_tokens .. num_cached_tokens + num_scheduled_tokens - 1 (a cached
    prefix is skipped, a chunk continues where the last one stopped), at those positions, into those slots."""
    ids, pos, slots, cu_q, cu_k, ctx = [], [], [], [0], [0], []
    for s in seqs:
        start, end = s.num_cached_tokens, s.num_cached_tokens + s.num_scheduled_tokens
        ids += s.token_ids[start:end]
        pos += range(start, end)
        slots += [s.block_table[p // block_size] * block_size + p % block_size for p in range(start, end)]
        cu_q.append(cu_q[-1] + end - start)
        cu_k.append(cu_k[-1] + end)
        ctx.append(end)
    return _batch(ids, pos, slots, cu_q, cu_k, ctx, seqs, True)


def prepare_decode(seqs: list[sched.Sequence], block_size: int) -> Batch:
    """One token per sequence: its last, at position len - 1, written to the slot that position maps to; the
    context is the whole sequence, that token included."""
    ids = [s.last_token for s in seqs]
    pos = [len(s) - 1 for s in seqs]
    slots = [s.block_table[p // block_size] * block_size + p % block_size for s, p in zip(seqs, pos, strict=True)]
    ctx = [len(s) for s in seqs]
    cu_q = list(range(len(seqs) + 1))
    cu_k = [0]
    for c in ctx:
        cu_k.append(cu_k[-1] + c)
    return _batch(ids, pos, slots, cu_q, cu_k, ctx, seqs, False)


def prepare_verify(seqs: list[sched.Sequence], block_size: int) -> Batch:
    """A speculative decode step: each sequence computes its last token and its drafts, positions len - 1 ..
    len - 1 + d, into the slots their look-ahead blocks give, as a chunk on top of its cached context; every row
    gets logits (`last_rows` is every row)."""
    ids, pos, slots, cu_q, cu_k, ctx = [], [], [], [0], [0], []
    for s in seqs:
        start = len(s) - 1
        new = [s.last_token, *s.draft_token_ids]
        ids += new
        pos += range(start, start + len(new))
        slots += [s.block_table[p // block_size] * block_size + p % block_size for p in range(start, start + len(new))]
        cu_q.append(cu_q[-1] + len(new))
        cu_k.append(cu_k[-1] + start + len(new))
        ctx.append(start + len(new))
    batch = _batch(ids, pos, slots, cu_q, cu_k, ctx, seqs, True)
    batch.last_rows = torch.arange(len(ids))
    return batch


def _batch(ids, pos, slots, cu_q, cu_k, ctx, seqs, is_prefill) -> Batch:
    t = lambda x: torch.tensor(x, dtype=torch.long)  # noqa: E731
    return Batch(t(ids), t(pos), t(slots), t(cu_q), t(cu_k), t(ctx), block_tables(seqs), is_prefill,
                 last_rows=t(cu_q[1:]) - 1)


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                    batch: Batch) -> torch.Tensor:
    """One layer's attention over the paged cache (the torch reference of the Triton path).

    kv_cache [2, num_blocks, block_size, num_kv_heads, head_dim] is this layer's keys (0) and values (1). First
    each new token's k and v go to its slot: block slot // block_size, row slot % block_size. Then sequence i's
    queries (rows cu_seqlens_q[i]:cu_seqlens_q[i+1]) attend causally to its whole context of context_lens[i]
    keys read back through its block table, the cached prefix and this step's new tokens alike."""
    block_size = kv_cache.shape[2]
    flat = kv_cache.view(2, -1, *k.shape[1:])   # [2, num_blocks * block_size, kv_heads, head_dim]
    flat[0, batch.slot_mapping] = k
    flat[1, batch.slot_mapping] = v
    out = torch.empty_like(q)
    for i, n_ctx in enumerate(batch.context_lens.tolist()):
        p = torch.arange(n_ctx, device=q.device)
        slots = batch.block_tables[i, p // block_size] * block_size + p % block_size
        rows = slice(int(batch.cu_seqlens_q[i]), int(batch.cu_seqlens_q[i + 1]))
        out[rows] = causal_attention(q[rows], flat[0, slots], flat[1, slots], past=n_ctx - (rows.stop - rows.start))
    return out


def paged_attention_batched(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                            batch: Batch) -> torch.Tensor:
    """`paged_attention` for every row at once, what the runner uses by default: the same store, then each row
    gathers its sequence's context through the block table, padded to the longest, and masks the keys after its
    own position (the padding lies after every position). One set of tensor operations a layer instead of a
    loop over sequences: on the CPU the loop's small operations, not arithmetic, were most of a step."""
    block_size = kv_cache.shape[2]
    flat = kv_cache.view(2, -1, *k.shape[1:])   # [2, num_blocks * block_size, kv_heads, head_dim]
    flat[0, batch.slot_mapping] = k
    flat[1, batch.slot_mapping] = v
    p = torch.arange(int(batch.context_lens.max()), device=q.device)
    slots = batch.block_tables.clamp(min=0)[:, p // block_size] * block_size + p % block_size   # [b, width]
    rows = torch.repeat_interleave(torch.arange(len(batch.context_lens), device=q.device),
                                   batch.cu_seqlens_q[1:] - batch.cu_seqlens_q[:-1])        # row -> sequence
    keys, values = flat[0, slots[rows]].float(), flat[1, slots[rows]].float()             # [n, width, kv, d]
    n, heads, d = q.shape
    kv = keys.shape[2]
    grouped = q.float().view(n, kv, heads // kv, d)       # query head h reads KV head h // (heads / kv)
    scores = torch.einsum("nkgd,nwkd->nkgw", grouped, keys) / math.sqrt(d)
    allowed = p[None, :] <= batch.positions[:, None]     # [n, width]: causal, and no padding
    scores = scores.masked_fill(~allowed[:, None, None, :], float("-inf"))
    out = torch.einsum("nkgw,nwkd->nkgd", scores.softmax(-1), values)
    return out.reshape(n, heads, d).to(q.dtype)


class ModelRunner:
    """Owns the model and the paged KV cache; `run(seqs, is_prefill)` returns one token per sequence.

    Its three pieces are attributes, so a notebook can swap in its own: `runner.prepare_prefill = mine`. The
    attention is `paged_attention_batched`, the reference's arithmetic without its loop over sequences."""

    prepare_prefill = staticmethod(prepare_prefill)
    prepare_decode = staticmethod(prepare_decode)
    paged_attention = staticmethod(paged_attention_batched)

    def __init__(self, model: Model, block_size: int, num_blocks: int, attention: str = "torch"):
        if attention not in ("torch", "triton"):
            raise ValueError(f"attention={attention!r}: \"torch\" (the reference) or \"triton\" (the ch06 kernels)")
        c = model.config
        self.model, self.block_size, self.num_blocks, self.attention = model, block_size, num_blocks, attention
        weight = next(model.parameters())
        self.device = weight.device
        self.kv_cache = torch.zeros(c.num_layers, 2, num_blocks, block_size, c.num_kv_heads, c.head_dim,
                                    dtype=weight.dtype, device=self.device)
        self.generators: dict[int, torch.Generator] = {}

    def attend(self, batch: Batch):
        """The model's attention over the paged cache: store the new K/V, then read each context back."""
        if self.attention == "triton":
            return self._attend_triton(batch)
        return lambda layer, q, k, v: self.paged_attention(q, k, v, self.kv_cache[layer], batch)

    def _attend_triton(self, batch: Batch):
        """The same through the ch06 kernels: store_kvcache, then prefill_attention or paged_decode."""
        from servelab import kernels

        tables, lens = batch.block_tables.to(torch.int32), batch.context_lens.to(torch.int32)
        cu = batch.cu_seqlens_q.to(torch.int32)

        def attend(layer: int, q, k, v):
            k_cache, v_cache = self.kv_cache[layer, 0], self.kv_cache[layer, 1]
            kernels.store_kvcache(k.contiguous(), v.contiguous(), k_cache, v_cache, batch.slot_mapping)
            if batch.is_prefill:
                return kernels.prefill_attention(q.contiguous(), k_cache, v_cache, tables, lens, cu)
            return kernels.paged_decode(q.contiguous(), k_cache, v_cache, tables, lens)
        return attend

    @torch.no_grad()
    def run(self, seqs: list[sched.Sequence], is_prefill: bool, params: dict[int, SamplingParams]) -> list[int]:
        batch = (self.prepare_prefill if is_prefill else self.prepare_decode)(seqs, self.block_size)
        if self.device.type != "cpu":
            batch = Batch(*(getattr(batch, f).to(self.device) if isinstance(getattr(batch, f), torch.Tensor)
                            else getattr(batch, f) for f in Batch.__dataclass_fields__))
        hidden = self.model(batch.input_ids, batch.positions, self.attend(batch))
        logits = self.model.logits(hidden[batch.last_rows])
        tokens = []
        for s, row in zip(seqs, logits, strict=True):
            appends = not is_prefill or s.num_cached_tokens + s.num_scheduled_tokens == len(s)
            tokens.append(self.sample(s.seq_id, row, params[s.seq_id]) if appends else -1)
        return tokens

    @torch.no_grad()
    def verify(self, seqs: list[sched.Sequence]) -> list[list[int]]:
        """One pass over each sequence's last token and its drafts (`seq.draft_token_ids`), as a chunk on its
        cached context; greedy acceptance: the drafts equal to the argmax before them, then the argmax where the
        first one differs (or after the last): what greedy decoding appends, one token a step."""
        batch = prepare_verify(seqs, self.block_size)
        if self.device.type != "cpu":
            batch = Batch(*(getattr(batch, f).to(self.device) if isinstance(getattr(batch, f), torch.Tensor)
                            else getattr(batch, f) for f in Batch.__dataclass_fields__))
        hidden = self.model(batch.input_ids, batch.positions, self.attend(batch))
        best = self.model.logits(hidden).argmax(-1).tolist()
        out = []
        for i, s in enumerate(seqs):
            rows = best[int(batch.cu_seqlens_q[i]):int(batch.cu_seqlens_q[i + 1])]
            tokens = [rows[0]]
            for draft, nxt in zip(s.draft_token_ids, rows[1:]):
                if draft != tokens[-1]:
                    break
                tokens.append(nxt)
            out.append(tokens)
        return out

    def sample(self, seq_id: int, logits: torch.Tensor, p: SamplingParams) -> int:
        if p.temperature == 0:
            return int(logits.argmax())
        gen = self.generators.setdefault(seq_id, torch.Generator().manual_seed(p.seed))
        return int(torch.multinomial((logits / p.temperature).softmax(-1), 1, generator=gen))


class LLM:
    """nano-vllm's shape: `generate(prompts, sampling_params)`, or `add_request` / `step` for a driver.

    The KV and step knobs make one `EngineConfig` (`self.config`), which builds the scheduler."""

    def __init__(self, model: Model | str | Path, *, block_size: int = 16, num_blocks: int = 256,
                 max_num_batched_tokens: int = 512, max_num_seqs: int = 16, enable_prefix_caching: bool = True,
                 cache: str = "blocks", attention: str = "torch", tokenizer: str | Path | None = None,
                 async_scheduling: bool = False, num_speculative_tokens: int = 0):
        if cache not in ("blocks", "radix"):
            raise ValueError(f"cache={cache!r}: \"blocks\" (nano-vllm's block-hash cache) or \"radix\" (SGLang's)")
        if num_speculative_tokens and (cache != "blocks" or async_scheduling):
            raise ValueError("speculative decoding (num_speculative_tokens > 0) runs on the block-hash cache with "
                             "synchronous scheduling: use cache=\"blocks\" and async_scheduling=False")
        if async_scheduling and cache != "blocks":
            raise ValueError("async_scheduling=True schedules ahead with servelab.schedulers.async_scheduler, "
                             "which runs on the block-hash cache: use cache=\"blocks\"")
        # the knobs every scheduler family takes, by the same names (docs/VOCABULARY.md), checked before loading
        self.config = config = EngineConfig(num_blocks=num_blocks, block_size=block_size,
                                            max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                                            enable_prefix_caching=enable_prefix_caching)
        self.model = model if isinstance(model, Model) else load_checkpoint(model)
        if tokenizer is None and not isinstance(model, Model) and (Path(model) / "tokenizer.json").is_file():
            tokenizer = Path(model) / "tokenizer.json"     # a checkpoint folder's own tokenizer
        self.tokenizer = None
        if tokenizer is not None:
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(str(tokenizer))
        eos = self.model.config.eos_token_id
        eos = eos[0] if eos else -1
        self.cache = cache
        self.async_scheduling, self.in_flight = async_scheduling, None
        self.num_speculative_tokens = num_speculative_tokens
        if num_speculative_tokens:
            self.scheduler = SpecScheduler.from_config(config, eos=eos, num_speculative_tokens=num_speculative_tokens)
            self.runner = ModelRunner(self.model, block_size, num_blocks, attention)
        elif cache == "blocks":
            kind = AsyncScheduler if async_scheduling else sched.Scheduler
            self.scheduler = kind.from_config(config, eos=eos)
            self.runner = ModelRunner(self.model, block_size, num_blocks, attention)
        else:   # the same memory as token slots; a request's kv_indices is its block table of one-token pages
            self.scheduler = RadixScheduler.from_config(config, eos=eos)
            self.runner = ModelRunner(self.model, 1, config.kv_capacity_tokens, attention)
        self.params: dict[int, SamplingParams] = {}
        self.steps: list[tuple[str, int, int]] = []   # ("prefill" | "decode", tokens computed, sequences) per step
        self.preemptions = 0                          # running sequences sent back to wait (to recompute)

    @classmethod
    def from_config(cls, model: Model | str | Path, config: EngineConfig, **options) -> LLM:
        """An LLM on `config`'s knobs; `options` are its other keywords (`cache`, `attention`, ...)."""
        return cls(model, num_blocks=config.num_blocks, block_size=config.block_size,
                   max_num_batched_tokens=config.max_num_batched_tokens, max_num_seqs=config.max_num_seqs,
                   enable_prefix_caching=config.enable_prefix_caching, **options)

    def add_request(self, prompt: list[int] | str, sampling_params: SamplingParams | None = None) -> sched.Sequence:
        p = sampling_params or SamplingParams()
        vocab = self.model.config.vocab_size
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("a text prompt needs a tokenizer: LLM(..., tokenizer='tokenizer.json'), or give "
                                 "token ids")
            prompt = self.tokenizer.encode(prompt).ids
        if not prompt or any(not 0 <= int(t) < vocab for t in prompt):
            raise ValueError(f"a prompt is a non-empty list of token ids in [0, {vocab})")
        if self.num_speculative_tokens and p.temperature != 0:
            raise ValueError("speculative decoding here verifies greedily: use SamplingParams(temperature=0)")
        if self.cache == "radix":
            seq = Req([int(t) for t in prompt], p.max_tokens, ignore_eos=p.ignore_eos)
        else:
            seq = sched.Sequence([int(t) for t in prompt], p)
        self.scheduler.add(seq)   # refuses a request that could never fit in the KV cache
        self.params[seq.seq_id] = p
        return seq

    def step(self) -> list[sched.Sequence]:
        """One schedule / run / postprocess; returns the sequences that finished."""
        if self.async_scheduling:
            return self._step_ahead()
        if self.num_speculative_tokens:
            return self._step_speculative()
        running = {id(s) for s in self.scheduler.running}
        seqs, is_prefill = self.scheduler.schedule()
        self.preemptions += sum(id(s) in running for s in self.scheduler.waiting)
        tokens = self.runner.run(seqs, is_prefill, self.params)
        self.steps.append(("prefill" if is_prefill else "decode", sum(s.num_scheduled_tokens for s in seqs),
                           len(seqs)))
        done = self.scheduler.postprocess(seqs, tokens, is_prefill)
        for s in done:
            self.runner.generators.pop(s.seq_id, None)
        return done

    def _step_ahead(self) -> list[sched.Sequence]:
        """Asynchronous scheduling: schedule step n+1 while step n is (notionally) running, take step n's tokens,
        then run step n+1. Run on one device in order, so the placeholders are filled in before n+1 runs."""
        running = {id(s) for s in self.scheduler.running}
        ahead = None if self.scheduler.is_finished() else self.scheduler.schedule()
        if ahead is not None:
            self.preemptions += sum(id(s) in running for s in self.scheduler.waiting)
        done = self.scheduler.postprocess(self.in_flight) if self.in_flight is not None else []
        for s in done:
            self.runner.generators.pop(s.seq_id, None)
        if ahead is not None:
            # a sequence that stopped on the step before has no blocks left: its wasted slot is counted, not run
            live = [i for i, s in enumerate(ahead.seqs) if not s.is_finished]
            seqs = [ahead.seqs[i] for i in live]
            kept = [s.num_cached_tokens for s in seqs]
            for i, s in zip(live, seqs):      # the runner reads the step's own range, as synchronously
                s.num_cached_tokens, s.num_scheduled_tokens = ahead.starts[i], ahead.num_scheduled[i]
            tokens = self.runner.run(seqs, ahead.is_prefill, self.params) if seqs else []
            for s, c in zip(seqs, kept):
                s.num_cached_tokens, s.num_scheduled_tokens = c, 0
            ahead.tokens = [None] * len(ahead.seqs)
            for i, t in zip(live, tokens):
                ahead.tokens[i] = t if ahead.samples[i] else None
            self.steps.append(("prefill" if ahead.is_prefill else "decode", ahead.num_batched_tokens,
                               len(ahead.seqs)))
        self.in_flight = ahead
        return done

    def _step_speculative(self) -> list[sched.Sequence]:
        """Prompt-lookup drafts for every running sequence, then one step that verifies them greedily."""
        sch = self.scheduler
        for seq in sch.running:
            seq.draft_token_ids = ngram_propose(seq.token_ids, sch.max_drafts(seq))
        running = {id(s) for s in sch.running}
        seqs, is_prefill = sch.schedule()
        self.preemptions += sum(id(s) in running for s in sch.waiting)
        self.steps.append(("prefill" if is_prefill else "decode", sum(s.num_scheduled_tokens for s in seqs),
                           len(seqs)))
        if is_prefill:
            tokens = [[t] for t in self.runner.run(seqs, True, self.params)]
        else:
            tokens = self.runner.verify(seqs)
        return sch.postprocess(seqs, tokens, is_prefill)

    def is_finished(self) -> bool:
        return self.scheduler.is_finished() and self.in_flight is None

    def generate(self, prompts: list[list[int] | str],
                 sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 use_tqdm: bool = False) -> list[dict]:
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        seqs = [self.add_request(p, sp) for p, sp in zip(prompts, params, strict=True)]
        bar = None
        if use_tqdm:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(seqs), desc="generating", unit="req")
        start, tokens = time.perf_counter(), 0
        while not self.is_finished():
            before = len(self.steps)
            done = self.step()
            tokens += sum(n for _, n, _ in self.steps[before:])
            if bar is not None:
                bar.update(len(done))
                bar.set_postfix(tok_s=f"{tokens / max(time.perf_counter() - start, 1e-9):.0f}")
        if bar is not None:
            bar.close()
        decode = self.tokenizer.decode if self.tokenizer is not None else (lambda ids: None)
        return [{"token_ids": s.completion_token_ids, "text": decode(s.completion_token_ids)} for s in seqs]


def serve(engine: LLM, requests: list[tuple[int, list[int], SamplingParams]]) -> list[list[int]]:
    """Drive `engine` step by step, adding each request (arrival step, prompt, sampling params) when its step
    comes; returns each request's generated token ids, in the order given."""
    if any(a < 0 for a, _, _ in requests):
        raise ValueError("an arrival step is >= 0")
    seqs: dict[int, sched.Sequence] = {}
    step = 0
    while len(seqs) < len(requests) or not engine.is_finished():
        for i, (arrival, prompt, params) in enumerate(requests):
            if arrival == step:
                seqs[i] = engine.add_request(prompt, params)
        if not engine.is_finished():
            engine.step()
        step += 1
    return [seqs[i].completion_token_ids for i in range(len(requests))]


BENCH_RESULTS = Path(__file__).resolve().parents[3] / "bench" / "results.md"   # lib/servelab/engine/ -> the repository
BENCH_MARK = "<!-- engine: scripts/bench_engine.py -->"   # where `make bench` writes the engine's section
HF_BENCH_MARK = "<!-- engine-vs-transformers: scripts/bench_hf.py -->"   # and the engine against transformers


def recorded_vs_transformers(path: Path = BENCH_RESULTS) -> str:
    """The engine against transformers' `generate()` on the trained model, as `make bench` last recorded it
    (scripts/bench_hf.py's section of bench/results.md, its heading left out), or a line saying none is."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if HF_BENCH_MARK not in text:
        return f"No engine-vs-transformers figures are recorded in {path.name} yet: run `make bench`."
    section = text.split(HF_BENCH_MARK, 1)[1].split("\n<!-- ", 1)[0]
    return "\n".join(line for line in section.strip("\n").splitlines() if not line.startswith("#")).strip("\n")
