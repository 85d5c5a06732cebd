"""servelab's RadixCache against SGLang 0.5.23's real RadixCache: CPU time on eight workloads, results compared.

    python scripts/peers_radix.py              # the wheel in ~/.cache/servelab-peers/ (pip download if missing)
    python scripts/peers_radix.py --peer sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl --repeats 5
    python scripts/peers_radix.py --quick      # small workloads, a few seconds

SGLang's `python/sglang/srt/mem_cache/radix_cache.py` (with the mem_cache files it needs: base_prefix_cache.py,
cache_init_params.py, evict_policy.py) is read from the wheel at run time and executed from memory; nothing of
SGLang is written into the repository. Small stand-ins below replace the rest of sglang (KV events, metrics,
allocator and pool types, hashing utils). SGLang runs on CPU tensors, the way its `create_simulated()` tree does.

Workloads (each at page size 1 and 16; every request: match, lock the matched node, insert, unlock; every 8th
request evicts down to a capacity):
  W1  one shared 2000-token prompt + 1000 private suffixes of 50-500 tokens,
  W2  200 conversations x 5 turns, each turn's key = the previous turn's key + 30-150 new tokens (interleaved),
  W3  random short keys over a vocabulary of 4 token ids (heavy splitting),
  W4  one shared 16,000-token prompt + 300 private suffixes of 50-500 tokens (a long system prompt or document),
and a row for evict(1) on a tree of 100k leaves (ms per call).
Each side gets its inputs in its own form, built before the clock starts. servelab runs twice: on array('q') token
ids and KV indices (the figure against the goal: the form SGLang's Req holds too, which servelab compares as bytes,
and gets the matched and the evicted indices back in)
and on tuples of ints (chapter 04's form, compared as tuples: shown beside it). SGLang gets array('q') token ids and
int64 tensors of KV indices (a req_to_token row); the RadixKey and the request objects (MatchPrefixParams, ...) are
built inside the timed loop, as SGLang's callers do. Repetitions alternate servelab (arrays) / servelab (tuples) /
SGLang; each figure is the median CPU time (time.process_time).
Agreement: matched lengths, inserted prefix lengths, evicted counts and KV indices in order, and the sizes after
every eviction and at the end must be equal; a difference is printed loudly.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import subprocess
import sys
import time
import types
import zipfile
from array import array
from pathlib import Path

from servelab.schedulers.radix_cache import RadixCache

SGLANG_VERSION = "0.5.23"
CACHE_DIR = Path.home() / ".cache" / "servelab-peers"
MEM_CACHE = "sglang/srt/mem_cache/"
# the file the behaviour notes were checked against (/work/shared/notes/sglang-radix-cache.md)
RADIX_SHA256 = "eea7015fcf678167ac7296b08c8dc568ccbe42a4bb106da23b33a7c59debec01"


# ------------------------------------------------------------------------------------------------
# workloads: one list of requests (key, value) and a capacity; the same for both sides


def shared_prompt(rng: random.Random, prompt_len: int, n: int, capacity: int) -> tuple[list, int]:
    """n requests: one shared prompt of prompt_len tokens + a private suffix of 50-500 tokens each."""
    prompt = [rng.randrange(32000) for _ in range(prompt_len)]
    keys = [prompt + [rng.randrange(32000) for _ in range(rng.randrange(50, 501))] for _ in range(n)]
    return keys, capacity


def w1_shared_prompt(rng: random.Random, quick: bool) -> tuple[list, int]:
    return shared_prompt(rng, 2000, 60 if quick else 1000, 30_000)


def w4_long_shared_prompt(rng: random.Random, quick: bool) -> tuple[list, int]:
    # fewer requests than W1: each key is 8x longer (the figure is per workload, not per token)
    return shared_prompt(rng, 16_000, 20 if quick else 300, 60_000)


def w2_multi_turn(rng: random.Random, quick: bool) -> tuple[list, int]:
    n_conv, turns = (20, 5) if quick else (200, 5)
    convs = []
    for _ in range(n_conv):
        key, conv = [], []
        for _ in range(turns):
            key = key + [rng.randrange(32000) for _ in range(rng.randrange(30, 151))]
            conv.append(key)
        convs.append(conv)
    order = [c for c in range(n_conv) for _ in range(turns)]
    rng.shuffle(order)                      # conversations interleave; each one's turns stay in order
    nxt = [0] * n_conv
    keys = []
    for c in order:
        keys.append(convs[c][nxt[c]])
        nxt[c] += 1
    return keys, 20_000


def w3_random_short(rng: random.Random, quick: bool, page_size: int) -> tuple[list, int]:
    n = 1000 if quick else 20_000
    keys = [[rng.randrange(4) for _ in range(rng.randrange(1, 4 * page_size + 4))] for _ in range(n)]
    return keys, 200 * page_size


def with_values(keys: list) -> list[tuple[tuple, tuple]]:
    """(key, fresh KV indices) per request, as tuples of ints: the form servelab's tree keeps them in."""
    out, nxt = [], 0
    for key in keys:
        out.append((tuple(key), tuple(range(nxt, nxt + len(key)))))
        nxt += len(key)
    return out


