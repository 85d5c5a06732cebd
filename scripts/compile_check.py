"""Compile every kernel for Hopper (sm_90) with Triton's own compiler, on a machine without a GPU.

    python scripts/compile_check.py            # a table; exit status 1 if a kernel would not run
    python scripts/compile_check.py --json     # the same as JSON lines (for tests)
    python scripts/compile_check.py --more     # also group 1 and fp32
    python scripts/compile_check.py --sweep    # also candidate tile / warp / stage settings
    python scripts/compile_check.py --probe-oversized   # also one launch that must be caught

Triton's interpreter never runs out of shared memory or registers, so the CPU tests cannot see a kernel
that would fail to launch on the GPU, or one that spills registers to local memory. This check compiles
each entry point's launch exactly as a call would plan it (``plan_*``: same constexprs, same argument
specialisation, same num_warps and num_stages) down to a cubin, then reports:
- shared memory per block (``metadata.shared``); above 232,448 bytes (227 KiB, Hopper's opt-in
  maximum per block) the launch fails with OutOfResources: the kernel "would not fit", and the check fails;
- registers per thread and spill bytes, from ``ptxas -v`` on the generated PTX (the ptxas Triton uses);
  spills are reported, and fail the check only with ``--fail-on-spills``;
- an estimate of resident blocks per SM from registers, shared memory and threads (65,536 registers,
  228 KiB, 2,048 threads: ``tuning.blocks_per_sm``).

It needs compiled kernels, so it runs with ``TRITON_INTERPRET=0``; started in an interpreter process
(servelab.kernels chose the interpreter for lack of a GPU) it re-runs itself in a subprocess that has it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

import torch

import servelab.kernels  # noqa: F401  (picks compiled or interpreted kernels before any below is defined)
from servelab.kernels.decode import paged_decode_kernel, plan_paged_decode
from servelab.kernels.launch import Launch, interpreted
from servelab.kernels.prefill import plan_prefill_attention
from servelab.kernels.split_kv import plan_split_kv_decode
from servelab.kernels.store import plan_store_kvcache
from servelab.kernels.tuning import blocks_per_sm

SM90_MAX_SHARED_PER_BLOCK = 232_448  # 227 KiB: 228 KiB per SM less 1 KiB reserved per block


@dataclass
class CompileReport:
    kernel: str
    config: str
    ok: bool = False
    shared_bytes: int = 0
    registers: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    num_warps: int = 4
    blocks_per_sm: int = 0
    seconds: float = 0.0
    error: str = ""

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0


def fits(shared_bytes: int, limit: int = SM90_MAX_SHARED_PER_BLOCK) -> bool:
    """Whether a block with this much shared memory can launch on sm_90.

    >>> fits(36_864), fits(232_448), fits(270_336)
    (True, True, False)
    """
    return shared_bytes <= limit


def parse_ptxas(log: str) -> tuple[int, int, int]:
    """``(registers, spill store bytes, spill load bytes)`` from ``ptxas -v`` output.

    >>> parse_ptxas("ptxas info    : 0 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\\n"
    ...             "ptxas info    : Used 255 registers, used 1 barriers")
    (255, 8, 12)
    """
    registers = max((int(n) for n in re.findall(r"Used (\d+) registers", log)), default=0)
    stores = sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", log))
    loads = sum(int(n) for n in re.findall(r"(\d+) bytes spill loads", log))
    return registers, stores, loads


def compile_for_sm90(launch: Launch):
    """Compile ``launch`` for sm_90 as the JIT would at launch time; returns Triton's CompiledKernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    kernel = launch.kernel
    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    # The JIT's own binder: it specialises integers equal to 1 and marks 16-divisible pointers and
    # integers, so the compiled code is the code a real launch with these arguments would get.
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    kwargs = {**launch.constexprs, **launch.options}
    bound_args, specialization, options = binder(*launch.args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound_args, specialization, options)
    return triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=target, options=options.__dict__)


