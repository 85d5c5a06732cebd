"""servelab's Scheduler + BlockManager against nano-vllm's, trace for trace, in CPU time.

Six workloads of 2000 requests (plain mixed lengths, tight memory with preemptions, shared prefixes with
prefix-cache hits; each at block size 16 and 256) go through the same driver loop on both stacks:
schedule(), a fake model whose token ids are fixed per request (seeded, eos at chosen places), postprocess().
Only schedule(), postprocess() and add() are timed (time.process_time, less what the clock's own calls add
to each interval, calibrated: a call costs microseconds here), the two stacks interleaved, medians.

Agreement: one untimed run per workload and stack records every step (prefill or decode, which requests with
how many scheduled and cached tokens, their lengths and block tables, who was preempted, who finished in which
order, the running queue); the two records must be equal.

nano-vllm is not on PyPI: ``--peer PATH`` is a copy of its repository (a work tree) kept outside this one. Only
nanovllm/engine/{sequence,block_manager,scheduler}.py and nanovllm/sampling_params.py are loaded, by file path,
into private module names; its Config (which needs a model directory and a block size that is a multiple of 256)
is replaced by a plain object holding the five fields its Scheduler reads, so block size 16 works.

    PYTHONPATH=autograder:lib .venv/bin/python scripts/peers_scheduler.py --peer /work/peers/nano-vllm
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import subprocess
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

from servelab.schedulers import scheduler as sl

EOS = 1
NUM_REQUESTS = 2000


@dataclass
class Workload:
    name: str
    block_size: int
    num_blocks: int
    max_num_batched_tokens: int
    max_num_seqs: int
    requests: list[tuple[list[int], int, bool]]   # (prompt, max_tokens, ignore_eos)
    outputs: list[list[int]]                      # the fake model's tokens for each request, by completion index
    per_step: int                                 # requests added before each step


def _tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(2, 32000) for _ in range(n)]   # never EOS: eos only where _outputs puts it


def _outputs(rng: random.Random, max_tokens: int) -> tuple[list[int], bool]:
    """The tokens a request samples and whether it ignores eos: 40% sample an eos somewhere before max_tokens;
    those that heed eos (70%) stop there, the others must go on."""
    out = _tokens(rng, max_tokens)
    ignore_eos = rng.random() < 0.3
    if rng.random() < 0.4:
        out[rng.randrange(max_tokens)] = EOS
    return out, ignore_eos


def make_workload(kind: str, block_size: int, n: int = NUM_REQUESTS, seed: int = 0) -> Workload:
    rng = random.Random(f"{kind}-{block_size}-{seed}")
    scale = block_size / 16
    requests, outputs = [], []
    systems = [_tokens(rng, rng.randint(4, 40) * block_size // 2) for _ in range(12)]
    for _ in range(n):
        max_tokens = rng.randint(1, 96)
        if kind == "shared":
            # a shared system prompt (some end mid-block) and the request's own question
            prompt = rng.choice(systems) + _tokens(rng, rng.randint(1, int(3 * block_size)))
        else:
            prompt = _tokens(rng, max(1, int(rng.lognormvariate(5.0, 0.8) * scale ** 0.5)))
        out, ignore_eos = _outputs(rng, max_tokens)
        requests.append((prompt, max_tokens, ignore_eos))
        outputs.append(out)
    need = [-(-(len(p) + m - 1) // block_size) for p, m, _ in requests]
    # tight: two of the longest requests' worth of blocks, so decodes run out of blocks and preempt; otherwise
    # room for every request at once (no preemption)
    num_blocks = 2 * max(need) if kind == "tight" else sum(need)
    label = {"plain": "plain mixed lengths", "tight": "tight memory (preemptions)",
             "shared": "shared prefixes (cache hits)"}[kind]
    return Workload(f"{label}, bs {block_size}", block_size, num_blocks, 4096, 128, requests, outputs, 25)


def workloads(quick: bool = False) -> list[Workload]:
    n = 60 if quick else NUM_REQUESTS
    return [make_workload(kind, bs, n) for kind in ("plain", "tight", "shared") for bs in (16, 256)]


# ------------------------------------------------------------------------------------------------
# the two stacks behind one small interface


class Servelab:
    name = "servelab"

    def scheduler(self, w: Workload):
        return sl.Scheduler(num_blocks=w.num_blocks, block_size=w.block_size,
                            max_num_batched_tokens=w.max_num_batched_tokens, max_num_seqs=w.max_num_seqs, eos=EOS)

    def sequence(self, w: Workload, prompt, max_tokens, ignore_eos):
        return sl.Sequence(prompt, sl.SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos))

    finished = sl.SequenceStatus.FINISHED
    waiting = sl.SequenceStatus.WAITING


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class NanoVllm:
    """nano-vllm's engine files loaded into private modules; their ``nanovllm.*`` imports are pointed at them
    while they load (and removed afterwards), Config at a stand-in."""

    name = "nano-vllm"

    def __init__(self, root: str):
        root_path = Path(root)
        pkg = root_path / "nanovllm"
        if not (pkg / "engine" / "scheduler.py").is_file():
            raise SystemExit(f"{root} is not a copy of nano-vllm's repository (no nanovllm/engine/scheduler.py)")
        config = types.ModuleType("_peer_nanovllm_config")

        class Config:   # stand-in: the scheduler only reads five fields of it
            def __init__(self, **fields):
                self.__dict__.update(fields)

        config.Config = Config
        aliases = {"nanovllm.config": config}
        saved = {k: sys.modules.get(k) for k in ("nanovllm", "nanovllm.engine", "nanovllm.config",
                                                  "nanovllm.sampling_params", "nanovllm.engine.sequence",
                                                  "nanovllm.engine.block_manager")}
        try:
            for k in ("nanovllm", "nanovllm.engine"):
                sys.modules[k] = types.ModuleType(k)   # empty packages: nanovllm/__init__ would import torch
            sys.modules["nanovllm.config"] = config
            for mod, rel in (("sampling_params", "sampling_params.py"), ("engine.sequence", "engine/sequence.py"),
                             ("engine.block_manager", "engine/block_manager.py"),
                             ("engine.scheduler", "engine/scheduler.py")):
                m = _load(f"_peer_nanovllm_{mod.replace('.', '_')}", pkg / rel)
                aliases[f"nanovllm.{mod}"] = sys.modules[f"nanovllm.{mod}"] = m
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
        self.Config = Config
        self.sp, self.seqm = aliases["nanovllm.sampling_params"], aliases["nanovllm.engine.sequence"]
        self.schm = aliases["nanovllm.engine.scheduler"]
        self.finished = self.seqm.SequenceStatus.FINISHED
        self.waiting = self.seqm.SequenceStatus.WAITING
        self.commit = None
        if (root_path / ".git").exists():
            r = subprocess.run(["git", "-C", str(root_path), "rev-parse", "HEAD"], capture_output=True, text=True)
            self.commit = r.stdout.strip() or None

    def scheduler(self, w: Workload):
        self.seqm.Sequence.block_size = w.block_size   # as LLMEngine does from its config
        return self.schm.Scheduler(self.Config(max_num_seqs=w.max_num_seqs,
                                               max_num_batched_tokens=w.max_num_batched_tokens, eos=EOS,
                                               kvcache_block_size=w.block_size, num_kvcache_blocks=w.num_blocks))

    def sequence(self, w: Workload, prompt, max_tokens, ignore_eos):
        return self.seqm.Sequence(prompt, self.sp.SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos))


# ------------------------------------------------------------------------------------------------
# the driver loop (the same for both)


_OVERHEAD: list[float] = []


def clock_overhead() -> float:
    """CPU seconds that two back-to-back process_time() calls measure (median): what the clock adds to each
    interval it times."""
    if not _OVERHEAD:
        clock, samples = time.process_time, []
        for _ in range(5000):
            t0 = clock()
            samples.append(clock() - t0)
        _OVERHEAD.append(statistics.median(samples))
    return _OVERHEAD[0]


def run(stack, w: Workload, record: bool = False) -> tuple[float, list]:
    """One pass of the workload; the CPU seconds spent in add/schedule/postprocess, and the trace if asked."""
    sch = stack.scheduler(w)
    seqs = [stack.sequence(w, list(p), m, ie) for p, m, ie in w.requests]
    index = {id(s): i for i, s in enumerate(seqs)}
    outputs, finished_status, waiting_status = w.outputs, stack.finished, stack.waiting
    clock, overhead = time.process_time, clock_overhead()
    spent, added, trace, hits, mid = 0.0, 0, [], 0, set()
    for _ in range(1_000_000):
        if added >= len(seqs) and sch.is_finished():
            break
        before = list(sch.running) if record else None
        t0 = clock()
        for s in seqs[added:added + w.per_step]:
            sch.add(s)
        added += w.per_step
        batch, is_prefill = sch.schedule()
        t1 = clock()
        # the fake model: request i's k-th sampled token is outputs[i][k], whatever the batching
        tokens = [outputs[index[id(s)]][len(s.token_ids) - s.num_prompt_tokens] for s in batch]
        if record:
            row = [is_prefill, [(index[id(s)], s.num_scheduled_tokens, s.num_cached_tokens, len(s.token_ids),
                                 tuple(s.block_table)) for s in batch],
                   [index[id(s)] for s in before if s.status == waiting_status]]
            if is_prefill:   # prefix-cache hits: the cached tokens of a prefill that is not a later chunk
                hits += sum(c for i, _, c, _, _ in row[1] if i not in mid)
                mid = {i for i, n, c, length, _ in row[1] if c + n < length}
        t2 = clock()
        sch.postprocess(batch, tokens, is_prefill)
        t3 = clock()
        spent += (t1 - t0) + (t3 - t2) - 2 * overhead
        if record:
            row.append([index[id(s)] for s in batch if s.status == finished_status])
            row.append([index[id(s)] for s in sch.running])
            row.append(len(sch.block_manager.free_block_ids))
            trace.append(row)
    else:
        raise RuntimeError(f"{stack.name} did not finish {w.name}")
    if record:
        trace.append([[s.token_ids for s in seqs], hits])
    return spent, trace


def first_difference(a: list, b: list) -> str | None:
    for step, (x, y) in enumerate(zip(a, b)):
        if x != y:
            what = ["is_prefill", "batch", "preempted", "finished", "running", "free blocks"]
            parts = [what[i] if i < len(what) else str(i) for i in range(min(len(x), len(y))) if x[i] != y[i]]
            return f"step {step}: {', '.join(parts) or 'outputs'} differ"
    if len(a) != len(b):
        return f"servelab runs {len(a) - 1} steps, the peer {len(b) - 1}"
    return None


def measure(peer: str | None, repeats: int = 5, quick: bool = False) -> list[dict]:
    stacks = [Servelab()] + ([NanoVllm(peer)] if peer else [])
    rows = []
    for w in workloads(quick):
        traces = [run(s, w, record=True)[1] for s in stacks]
        agree, note = None, "no peer: servelab alone"
        if peer:
            diff = first_difference(traces[0], traces[1])
            agree = diff is None
            steps = len(traces[0]) - 1
            preempted = sum(len(r[2]) for r in traces[0][:-1])
            note = (f"{steps} steps, {preempted} preemptions, {traces[0][-1][1]} prefix-hit tokens" if agree
                    else f"DISAGREE: {diff}")
        times: list[list[float]] = [[] for _ in stacks]
        for _ in range(1 if quick else repeats):
            for i, s in enumerate(stacks):   # interleaved: A B A B ...
                times[i].append(run(s, w)[0])
        sl_s = statistics.median(times[0])
        peer_s = statistics.median(times[1]) if peer else None
        rows.append({"workload": w.name, "servelab_s": sl_s, "peer_s": peer_s,
                     "ratio": peer_s / sl_s if peer_s is not None and sl_s > 0 else None, "agree": agree,
                     "note": note})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peer", help="a copy of nano-vllm's repository (outside this one)")
    p.add_argument("--peer-commit", help="the commit the copy was taken from (when it has no .git)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="small workloads: a few seconds in all")
    args = p.parse_args(argv)
    if args.peer:
        commit = NanoVllm(args.peer).commit or args.peer_commit or "unknown (no .git; pass --peer-commit)"
        print(f"peer: nano-vllm at {args.peer}, commit {commit}")
    else:
        print("no --peer given: servelab's figures alone, no comparison and no agreement check")
    rows = measure(args.peer, args.repeats, args.quick)
    print(f"{'workload':40} {'servelab s':>11} {'nano-vllm s':>12} {'ratio':>7}  agree  note")
    bad = False
    for r in rows:
        peer_s = f"{r['peer_s']:.3f}" if r["peer_s"] is not None else "-"
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        print(f"{r['workload']:40} {r['servelab_s']:11.3f} {peer_s:>12} {ratio:>7}  {str(r['agree']):5}  {r['note']}")
        bad |= r["agree"] is False
    if bad:
        print("\n!!! AGREEMENT FAILED: servelab and nano-vllm scheduled differently (see the notes above) !!!")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