def as_arrays(requests) -> list[tuple[array, array]]:
    """The same requests with key and KV indices as array('q'): servelab's bulk form (and SGLang's token ids)."""
    return [(array("q", key), array("q", value)) for key, value in requests]


# ------------------------------------------------------------------------------------------------
# the servelab side


def run_servelab(requests, page_size: int, capacity: int) -> tuple[float, dict]:
    cache = RadixCache(page_size=page_size)
    bulk = bool(requests) and type(requests[0][0]) is array   # then the freed indices come back as array('q') too
    matched, inserted, evicted, sizes = [], [], [], []
    start = time.process_time()
    for i, (key, value) in enumerate(requests):
        indices, node = cache.match_prefix(key)   # an array key gets array('q') indices, a tuple key a list
        matched.append(len(indices))
        cache.inc_lock_ref(node)
        inserted.append(cache.insert(key, value))
        cache.dec_lock_ref(node)
        if i % 8 == 7:
            freed = cache.evict(max(0, cache.evictable_size() + cache.protected_size() - capacity), as_array=bulk)
            evicted.append(freed)
            sizes.append((cache.evictable_size(), cache.protected_size()))
    seconds = time.process_time() - start
    return seconds, {"matched": matched, "inserted": inserted, "evicted counts": [len(f) for f in evicted],
                     "evicted indices": [i for f in evicted for i in f],
                     "sizes": sizes + [(cache.evictable_size(), cache.protected_size(), cache.total_size())]}


def build_wide(n_leaves: int, cls_insert) -> None:
    for i in range(n_leaves):
        cls_insert([i, 7], [2 * i, 2 * i + 1])


def evict1_servelab(n_leaves: int, calls: int) -> tuple[float, list]:
    cache = RadixCache()
    build_wide(n_leaves, cache.insert)
    start = time.process_time()
    out = [cache.evict(1) for _ in range(calls)]
    return (time.process_time() - start) / calls, out


# ------------------------------------------------------------------------------------------------
# the SGLang side: its radix_cache.py from the wheel, stand-ins for the rest of sglang