def run_ptxas(ptx: str) -> str:
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        cmd = [get_ptxas(90).path, "-v", "--regAllocOptLevel=2", "--gpu-name=sm_90a", src, "-o", src + ".o"]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stderr


def check_launch(launch: Launch, config: str) -> CompileReport:
    report = CompileReport(kernel=launch.name, config=config, num_warps=launch.options.get("num_warps", 4))
    start = time.perf_counter()
    try:
        compiled = compile_for_sm90(launch)
        report.shared_bytes = int(compiled.metadata.shared)
        report.registers, report.spill_store_bytes, report.spill_load_bytes = parse_ptxas(
            run_ptxas(compiled.asm["ptx"]))
        report.blocks_per_sm = blocks_per_sm(report.registers, report.num_warps, report.shared_bytes)
        report.ok = fits(report.shared_bytes)
        if not report.ok:
            report.error = f"shared memory {report.shared_bytes} B > {SM90_MAX_SHARED_PER_BLOCK} B per block"
    except Exception as e:  # a compile error is a result here, not a crash
        report.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    report.seconds = round(time.perf_counter() - start, 2)
    return report


def example_launches(dtype=torch.bfloat16, num_q_heads=32, num_kv_heads=8, head_dim=128, block_size=16,
                     **overrides) -> list[tuple[Launch, str]]:
    """Every entry point's launches for one model shape, planned on small CPU tensors.

    The tensors only stand in for shapes and alignment: values never matter to the compiler. Sizes avoid
    the value 1, which the JIT would turn into a constant (a real batch rarely has exactly one sequence).
    ``overrides`` (tile, num_warps, num_stages, block_m) go to the decode or prefill planners.
    """
    num_seqs, num_blocks, max_blocks = 4, 64, 8
    cache = torch.zeros(num_blocks, block_size, num_kv_heads, head_dim, dtype=dtype)
    block_tables = torch.zeros(num_seqs, max_blocks, dtype=torch.int32)
    seq_lens = torch.full((num_seqs,), 2, dtype=torch.int32)
    q = torch.zeros(num_seqs, num_q_heads, head_dim, dtype=dtype)
    shape = f"{str(dtype).removeprefix('torch.')} {num_q_heads}/{num_kv_heads} heads D{head_dim} block {block_size}"
    decode_kw = {k: v for k, v in overrides.items() if k in ("tile", "num_warps", "num_stages")}
    prefill_kw = {k: v for k, v in overrides.items() if k in ("tile", "num_warps", "num_stages", "block_m")}
    describe = ", ".join(f"{k}={v}" for k, v in overrides.items())
    shape = f"{shape}{', ' + describe if describe else ''}"

    launches = []
    key = torch.zeros(num_seqs * 4, num_kv_heads, head_dim, dtype=dtype)
    if not overrides:
        for launch in plan_store_kvcache(key, key, cache, cache, torch.zeros(num_seqs * 4, dtype=torch.int32),
                                         check_indices=False):
            launches.append((launch, shape))
    _, plan = plan_paged_decode(q, cache, cache, block_tables, seq_lens, check_indices=False, **decode_kw)
    launches += [(launch, shape) for launch in plan]
    _, plan = plan_split_kv_decode(q, cache, cache, block_tables, seq_lens, num_splits=16, check_indices=False,
                                   **decode_kw)
    launches += [(launch, shape) for launch in (plan if not overrides else plan[:1])]
    cu = torch.arange(0, 4 * num_seqs + 1, 4, dtype=torch.int32)
    _, plan = plan_prefill_attention(torch.zeros(4 * num_seqs, num_q_heads, head_dim, dtype=dtype), cache, cache,
                                     block_tables, seq_lens, cu, check_indices=False, **prefill_kw)
    launches += [(launch, shape) for launch in plan]
    return launches


