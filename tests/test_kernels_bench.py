"""scripts/bench_kernels.py: the smoke run (tiny shapes; in Triton's interpreter without a GPU) goes through the
same code as the H200 run (inputs, launch plans, reference check, SDPA baselines, the table), so a broken
script is found here and not in a session's few minutes of GPU time. Goal verdicts are checked on made-up
rows whose fractions are worked out by hand.
"""

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

import servelab.kernels as K  # decides interpreter or GPU before bench imports triton

_SPEC = importlib.util.spec_from_file_location("bench_kernels",
                                               Path(__file__).resolve().parents[1] / "scripts" / "bench_kernels.py")
bench = importlib.util.module_from_spec(_SPEC)
sys.modules["bench_kernels"] = bench  # dataclasses look their module up there
_SPEC.loader.exec_module(bench)


def _cells(text, name):
    """The table row of configuration ``name``, and its cells stripped."""
    row = next((ln for ln in text.splitlines() if ln.startswith(f"| {name} |")), None)
    assert row is not None, f"no row for {name!r} in:\n{text}"
    return row, [c.strip() for c in row.strip("|").split("|")]


def test_smoke_run_checks_every_kernel_against_the_reference_and_writes_the_table(tmp_path, capsys):
    out = tmp_path / "smoke.md"
    assert bench.main(["--smoke", "--out", str(out)]) == 0, "a kernel's output disagreed with its reference"
    text = out.read_text()
    for case in bench.smoke_cases():
        row, cells = _cells(text, case.name)
        assert cells[1].startswith(case.kernel), row
        assert math.isfinite(float(cells[2])) and float(cells[2]) > 0, f"no time measured: {row}"
        assert float(cells[8]) <= bench.BF16_TOLERANCE, f"max error over the tolerance: {row}"
        if case.goal is not None:
            assert cells[9].endswith("not judged (CPU smoke run)"), f"a smoke run must not judge a goal: {row}"
        if len(set(case.seq_lens)) == 1:  # SDPA is timed on equal lengths: both baselines, each by some backend
            assert math.isfinite(float(cells[6])) and math.isfinite(float(cells[7])), row
            assert f"- {case.name}: fastest SDPA backend: " in text and "none ran" not in text
    assert "WRONG OUTPUT" not in text
    assert ("Triton interpreter" in text) == K.INTERPRETED


@pytest.mark.skipif(torch.cuda.is_available(), reason="this checks the refusal without a GPU")
def test_the_full_run_refuses_without_a_gpu_and_leaves_the_recorded_results_alone(capsys):
    before = bench.RESULTS.read_bytes()
    assert bench.main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out
    assert bench.RESULTS.read_bytes() == before


def _row(name, us, nbytes, sdpa_us=math.nan, correct=True):
    return bench.Row(name, "k", us=us, bytes=nbytes, sdpa_us=sdpa_us, correct=correct)


def _verdict(text, name):
    return _cells(text, name)[1][9]


def test_goal_verdicts_compare_bandwidth_with_the_faster_copy_and_time_with_sdpa():
    # copies: 1000 and 2000 GB/s -> the denominator is 2000 GB/s. 1 ms moving 1.72 GB is 1720 GB/s = 0.86.
    copy_bw = {"torch copy_": 1.0e12, "triton copy": 2.0e12}
    cases = [bench.Case("fast", [1], goal=0.85), bench.Case("slow", [1], goal=0.85),
             bench.Case("split ok", [1], goal=0.80, beat_sdpa=True),
             bench.Case("split behind sdpa", [1], goal=0.80, beat_sdpa=True),
             bench.Case("wrong", [1], goal=0.85), bench.Case("no goal", [1])]
    rows = [_row("fast", 1000.0, 1_720_000_000),        # 0.86 >= 0.85
            _row("slow", 1000.0, 1_680_000_000),        # 0.84 <  0.85
            _row("split ok", 1000.0, 1_640_000_000, sdpa_us=1100.0),          # 0.82, and faster than SDPA
            _row("split behind sdpa", 1000.0, 1_640_000_000, sdpa_us=900.0),  # 0.82, but SDPA is faster
            _row("wrong", 1000.0, 1_720_000_000, correct=False),
            _row("no goal", 1000.0, 1_000_000_000)]
    text = bench.render(rows, [], copy_bw, cases, ["# t"])
    assert "Fractions below are of 2000 GB/s" in text
    assert _verdict(text, "fast") == ">= 0.85: met"
    assert _verdict(text, "slow") == ">= 0.85: MISSED"
    assert _verdict(text, "split ok") == ">= 0.80, < SDPA: met"
    assert _verdict(text, "split behind sdpa") == ">= 0.80, < SDPA: MISSED"
    assert _verdict(text, "wrong") == "WRONG OUTPUT >= 0.85: met"
    assert _verdict(text, "no goal") == ""
    assert "| fast | k | 1000.0 | 1720 | 0.86 |" in text
    unjudged = bench.render(rows, [], copy_bw, cases, ["# t"], judge=False)
    assert _verdict(unjudged, "slow") == ">= 0.85: not judged (CPU smoke run)"


def test_sweep_winners_name_the_fastest_setting_and_the_table_entry_to_commit():
    from servelab.kernels.tuning import decode_entry

    entry, _ = decode_entry()
    default = f"tile={entry.tile}, num_warps={entry.num_warps}, num_stages={entry.num_stages}"
    other = "tile=32, num_warps=4, num_stages=3"
    sweep = [bench.Row("decode 64 x 4K", "paged_decode (4/SM, 64 registers)", us=12.0, note=default),
             bench.Row("decode 64 x 4K", "paged_decode (5/SM, 90 registers)", us=10.0, note=other, programs_per_sm=5),
             bench.Row("decode 64 x 4K", "paged_decode", note="tile=128, num_warps=4, num_stages=3 OutOfResources",
                       error="OutOfResources: shared memory"),
             bench.Row("decode 4 x 32K, split-KV", "split_kv_decode (16 splits)", us=30.0, note="num_splits=16"),
             bench.Row("decode 4 x 32K, split-KV", "split_kv_decode (8 splits)", us=40.0, note="num_splits=8")]
    lines = bench.sweep_winners(sweep)
    assert lines[0] == f"- decode 64 x 4K: fastest {other} at 10.0 µs; the defaults ({default}): 12.0 µs"
    assert "DecodeTuning(tile=32, num_warps=4, num_stages=3, programs_per_sm=5," in lines[1]
    assert lines[2] == "- decode 4 x 32K, split-KV: fastest num_splits=16 at 30.0 µs"
    assert len(lines) == 3  # a split-KV winner is no table entry