def find_wheel(peer: str | None, fetch: bool) -> tuple[Path | None, str]:
    """The wheel to use and a note. peer: a .whl path; None with fetch: the cache folder, pip download if missing."""
    if peer:
        path = Path(peer)
        return (path, "") if path.is_file() else (None, f"--peer {peer}: no such file")
    if not fetch:
        return None, "no peer given: servelab alone"
    found = sorted(CACHE_DIR.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    if found:
        return found[0], ""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", f"sglang=={SGLANG_VERSION}", "-d", str(CACHE_DIR)]
    print(f"no SGLang wheel in {CACHE_DIR}; running: {' '.join(cmd)}", flush=True)
    try:
        subprocess.run(cmd, check=True, timeout=600)
    except (subprocess.SubprocessError, OSError) as e:
        return None, f"could not download sglang=={SGLANG_VERSION} ({type(e).__name__}): servelab alone"
    found = sorted(CACHE_DIR.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    return (found[0], "") if found else (None, "pip download left no wheel: servelab alone")


class _Anything:
    """A stand-in class for names that SGLang's modules import but this benchmark never uses."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def _stub(name: str, **names) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []  # a package, so that submodules can be registered under it
    module.__dict__.update(names)
    module.__getattr__ = lambda attr: _Anything if not attr.startswith("__") else None
    return module


def load_sglang(wheel: Path) -> tuple[types.ModuleType, str]:
    """SGLang's radix_cache module, executed from the wheel's text; sys.modules is restored afterwards."""
    with zipfile.ZipFile(wheel) as z:
        sources = {name: z.read(f"{MEM_CACHE}{name}.py").decode()
                   for name in ("radix_cache", "base_prefix_cache", "cache_init_params", "evict_policy")}
    digest = hashlib.sha256(sources["radix_cache"].encode()).hexdigest()
    note = "" if digest == RADIX_SHA256 else f"radix_cache.py sha256 {digest[:12]} differs from the checked file"
    saved = {k: v for k, v in sys.modules.items() if k == "sglang" or k.startswith("sglang.")}
    modules: dict[str, types.ModuleType] = {}

    def install(name: str, module: types.ModuleType) -> types.ModuleType:
        sys.modules[name] = modules[name] = module
        return module

    def execute(short: str) -> types.ModuleType:
        name = f"sglang.srt.mem_cache.{short}"
        module = install(name, types.ModuleType(name))
        exec(compile(sources[short], f"{wheel.name}/{MEM_CACHE}{short}.py", "exec"), module.__dict__)
        return module

    try:
        for pkg in ("sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.utils"):
            install(pkg, _stub(pkg))
        for name in ("sglang.srt.mem_cache.allocator", "sglang.srt.mem_cache.memory_pool",
                     "sglang.srt.mem_cache.unified_cache", "sglang.srt.mem_cache.unified_cache.component_type",
                     "sglang.srt.observability", "sglang.srt.observability.metrics_collector",
                     "sglang.srt.runtime_context", "sglang.srt.managers", "sglang.srt.layers"):
            install(name, _stub(name))
        install("sglang.srt.mem_cache.events", _stub("sglang.srt.mem_cache.events", KVCacheEventRecorder=_Anything,
                                                     LoRANameTable=_Anything, KvEventLoraNames=_Anything))
        install("sglang.srt.utils.common", _stub("sglang.srt.utils.common",
                                                 ceil_align=lambda x, a: -(-x // a) * a))
        policy = execute("evict_policy")
        strategies = {"lru": policy.LRUStrategy, "lfu": policy.LFUStrategy}
        install("sglang.srt.mem_cache.utils", _stub(
            "sglang.srt.mem_cache.utils",
            get_eviction_strategy=lambda name, config=None: strategies[name](**(config or {})),
            split_node_hash_value=lambda h, split_len, page_size: (None, None) if h is None else
            (h[:split_len // page_size], h[split_len // page_size:])))
        execute("cache_init_params")
        base = execute("base_prefix_cache")
        radix = execute("radix_cache")
        radix.base = base
    finally:
        for name in modules:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
    return radix, note


class RecordingAllocator:
    """SGLang's allocator as the tree sees it: a device and free_segment; keeps what it is handed."""

    device = "cpu"

    def __init__(self):
        self.freed = []

    def free_segment(self, value, start_pos=0):
        self.freed.append(value)


def sglang_inputs(torch, requests):
    """Token ids as array('q') (what SGLang's Req holds) and KV indices as an int64 tensor (a req_to_token row)."""
    return [(array("q", key), torch.tensor(value, dtype=torch.int64)) for key, value in requests]


def run_sglang(radix, inputs, page_size: int, capacity: int) -> tuple[float, dict]:
    base = radix.base
    alloc = RecordingAllocator()
    cache = radix.RadixCache.create_simulated(mock_allocator=alloc, page_size=page_size)
    MatchPrefixParams, InsertParams, EvictParams = base.MatchPrefixParams, base.InsertParams, base.EvictParams
    RadixKey = radix.RadixKey
    matched, inserted, counts, sizes = [], [], [], []
    start = time.process_time()
    for i, (token_ids, value) in enumerate(inputs):
        key = RadixKey(token_ids)   # as the scheduler wraps a request's ids for each call
        m = cache.match_prefix(MatchPrefixParams(key=key))
        matched.append(m.device_prefix_len)
        node = m.last_device_node
        cache.inc_lock_ref(node)
        inserted.append(cache.insert(InsertParams(key=key, value=value)).prefix_len)
        cache.dec_lock_ref(node)
        if i % 8 == 7:
            n = max(0, cache.evictable_size() + cache.protected_size() - capacity)
            counts.append(cache.evict(EvictParams(num_tokens=n)).num_tokens_evicted)
            sizes.append((cache.evictable_size(), cache.protected_size()))
    seconds = time.process_time() - start
    return seconds, {"matched": matched, "inserted": inserted, "evicted counts": counts,
                     "evicted indices": [int(i) for v in alloc.freed for i in v.tolist()],
                     "sizes": sizes + [(cache.evictable_size(), cache.protected_size(), cache.total_size())]}


def evict1_sglang(torch, radix, n_leaves: int, calls: int) -> tuple[float, list]:
    alloc = RecordingAllocator()
    cache = radix.RadixCache.create_simulated(mock_allocator=alloc, page_size=1)
    InsertParams, EvictParams = radix.base.InsertParams, radix.base.EvictParams
    build_wide(n_leaves, lambda key, value: cache.insert(InsertParams(
        key=radix.RadixKey(array("q", key)), value=torch.tensor(value, dtype=torch.int64))))
    out = []
    start = time.process_time()
    for _ in range(calls):
        before = len(alloc.freed)
        cache.evict(EvictParams(num_tokens=1))
        out.append(before)
    seconds = (time.process_time() - start) / calls
    return seconds, [[int(i) for v in alloc.freed[b:e] for i in v.tolist()]
                     for b, e in zip(out, out[1:] + [len(alloc.freed)])]


# ------------------------------------------------------------------------------------------------


def _differs(a: dict, b: dict) -> str:
    bad = [k for k in a if a[k] != b[k]]
    if not bad:
        return ""
    k = bad[0]
    i = next((j for j, (x, y) in enumerate(zip(a[k], b[k])) if x != y), min(len(a[k]), len(b[k])))
    return f"differ in {', '.join(bad)} (first: {k}[{i}])"


def agree(ours: dict, theirs: dict) -> tuple[bool, str]:
    """Whether the two sides gave the same results; the note names the first difference."""
    why = _differs(ours, theirs)
    return not why, why


def measure(peer: str | None, repeats: int = 5, quick: bool = False, fetch: bool = False) -> list[dict]:
    wheel, note = find_wheel(peer, fetch)
    radix = torch = None
    if wheel is not None:
        try:
            import torch
            radix, load_note = load_sglang(wheel)
            note = load_note
        except Exception as e:   # a different wheel layout, no torch: servelab alone, and say why
            radix, note = None, f"could not load SGLang from {wheel.name}: {type(e).__name__}: {e}"
    rows = []
    for name, make in (("W1 shared 2000-token prompt", lambda rng, ps: w1_shared_prompt(rng, quick)),
                       ("W2 multi-turn chats", lambda rng, ps: w2_multi_turn(rng, quick)),
                       ("W3 random short keys, 4 tokens", lambda rng, ps: w3_random_short(rng, quick, ps)),
                       ("W4 shared 16000-token prompt", lambda rng, ps: w4_long_shared_prompt(rng, quick))):
        for ps in (1, 16):
            keys, capacity = make(random.Random(17 * ps + len(name)), ps)
            requests = with_values(keys)
            arrays = as_arrays(requests)
            inputs = sglang_inputs(torch, requests) if radix else None
            ours, tuples, theirs, ok, why = [], [], [], None, note
            for rep in range(repeats):
                s, res = run_servelab(arrays, ps, capacity)
                ours.append(s)
                s, res_tuples = run_servelab(requests, ps, capacity)
                tuples.append(s)
                if radix:
                    t, res_peer = run_sglang(radix, inputs, ps, capacity)
                    theirs.append(t)
                if rep == 0:   # the two forms must build the same tree, and agree with SGLang
                    forms_ok, forms_why = agree(res, res_tuples)
                    if not forms_ok:
                        ok, why = False, f"servelab's arrays and tuples {forms_why}"
                    elif radix:
                        ok, why = agree(res, res_peer)
            rows.append(_row(f"{name} (page {ps}, {len(requests)} requests)", ours, theirs, ok, why, tuples))
    n_leaves, calls = (2000, 20) if quick else (100_000, 5)
    ours, theirs, ok, why = [], [], None, note
    for _ in range(repeats):
        s, res = evict1_servelab(n_leaves, calls)
        ours.append(s)
        if radix:
            t, res_peer = evict1_sglang(torch, radix, n_leaves, calls)
            theirs.append(t)
            if ok is None:
                ok, why = agree({"evicted": res}, {"evicted": res_peer})
    rows.append(_row(f"evict(1) on {n_leaves} leaves (per call)", ours, theirs, ok, why))
    return rows


def _row(workload, ours, theirs, ok, note, tuples=None) -> dict:
    s = statistics.median(ours)
    t = statistics.median(theirs) if theirs else None
    return {"workload": workload, "servelab_s": s, "peer_s": t, "ratio": t / s if t and s else None,
            "agree": ok, "note": note, "tuples_s": statistics.median(tuples) if tuples else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", help=f"an sglang-{SGLANG_VERSION} .whl (default: {CACHE_DIR}, downloaded if missing)")
    parser.add_argument("--no-download", action="store_true", help="without --peer: servelab alone, no pip download")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small workloads (a few seconds)")
    args = parser.parse_args(argv)
    rows = measure(args.peer, args.repeats, args.quick, fetch=not args.no_download)
    print(f"{'workload':<58} {'servelab':>11} {'(tuples)':>11} {'SGLang ' + SGLANG_VERSION:>13} {'x faster':>9}  agree")
    failed = False
    for r in rows:
        ms = r["workload"].startswith("evict(1)")
        unit, k = ("ms", 1e3) if ms else ("s", 1)
        peer = f"{r['peer_s'] * k:.3f} {unit}" if r["peer_s"] is not None else "-"
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        tuples = f"{r['tuples_s'] * k:.3f} {unit}" if r.get("tuples_s") is not None else "-"
        print(f"{r['workload']:<58} {r['servelab_s'] * k:>8.3f} {unit:<2} {tuples:>11} {peer:>13} {ratio:>9}  "
              f"{r['agree']}"
              + (f"  {r['note']}" if r["note"] else ""))
        if r["agree"] is False:
            failed = True
            print(f"!!! AGREEMENT FAILED: {r['workload']}: {r['note']}", flush=True)
    if rows and rows[0]["peer_s"] is None:
        print(f"servelab's figures alone (no SGLang figures: {rows[0]['note'] or 'no peer'})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
