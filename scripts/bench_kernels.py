"""Time the kernels on a GPU against a copy kernel's bandwidth and torch's SDPA, and write the table.

    python scripts/bench_kernels.py                  # on a CUDA GPU; writes bench/kernels_results.md
    python scripts/bench_kernels.py --sweep          # also a few tile / warp / stage / split settings
    python scripts/bench_kernels.py --sweep-only --budget 90   # only the sweep, appended, for at most 90 s
    python scripts/bench_kernels.py --smoke          # tiny shapes on the CPU (interpreter): checks the script

The results file is written as the run goes: its header and the copy bandwidth first, then each row the
moment it is measured (flushed), so a run stopped by a timeout keeps every row it measured; a last line
says the table is complete. ``--budget`` starts no configuration or sweep setting after that many seconds
(a row says which were left out). The sweep ends with its winners and a ``tuning.TUNED_DECODE`` entry for
the running Triton, to be committed by hand: nothing is cached on the machine.

One run measures, in order:
1. copy bandwidth: torch's ``dst.copy_(src)`` and a Triton streaming copy on a buffer ten times the L2,
   counting bytes read plus bytes written; the faster of the two is the denominator below;
2. each configuration (bf16, 32 query / 8 KV heads, head_dim 128, block 16): the kernel's time (median of
   ``triton.testing.do_bench``, which clears the L2 before every repetition), its effective bandwidth
   (bytes of K/V, queries and outputs that must move, over time) as a fraction of the copy bandwidth, and
   beside it torch's SDPA on the same K/V made contiguous (gathering excluded), and gather-then-SDPA
   (gathering included), each the fastest of SDPA's backends (flash, cuDNN, memory-efficient, math).
   Prefill rows also give TFLOP/s (causal FLOPs only);
3. the output against the float64 reference, once per configuration.

Caches hold at least ten times the L2 size, and each sequence's blocks are distinct block ids taken from a
random permutation of the whole cache, so consecutive blocks are not neighbours in memory and a block is
never re-read from L2 by a second sequence.

Goals: >= 0.85 of copy bandwidth on the 64 x 4K decode; >= 0.80 on 4 x 32K with split-KV,
and faster than SDPA on contiguous K/V there. A missed goal is reported, not an error; a wrong output
is an error (exit status 1). A ``--smoke`` run judges no goal: interpreter timings say nothing of a GPU.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import math
import platform
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import servelab.kernels  # noqa: F401  (picks compiled or interpreted kernels before any below is defined)
from servelab.kernels.cases import (  # noqa: F401 - the runner's names, as tests and the notebook use them
    REPO,
    RESULTS,
    Case,
    bytes_moved,
    causal_flops,
    full_cases,
    paged_inputs,
    smoke_cases,
)
from servelab.kernels.decode import plan_paged_decode
from servelab.kernels.launch import interpreted, run_all
from servelab.kernels.prefill import plan_prefill_attention
from servelab.kernels.reference import ref_paged_decode, ref_prefill_attention
from servelab.kernels.split_kv import plan_split_kv_decode
from servelab.kernels.tuning import TUNED_DECODE, decode_entry, occupancy, version_key

BF16_TOLERANCE = 1.6e-2


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


@dataclass
class Row:
    case: str
    kernel: str
    us: float = math.nan
    bytes: int = 0
    tflops: float = math.nan
    sdpa_us: float = math.nan
    gather_sdpa_us: float = math.nan
    max_err: float = math.nan
    correct: bool = True
    note: str = ""
    error: str = ""                     # the case raised (e.g. out of memory): no figures, the run fails
    programs_per_sm: int = 0            # the kernel's occupancy (tuning.occupancy)


def timer(device: str):
    """Median microseconds of ``fn()``: do_bench on a GPU, a wall clock in the interpreter (smoke only)."""
    if device == "cuda":
        return lambda fn: triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3

    def wall(fn):  # one call: the interpreter compiles nothing to warm up, and a smoke run's figures mean nothing
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e6
    return wall


def copy_bandwidth(device: str, nbytes: int, time_us) -> dict[str, float]:
    """Bytes read + written per second by torch's copy_ and by ``copy_kernel`` on ``nbytes`` of bf16."""
    src = torch.randn(nbytes // 2, device=device).to(torch.bfloat16)
    dst = torch.empty_like(src)
    block = 8192
    grid = (triton.cdiv(src.numel(), block),)
    torch_us = time_us(lambda: dst.copy_(src))
    triton_us = time_us(lambda: copy_kernel[grid](src, dst, src.numel(), BLOCK=block, num_warps=8))
    moved = 2 * src.numel() * src.element_size()
    return {"torch copy_": moved / torch_us * 1e6, "triton copy": moved / triton_us * 1e6}


def plan(case: Case, q, k_cache, v_cache, block_tables, seq_lens, cu=None, **tuning):
    if case.kernel == "paged_decode":
        return plan_paged_decode(q, k_cache, v_cache, block_tables, seq_lens, check_indices=False, **tuning)
    if case.kernel == "split_kv_decode":
        # None: auto_num_splits, from the device's SMs and the compiled kernel's occupancy
        num_splits = tuning.pop("num_splits", case.num_splits)
        return plan_split_kv_decode(q, k_cache, v_cache, block_tables, seq_lens, num_splits=num_splits,
                                    check_indices=False, **tuning)
    return plan_prefill_attention(q, k_cache, v_cache, block_tables, seq_lens, cu, check_indices=False, **tuning)


SDPA_BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION", "MATH")


def best_sdpa(time_us, q4, kv, mask, group: int) -> tuple[float, str]:
    """The fastest SDPA backend on these inputs: ``(microseconds, "backend")``; ``kv()`` makes (K, V).

    Every backend torch has is timed, not only the one its dispatcher would pick, so "faster than SDPA"
    means faster than its best kernel here. A backend that refuses GQA (``enable_gqa``) is tried again
    with the KV heads repeated, which costs it ``group`` times the K/V bytes; the label then says so.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def repeated():
        k, v = kv()
        return k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)

    best = (math.nan, "none ran")
    for name in SDPA_BACKENDS:
        backend = getattr(SDPBackend, name, None)
        if backend is None:
            continue
        for gqa, make, label in ((True, kv, name.lower()), (False, repeated, f"{name.lower()}, KV heads repeated")):
            def run(backend=backend, gqa=gqa, make=make):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q4, *make(), attn_mask=mask, enable_gqa=gqa)
            try:
                with warnings.catch_warnings():  # a refusing backend warns why before it raises
                    warnings.simplefilter("ignore")
                    run()
                    us = time_us(run)
            except (RuntimeError, TypeError, NotImplementedError):
                continue
            if not us >= best[0]:  # also replaces the initial NaN
                best = (us, label)
            break
    return best


def sdpa_baselines(case: Case, q, k_cache, v_cache, block_tables, time_us) -> tuple[float, float, str]:
    """(SDPA on contiguous K/V, gather then SDPA) in microseconds, each its best backend, and a note."""
    if len(set(case.seq_lens)) > 1:
        return math.nan, math.nan, "SDPA: n/a for mixed lengths (a padding mask turns off its fused kernels)"
    num_seqs, seq_len = len(case.seq_lens), case.seq_lens[0]
    _, block_size, num_kv_heads, head_dim = k_cache.shape
    table = block_tables.long()

    def gather(cache):  # [num_seqs, num_kv_heads, seq_len, head_dim]
        return cache[table].reshape(num_seqs, -1, num_kv_heads, head_dim)[:, :seq_len].transpose(1, 2)

    if case.q_lens is None:
        q4 = q[:, :, None, :]              # [num_seqs, num_q_heads, 1, head_dim]
        mask = None
    else:
        q_len = case.q_lens[0]
        q4 = q.view(num_seqs, q_len, q.shape[1], head_dim).transpose(1, 2)
        from torch.nn.attention.bias import causal_lower_right
        mask = causal_lower_right(q_len, seq_len)
    group = q.shape[1] // num_kv_heads
    k, v = gather(k_cache).contiguous(), gather(v_cache).contiguous()
    contiguous_us, contiguous_by = best_sdpa(time_us, q4, lambda: (k, v), mask, group)
    gathered_us, gathered_by = best_sdpa(time_us, q4, lambda: (gather(k_cache), gather(v_cache)), mask, group)
    return contiguous_us, gathered_us, f"fastest SDPA backend: {contiguous_by} (contiguous), {gathered_by} (gathered)"


def run_case(case: Case, *, device, time_us, min_cache_bytes, baselines=True, check=True, **shape) -> Row:
    q, k_cache, v_cache, block_tables, seq_lens = paged_inputs(case, device=device, min_cache_bytes=min_cache_bytes,
                                                               **shape)
    cu = None
    if case.q_lens is not None:
        cu = torch.tensor([0] + case.q_lens, device=device).cumsum(0).to(torch.int32)
    out, launches = plan(case, q, k_cache, v_cache, block_tables, seq_lens, cu, **case.tuning)
    occupied = occupancy(launches[0])
    row = Row(case.name, case.kernel, programs_per_sm=occupied.programs_per_sm)
    # the occupancy a compiled kernel really has (an interpreter has none: the table's figure is not shown)
    details = ([f"{launches[0].grid[2]} splits"] if case.kernel == "split_kv_decode" else []) + (
        [f"{occupied.programs_per_sm}/SM, {occupied.registers} registers"] if occupied.registers else [])
    row.kernel += f" ({', '.join(details)})" if details else ""
    run_all(launches)
    if check:
        if case.q_lens is None:
            ref = ref_paged_decode(q, k_cache, v_cache, block_tables, seq_lens)
        else:
            ref = ref_prefill_attention(q, k_cache, v_cache, block_tables, seq_lens, cu)
        err = (out.double() - ref).abs()
        row.max_err = err.max().item()
        row.correct = bool(torch.isfinite(out).all()) and bool((err <= BF16_TOLERANCE * (1 + ref.abs())).all())
        del ref, err
    row.us = time_us(lambda: run_all(launches))
    row.bytes = bytes_moved(case, q, k_cache)
    row.tflops = causal_flops(case, q.shape[1], q.shape[2]) / row.us / 1e6
    if baselines:
        row.sdpa_us, row.gather_sdpa_us, row.note = sdpa_baselines(case, q, k_cache, v_cache, block_tables, time_us)
    return row


def sweep_settings(case: Case, smoke: bool = False) -> list[dict]:
    """Settings to time for ``case``, nearest the defaults first: a sweep cut short by its budget keeps those."""
    entry, _ = decode_entry()
    default = dict(tile=entry.tile, num_warps=entry.num_warps, num_stages=entry.num_stages)
    splits = [dict(num_splits=n) for n in (8, 16, 32, 64)] if case.kernel == "split_kv_decode" else []
    if smoke:  # the interpreter ignores warps and stages: one setting a case checks the code path
        return [dict(num_splits=2)] if splits else [default]
    # every Triton version's entry first (the running one's first of all), then the rest nearest first
    tables = [dict(tile=e.tile, num_warps=e.num_warps, num_stages=e.num_stages) for e in TUNED_DECODE.values()]
    grid = [dict(tile=t, num_warps=w, num_stages=st) for t in (32, 64, 128) for w in (4, 8) for st in (2, 3)]
    grid.sort(key=lambda d: sum(d[k] != default[k] for k in default))
    firsts = []
    for d in [default, *tables]:
        firsts += [d] if d not in firsts else []
    return firsts + splits + [d for d in grid if d not in firsts]


def sweep_rows(cases, *, device, time_us, min_cache_bytes, write=None, deadline=math.inf, denominator=math.nan,
               smoke=False, **shape) -> list[Row]:
    """Settings around the defaults for the cases with goals (no baselines, no reference check).

    The cases take turns, a setting each, so a sweep cut short by ``deadline`` (time.monotonic) has the
    first settings of every case. Each row is written (``write``) the moment it is measured.
    """
    per_case = [[(case, tuning) for tuning in sweep_settings(case, smoke)] for case in cases if case.goal is not None]
    queue = [item for turn in itertools.zip_longest(*per_case) for item in turn if item is not None]
    rows = []
    for done, (case, tuning) in enumerate(queue):
        if time.monotonic() > deadline:
            note = f"stopped: out of time after {done} of {len(queue)} settings"
            print(note, flush=True)
            if write:
                write(f"| - | {note} | - | - |")
            break
        variant = Case(case.name, case.seq_lens, case.q_lens, case.kernel, case.num_splits, tuning=tuning)
        try:
            row = run_case(variant, device=device, time_us=time_us, min_cache_bytes=min_cache_bytes,
                           baselines=False, check=False, **shape)
        except Exception as e:  # e.g. out of shared memory for a large tile: a result, not a crash
            row = Row(case.name, case.kernel, error=first_line(e))
        row.note = ", ".join(f"{k}={v}" for k, v in tuning.items()) + (" " + row.error if row.error else "")
        rows.append(row)
        if write:
            write(render_sweep_row(row, denominator))
        torch.cuda.empty_cache() if device == "cuda" else None
    return rows


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:100] if text else ''}"


def fmt(x, spec):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


TABLE_HEAD = ["| configuration | kernel | µs | GB/s | of copy | TFLOP/s | SDPA contiguous µs | gather+SDPA µs "
              "| max abs err | goal |",
              "|---|---|---|---|---|---|---|---|---|---|"]
SWEEP_HEAD = ["| configuration | setting | µs | of copy |", "|---|---|---|---|"]


def render_copy(copy_bw) -> list[str]:
    denominator = max(copy_bw.values())
    return ["| copy | GB/s |", "|---|---|", *[f"| {name} | {bw / 1e9:.0f} |" for name, bw in copy_bw.items()], "",
            f"Fractions below are of {denominator / 1e9:.0f} GB/s (the faster copy).", ""]


def render_row(r: Row, denominator: float, case: Case | None, judge: bool = True) -> str:
    bw = r.bytes / r.us * 1e6 if r.bytes else math.nan
    verdict = ""
    if case is not None and case.goal is not None:
        met = bw / denominator >= case.goal and (not case.beat_sdpa or r.us < r.sdpa_us)
        verdict = (f">= {case.goal:.2f}" + (", < SDPA" if case.beat_sdpa else "")
                   + ((": met" if met else ": MISSED") if judge else ": not judged (CPU smoke run)"))
    if not r.correct:
        verdict = "WRONG OUTPUT " + verdict
    if r.error:
        verdict = "FAILED (see the note)"
    return (f"| {r.case} | {r.kernel} | {fmt(r.us, '.1f')} | {fmt(bw / 1e9, '.0f')} | "
            f"{fmt(bw / denominator, '.2f')} | {fmt(r.tflops, '.1f')} | {fmt(r.sdpa_us, '.1f')} | "
            f"{fmt(r.gather_sdpa_us, '.1f')} | {fmt(r.max_err, '.1e')} | {verdict} |")


def render_notes(rows) -> list[str]:
    notes = [f"- {r.case}: {r.error or r.note}" for r in rows if r.note or r.error]
    return ["", *notes] if notes else []


def render_sweep_row(r: Row, denominator: float) -> str:
    bw = r.bytes / r.us * 1e6 if r.bytes else math.nan
    return f"| {r.case} | {r.note} | {fmt(r.us, '.1f')} | {fmt(bw / denominator, '.2f')} |"


def render(rows, sweep, copy_bw, cases, header, judge: bool = True) -> str:
    """The whole results text at once (the run itself writes the same lines one by one)."""
    denominator = max(copy_bw.values())
    goals = {c.name: c for c in cases}
    lines = [*header, "", *render_copy(copy_bw), *TABLE_HEAD,
             *[render_row(r, denominator, goals.get(r.case), judge) for r in rows], *render_notes(rows)]
    if sweep:
        lines += ["", "Sweep (no baselines):", "", *SWEEP_HEAD, *[render_sweep_row(r, denominator) for r in sweep]]
    return "\n".join(lines) + "\n"


def sweep_winners(sweep: list[Row]) -> list[str]:
    """Per configuration, the fastest setting against the defaults; the paged-decode winner as a table entry."""
    entry, known = decode_entry()
    default = f"tile={entry.tile}, num_warps={entry.num_warps}, num_stages={entry.num_stages}"
    lines = []
    for name in dict.fromkeys(r.case for r in sweep):
        timed = [r for r in sweep if r.case == name and not r.error and not math.isnan(r.us)]
        if not timed:
            continue
        best = min(timed, key=lambda r: r.us)
        base = next((r for r in timed if r.note == default), None)
        versus = f"; the defaults ({default}): {base.us:.1f} µs" if base else ""
        lines.append(f"- {name}: fastest {best.note} at {best.us:.1f} µs{versus}")
        won = dict(kv.split("=") for kv in best.note.split(", ") if "=" in kv)
        if best.kernel.startswith("paged_decode") and "tile" in won:
            major, minor = version_key(triton.__version__)
            lines.append(f'- `tuning.TUNED_DECODE` entry for Triton {major}.{minor} (to commit by hand; now '
                         f'the {known} entry, {default}): `"{major}.{minor}": DecodeTuning(tile={won["tile"]}, '
                         f'num_warps={won["num_warps"]}, num_stages={won["num_stages"]}, '
                         f'programs_per_sm={best.programs_per_sm}, source="timed by scripts/gpu_check.sh on '
                         f'{dt.date.today().isoformat()}")`')
    return lines


class Results:
    """The results file, written line by line as the run goes; each line is flushed and echoed to stdout."""

    def __init__(self, path: Path, append: bool = False):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fh = open(path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115 - kept open for the run

    def write(self, *lines: str) -> None:
        text = "".join(line + "\n" for line in lines)
        self.fh.write(text)
        self.fh.flush()  # on disk for a later step even if a timeout kills this process next
        print(text, end="", flush=True)

    def close(self) -> None:
        self.fh.close()


def measure_table(cases, measure, write, denominator: float, judge: bool = True,
                  deadline: float = math.inf) -> list[Row]:
    """``measure(case)`` for each case, each row written the moment it is measured.

    A case that raises becomes a FAILED row and the next case runs; none starts after ``deadline``. A
    ``BaseException`` (a kill, Ctrl-C) stops the table, leaving the rows written so far.
    """
    rows = []
    write(*TABLE_HEAD)
    for case in cases:
        if time.monotonic() > deadline:
            row = Row(case.name, case.kernel, error="not measured: out of time (--budget)")
        else:
            try:
                row = measure(case)
            except Exception as e:  # out of memory, a compile error: recorded, and the run fails at the end
                row = Row(case.name, case.kernel, error=first_line(e))
        rows.append(row)
        write(render_row(row, denominator, case, judge))
    return rows


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None, help=f"results file (default {RESULTS})")
    parser.add_argument("--sweep", action="store_true", help="also a few tile / warp / stage / split settings")
    parser.add_argument("--sweep-only", action="store_true", help="only the sweep, appended to the results file")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds: start no configuration or sweep setting after this long")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU in the interpreter")
    args = parser.parse_args(argv)
    deadline = started + args.budget if args.budget is not None else math.inf

    if args.smoke:
        # tiny shapes: on CPU tensors in the interpreter, or on the GPU where the kernels are compiled
        device, cases = ("cpu" if interpreted(copy_kernel) else "cuda"), smoke_cases()
        shape = dict(num_q_heads=8, num_kv_heads=2, head_dim=64, block_size=16, dtype=torch.float16)
        min_cache_bytes = 1 << 20
        out_path = args.out or REPO / "bench" / "out" / "kernels_smoke.md"
        if out_path.resolve() == RESULTS.resolve():
            parser.error(f"a smoke run never writes {RESULTS.name}: its figures are not a GPU's")
    else:
        if not torch.cuda.is_available():
            print("scripts/bench_kernels.py needs a CUDA GPU; nothing measured, nothing written. "
                  "(--smoke runs tiny shapes on the CPU to check the script.)")
            return 2
        device, cases = "cuda", full_cases()
        shape = dict(num_q_heads=32, num_kv_heads=8, head_dim=128, block_size=16, dtype=torch.bfloat16)
        min_cache_bytes = 10 * torch.cuda.get_device_properties(0).L2_cache_size
        out_path = args.out or RESULTS

    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        smoke = "smoke run, tiny shapes: " if args.smoke else ""
        machine = (f"{smoke}{props.name}, {props.multi_processor_count} SMs, L2 {props.L2_cache_size / 2**20:.0f} MiB, "
                   f"{props.total_memory / 2**30:.0f} GiB")
    else:
        machine = f"CPU smoke run (Triton interpreter, wall clock): {platform.processor() or platform.machine()}"
    entry, known = decode_entry()
    command = (f"python scripts/bench_kernels.py{' --sweep' if args.sweep else ''}"
               f"{' --sweep-only' if args.sweep_only else ''}{' --smoke' if args.smoke else ''}")
    versions = (f"python {platform.python_version()}, torch {torch.__version__}, triton {triton.__version__} "
                f"(decode defaults of Triton {known}: tile {entry.tile}, {entry.num_warps} warps, "
                f"{entry.num_stages} stages)")
    time_us = timer(device)
    common = dict(device=device, time_us=time_us, min_cache_bytes=min_cache_bytes, **shape)

    results = Results(out_path, append=args.sweep_only)
    rows = []
    if args.sweep_only:
        results.write("", f"## Sweep (`{command}`)", "", f"Machine: {machine}; {versions}.", "")
    else:
        results.write("# Paged-attention kernels: measured", "",
                      f"Written by `{command}` on {dt.date.today().isoformat()}, row by row as measured.",
                      f"Machine: {machine}; {versions}.",
                      f"Shapes: {shape['num_q_heads']} query / {shape['num_kv_heads']} KV heads, head_dim "
                      f"{shape['head_dim']}, {str(shape['dtype']).removeprefix('torch.')}, block "
                      f"{shape['block_size']}; caches >= {min_cache_bytes / 2**20:.0f} MiB, shuffled block ids.", "")
    copy_bw = copy_bandwidth(device, max(min_cache_bytes, 1 << 20), time_us)
    denominator = max(copy_bw.values())
    if not args.sweep_only:
        results.write(*render_copy(copy_bw))

        def measure(case):
            row = run_case(case, **common)
            if device == "cuda":
                torch.cuda.empty_cache()
            return row
        rows = measure_table(cases, measure, results.write, denominator, judge=not args.smoke, deadline=deadline)
        measured = sum(not r.error for r in rows)
        results.write(*render_notes(rows), "",
                      f"Table complete: {measured} of {len(rows)} configurations measured in "
                      f"{time.monotonic() - started:.0f} s.")
    if args.sweep or args.sweep_only:
        if not args.sweep_only:
            results.write("", "Sweep (no baselines):", "")
        results.write(*SWEEP_HEAD)
        sweep = sweep_rows(cases, write=results.write, deadline=deadline, denominator=denominator,
                           smoke=args.smoke, **common)
        results.write("", *sweep_winners(sweep), "", f"Sweep: {len(sweep)} settings in "
                      f"{time.monotonic() - started:.0f} s.")
    results.close()
    print(f"written to {out_path}")
    return 0 if all(r.correct and not r.error for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
