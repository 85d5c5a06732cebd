"""Every kernel compiles for Hopper (sm_90) with Triton's own compiler, without a GPU, and fits.

The check runs ``python scripts/compile_check.py`` in a subprocess with TRITON_INTERPRET=0:
compiled and interpreted kernels cannot share a process (``@triton.jit`` picks one when it decorates).
It compiles each entry point's launch at the default tiles for several model shapes, reads the shared
memory per block from Triton's metadata and registers and spills from ptxas, and fails on a launch that
would not fit (over 227 KiB of shared memory), and on register spills in these 16-bit shapes.
``python scripts/compile_check.py --more`` adds group 1 and fp32 (where prefill spills).
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compile_check.py"
_SPEC = importlib.util.spec_from_file_location("compile_check", SCRIPT)
_check = importlib.util.module_from_spec(_SPEC)
sys.modules["compile_check"] = _check  # dataclasses look their module up there
_SPEC.loader.exec_module(_check)
SM90_MAX_SHARED_PER_BLOCK, blocks_per_sm, fits, parse_ptxas = (_check.SM90_MAX_SHARED_PER_BLOCK, _check.blocks_per_sm,
                                                               _check.fits, _check.parse_ptxas)

KERNELS = {"store_kvcache_kernel", "paged_decode_kernel", "split_kv_decode_kernel", "merge_splits_kernel",
           "prefill_attention_kernel"}


@pytest.fixture(scope="module")
def compile_reports():
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    result = subprocess.run([sys.executable, str(SCRIPT), "--json", "--probe-oversized"],
                            env=env, capture_output=True, text=True, timeout=900)
    reports = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert reports, f"no reports; exit {result.returncode}\n{result.stderr[-3000:]}"
    for r in reports:  # shown with pytest -s, and kept in the log on failure
        print(f"{r['kernel']:<26} shared {r['shared_bytes']:>6} B  regs {r['registers']:>3}  spills "
              f"{r['spill_store_bytes']}/{r['spill_load_bytes']} B  {r['blocks_per_sm']} blk/SM  {r['config']}")
    return result.returncode, reports


def defaults(reports):
    return [r for r in reports if not r["config"].startswith("probe")]


def test_every_kernel_compiles_for_sm90_and_fits(compile_reports):
    returncode, reports = compile_reports
    failed = [f"{r['kernel']} ({r['config']}): {r['error']}" for r in defaults(reports) if not r["ok"]]
    assert not failed, "\n".join(failed)
    assert returncode == 0
    assert {r["kernel"] for r in defaults(reports)} == KERNELS
    assert all(0 < r["registers"] <= 255 for r in defaults(reports))
    assert max(r["shared_bytes"] for r in defaults(reports)) <= SM90_MAX_SHARED_PER_BLOCK


def test_16_bit_kernels_do_not_spill_registers(compile_reports):
    _, reports = compile_reports
    spilling = [f"{r['kernel']} ({r['config']}): {r['spill_store_bytes']}/{r['spill_load_bytes']} B"
                for r in defaults(reports) if r["spill_store_bytes"] or r["spill_load_bytes"]]
    assert not spilling, "\n".join(spilling)


def test_a_launch_that_would_not_fit_is_caught(compile_reports):
    _, reports = compile_reports
    (probe,) = [r for r in reports if r["config"].startswith("probe")]
    assert not probe["ok"]
    assert probe["shared_bytes"] > SM90_MAX_SHARED_PER_BLOCK
    assert "shared memory" in probe["error"]


def test_report_helpers():
    assert fits(SM90_MAX_SHARED_PER_BLOCK) and not fits(SM90_MAX_SHARED_PER_BLOCK + 1)
    assert blocks_per_sm(64, 8, 38_912) == 4
    assert parse_ptxas("ptxas info    : Used 96 registers, used 1 barriers\n"
                       "ptxas info    : 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads") == (96, 0, 0)
