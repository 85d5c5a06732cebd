"""Launch defaults of the decode kernels per Triton version, and the occupancy a launch really gets.

One kernel source compiles to different register counts under different Triton releases, and registers decide
how many programs an SM holds. ``TUNED_DECODE`` is the committed table, keyed by Triton's ``major.minor`` (a
version not in it takes the nearest one's entry); ``occupancy(launch)`` says how many programs of a planned launch
fit on one SM. Why, and how a table entry is measured: docs/kernels.md.

>>> entry, known = decode_entry("3.9.0")
>>> (entry.tile, entry.num_warps, entry.num_stages, entry.programs_per_sm, known)
(64, 8, 2, 4, '3.9')
>>> version_key("3.6.0+git1234"), version_key("3.10.1")
((3, 6), (3, 10))
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
import triton

from servelab.kernels.launch import Launch, interpreted

# sm_90 (H100 / H200) per-SM limits, used where the device does not say (and in the interpreter).
SM90_REGISTERS_PER_SM = 65_536
SM90_SHARED_PER_SM = 233_472
SM90_MAX_BLOCKS_PER_SM = 32
SM90_MAX_THREADS_PER_SM = 2048
SHARED_RESERVED_PER_BLOCK = 1024  # the driver keeps 1 KiB of shared memory per resident block on sm_80+


@dataclass(frozen=True)
class DecodeTuning:
    """Launch options of paged_decode and split_kv_decode (bf16/fp16), and what they give on sm_90.

    ``programs_per_sm``: resident programs per SM at these options for bf16, 32 query / 8 KV heads,
    head_dim 128, block 16 (the benchmark's shape), as ``compile_check`` computes it; the interpreter's
    stand-in for the figure a compiled kernel gives. ``source`` says where the figures come from.
    """

    tile: int
    num_warps: int
    num_stages: int
    programs_per_sm: int
    source: str


TUNED_DECODE: dict[str, DecodeTuning] = {
    # Timed on an H200 (bench/kernels_results.md, 2026-12-04): decode 64 x 4K in 259.8 us, 0.99 of copy bandwidth;
    # the sweep's best (3 stages, 259.2 us) is within run-to-run noise, so the compiled choice stays. 8 warps: 369 us.
    "3.6": DecodeTuning(tile=64, num_warps=4, num_stages=2, programs_per_sm=4,
                        source="timed by scripts/gpu_check.sh on an H200, 2026-12-04 (106 registers, 4 per SM)"),
    # Unmeasured until a GPU run: compile_check --sweep at sm_90. 64 registers, no spills, 38 KiB of shared
    # memory for both decode kernels (4 warps: 95-96 registers, 5 per SM, but half the loads in flight per SM).
    "3.9": DecodeTuning(tile=64, num_warps=8, num_stages=2, programs_per_sm=4,
                        source="compile_check --sweep at sm_90 (64 registers, 38 KiB shared, no spills); not timed"),
}

_noted: set[str] = set()


def version_key(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a version string such as ``3.6.0`` or ``3.9.0+git1234``."""
    parts = version.split("+")[0].split(".")
    return int(parts[0]), int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def decode_entry(version: str | None = None) -> tuple[DecodeTuning, str]:
    """The table entry for Triton ``version`` (the running one by default) and the version it is for.

    An unknown version takes the nearest known one (by minor release; a tie goes to the newer), and a note
    on stderr says so, once per version.
    """
    version = version or triton.__version__
    major, minor = version_key(version)
    known = f"{major}.{minor}"
    if known not in TUNED_DECODE:
        def rank(v):  # releases apart, then the newer first
            n = 100 * version_key(v)[0] + version_key(v)[1]
            return abs(n - (100 * major + minor)), -n
        nearest = min(TUNED_DECODE, key=rank)
        if known not in _noted:
            _noted.add(known)
            print(f"servelab.kernels: no tuned decode defaults for Triton {known}; using those of {nearest} "
                  f"(servelab/kernels/tuning.py; scripts/gpu_check.sh prints an entry to add)", file=sys.stderr)
        known = nearest
    return TUNED_DECODE[known], known


def blocks_per_sm(registers: int, num_warps: int, shared_bytes: int, *, registers_per_sm: int = SM90_REGISTERS_PER_SM,
                  shared_per_sm: int = SM90_SHARED_PER_SM, max_threads: int = SM90_MAX_THREADS_PER_SM) -> int:
    """Resident blocks per SM allowed by registers (allocated per warp in units of 256), shared memory and threads.

    >>> blocks_per_sm(128, 4, 12_288), blocks_per_sm(255, 8, 0), blocks_per_sm(32, 4, 100_000)
    (4, 1, 2)
    >>> blocks_per_sm(64, 8, 38_912), blocks_per_sm(76, 8, 38_912), blocks_per_sm(106, 4, 38_912)
    (4, 3, 4)
    """
    regs_per_warp = -(-max(registers, 1) * 32 // 256) * 256
    by_regs = registers_per_sm // (regs_per_warp * num_warps)
    by_shared = shared_per_sm // (shared_bytes + SHARED_RESERVED_PER_BLOCK) if shared_bytes else SM90_MAX_BLOCKS_PER_SM
    by_threads = max_threads // (32 * num_warps)
    return min(by_regs, by_shared, by_threads, SM90_MAX_BLOCKS_PER_SM)


@dataclass(frozen=True)
class Occupancy:
    programs_per_sm: int
    registers: int = 0
    spills: int = 0
    shared_bytes: int = 0
    source: str = ""

    def describe(self) -> str:
        if self.registers:
            return (f"{self.programs_per_sm} programs/SM ({self.registers} registers, "
                    f"{self.shared_bytes / 1024:.0f} KiB shared, {self.spills} B spilled)")
        return f"{self.programs_per_sm} programs/SM ({self.source})"


_occupancies: dict[tuple, Occupancy] = {}


def occupancy(launch: Launch) -> Occupancy:
    """Programs of ``launch`` resident per SM: compiled on a GPU (cached per kernel, options and dtypes).

    On a GPU it compiles the launch (``warmup``: Triton's cache makes the real launch reuse it) and reads
    what the driver reports. In the interpreter, or if Triton's API has moved, the table's figure for the
    running Triton: the choice degrades to the committed estimate, never to an error.
    """
    entry, known = decode_entry()
    fallback = Occupancy(entry.programs_per_sm, source=f"table figure for Triton {known}")
    if interpreted(launch.kernel):
        return fallback
    tensors = [a for a in launch.args if isinstance(a, torch.Tensor)]
    key = (launch.name, tuple(sorted(launch.constexprs.items())), tuple(sorted(launch.options.items())),
           tuple(str(t.dtype) for t in tensors), str(tensors[0].device) if tensors else "")
    if key not in _occupancies:
        try:
            _occupancies[key] = _compiled_occupancy(launch, tensors[0].device)
        except Exception as e:  # noqa: BLE001 - a Triton API change must not stop a decode
            print(f"servelab.kernels: occupancy of {launch.name} unknown ({type(e).__name__}: {e}); "
                  f"using the table's {entry.programs_per_sm} programs per SM", file=sys.stderr)
            _occupancies[key] = fallback
    return _occupancies[key]


def _compiled_occupancy(launch: Launch, device: torch.device) -> Occupancy:
    compiled = launch.kernel.warmup(*launch.args, grid=launch.grid, **launch.constexprs, **launch.options)
    compiled._init_handles()  # loads the module: n_regs and n_spills come from the driver
    props = torch.cuda.get_device_properties(device)
    shared = int(compiled.metadata.shared)
    warps = int(compiled.metadata.num_warps)
    programs = blocks_per_sm(int(compiled.n_regs), warps, shared,
                             registers_per_sm=getattr(props, "regs_per_multiprocessor", SM90_REGISTERS_PER_SM),
                             shared_per_sm=getattr(props, "shared_memory_per_multiprocessor", SM90_SHARED_PER_SM),
                             max_threads=getattr(props, "max_threads_per_multi_processor", SM90_MAX_THREADS_PER_SM))
    return Occupancy(max(programs, 1), int(compiled.n_regs), int(compiled.n_spills), shared, "compiled kernel")