DEFAULT_SHAPES = [
    dict(),                                                       # Llama-3-8B: bf16, 32/8 heads, D128, block 16
    dict(num_q_heads=64, num_kv_heads=8),                         # group 8 (70B-style)
    dict(dtype=torch.float16, head_dim=64, block_size=1),         # fp16, D64, block 1
]
# With --more: the shapes the GPU tests also run (about 10 s more of compiling on 2 cores).
MORE_SHAPES = [
    dict(num_q_heads=32, num_kv_heads=32),                        # MHA: group 1
    dict(dtype=torch.float32, num_q_heads=8, num_kv_heads=2),     # fp32: IEEE dot products (spills in prefill)
]

SWEEP = [dict(tile=t, num_warps=w, num_stages=s) for t in (16, 32, 64) for w in (4, 8) for s in (2, 3, 4)] + [
    dict(block_m=m, tile=t, num_warps=w, num_stages=s) for m in (64, 128) for t in (32, 64) for w in (4, 8)
    for s in (2, 3)]


def oversized_probe() -> tuple[Launch, str]:
    """A launch that must not fit: fp16 decode, head_dim 256, 256-key tiles, 3 stages (about 273 KiB)."""
    cache = torch.zeros(64, 16, 2, 256, dtype=torch.float16)
    q = torch.zeros(4, 8, 256, dtype=torch.float16)
    _, (launch,) = plan_paged_decode(q, cache, cache, torch.zeros(4, 8, dtype=torch.int32),
                                     torch.full((4,), 2, dtype=torch.int32), tile=256, num_warps=8, num_stages=3,
                                     check_indices=False)
    return launch, "probe, must not fit: float16 8/2 heads D256 block 16, tile=256, num_warps=8, num_stages=3"


def run_checks(sweep: bool = False, probe: bool = False, more: bool = False) -> list[CompileReport]:
    reports = []
    if probe:
        reports.append(check_launch(*oversized_probe()))
    for shape in DEFAULT_SHAPES + (MORE_SHAPES if more else []):
        for launch, config in example_launches(**shape):
            reports.append(check_launch(launch, config))
    if sweep:
        for overrides in SWEEP:
            kind = "prefill_attention_kernel" if "block_m" in overrides else None
            for launch, config in example_launches(**overrides):
                if kind is None and launch.name == "prefill_attention_kernel":
                    continue
                if kind is not None and launch.name != kind:
                    continue
                reports.append(check_launch(launch, "sweep: " + config))
    return reports


def format_table(reports: list[CompileReport]) -> str:
    lines = [f"{'kernel':<26} {'shared B':>9} {'regs':>5} {'spill st/ld B':>13} {'warps':>5} {'blk/SM':>6} "
             f"{'s':>5}  config / verdict"]
    for r in reports:
        verdict = "ok" if r.ok and not r.spills else ("SPILLS" if r.ok else "FAIL " + r.error)
        lines.append(f"{r.kernel:<26} {r.shared_bytes:>9} {r.registers:>5} "
                     f"{f'{r.spill_store_bytes}/{r.spill_load_bytes}':>13} {r.num_warps:>5} {r.blocks_per_sm:>6} "
                     f"{r.seconds:>5.1f}  {r.config}: {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per kernel configuration")
    parser.add_argument("--more", action="store_true", help="also MHA (group 1) and fp32")
    parser.add_argument("--sweep", action="store_true", help="also candidate tile / warp / stage settings")
    parser.add_argument("--fail-on-spills", action="store_true", help="register spills fail the check too")
    parser.add_argument("--probe-oversized", action="store_true",
                        help="also compile a launch that must not fit (it shows the check catching one)")
    args = parser.parse_args(argv)

    if interpreted(paged_decode_kernel):
        env = {**os.environ, "TRITON_INTERPRET": "0"}
        cmd = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])]
        return subprocess.run(cmd, env=env).returncode

    reports = run_checks(sweep=args.sweep, probe=args.probe_oversized, more=args.more)
    if args.json:
        for r in reports:
            print(json.dumps(asdict(r)))
    else:
        print(format_table(reports))
    defaults = [r for r in reports if not r.config.startswith(("sweep", "probe"))]
    failed = [r for r in defaults if not r.ok or (args.fail_on_spills and r.spills)]
    return 1 if failed else 0



if __name__ == "__main__":
    sys.exit(main())
