"""scripts/gpu_check.sh on the CPU: a lent GPU machine gives one attempt, so the script's logic is checked here.

- the preflight: a line per check; on this machine the GPU's own things are missing, and named last;
- results written as measured: a table or engine run killed after two rows keeps those two rows;
- the budget: a step with too little time left is skipped, one past its limit is stopped, and both are
  recorded (``step`` tried alone, the script sourced);
- the whole script in smoke mode (tiny shapes, in Triton's interpreter without a GPU): every step, each
  section of the results in order, and bench/kernels_results.md left alone.
"""

import importlib.util
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton

import servelab.kernels  # noqa: F401  (decides interpreter or GPU before bench imports triton)

REPO = Path(__file__).resolve().parents[1]
STEP_NAMES = ("preflight", "kernel table", "engine", "GPU tests", "sweep")


def load(script: str):
    spec = importlib.util.spec_from_file_location(script, REPO / "scripts" / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[script] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = load("bench_kernels")   # scripts/bench_kernels.py


def preflight_lines(text: str) -> dict[str, tuple[str, str]]:
    """``{check: (status, detail)}`` from the preflight's output."""
    found = re.findall(r"^preflight (ok|MISSING|absent) +([^:]+): (.*)$", text, re.M)
    return {name: (status, detail) for status, name, detail in found}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the report of a machine without a GPU")
def test_preflight_names_everything_a_gpu_run_lacks_here(capsys):
    preflight = load("gpu_preflight")
    assert preflight.main([]) == 2
    out = capsys.readouterr().out
    checks = preflight_lines(out)
    assert set(checks) == {"python", "nvidia-smi", "libcuda.so.1", "C compiler", "Python.h", "torch", "torch CUDA",
                           "servelab", "triton", "pytest", "numpy"}
    assert {name for name, (status, _) in checks.items() if status == "MISSING"} == {
        "nvidia-smi", "libcuda.so.1", "torch CUDA"}
    assert torch.__version__ in checks["torch"][1] and triton.__version__ in checks["triton"][1]
    assert checks["Python.h"][1].endswith("Python.h")
    assert out.splitlines()[-1].startswith("preflight: missing: nvidia-smi, libcuda.so.1, torch CUDA (")

    assert preflight.main(["--smoke"]) == 0  # a CPU run needs none of the GPU's things
    checks = preflight_lines(capsys.readouterr().out)
    assert checks["nvidia-smi"][0] == checks["torch CUDA"][0] == "absent"


def test_preflight_finds_a_missing_compiler_and_header(tmp_path):
    preflight = load("gpu_preflight")
    assert not preflight.c_compiler({"PATH": str(tmp_path)}).ok
    gcc = tmp_path / "gcc"
    gcc.write_text("#!/bin/sh\n")
    gcc.chmod(0o755)
    assert preflight.c_compiler({"PATH": str(tmp_path)}).detail == str(gcc)
    assert not preflight.python_header(str(tmp_path)).ok
    (tmp_path / "Python.h").write_text("")
    assert preflight.python_header(str(tmp_path)).ok


def _table_rows(text):
    return [line for line in text.splitlines() if line.startswith("| case ")]


def test_a_table_stopped_midway_keeps_the_rows_it_measured(tmp_path):
    cases = [bench.Case(f"case {i}", [64], goal=0.85) for i in range(4)]

    def measure(case):
        if case.name == "case 2":
            raise KeyboardInterrupt  # as a kill would: nothing after this row is written
        return bench.Row(case.name, "paged_decode", us=10.0, bytes=20_000)

    results = bench.Results(tmp_path / "results.md")
    with pytest.raises(KeyboardInterrupt):
        bench.measure_table(cases, measure, results.write, denominator=4e9)
    rows = _table_rows((tmp_path / "results.md").read_text())  # read while still open: each row was flushed
    assert rows == ["| case 0 | paged_decode | 10.0 | 2 | 0.50 | - | - | - | - | >= 0.85: MISSED |",
                    "| case 1 | paged_decode | 10.0 | 2 | 0.50 | - | - | - | - | >= 0.85: MISSED |"]
    results.close()


def test_a_failing_case_is_recorded_and_the_table_goes_on_until_the_budget(tmp_path):
    cases = [bench.Case(f"case {i}", [64]) for i in range(3)]

    def measure(case):
        if case.name == "case 0":
            raise RuntimeError("CUDA out of memory\nsecond line")
        return bench.Row(case.name, "paged_decode", us=10.0, bytes=20_000)

    lines = []

    def collect(*written):
        lines.extend(written)

    rows = bench.measure_table(cases, measure, collect, denominator=4e9)
    assert rows[0].error == "RuntimeError: CUDA out of memory" and not rows[1].error
    assert _table_rows("\n".join(lines))[0].endswith("| FAILED (see the note) |")
    late = bench.measure_table(cases, measure, collect, denominator=4e9, deadline=-math.inf)
    assert [r.error for r in late] == ["not measured: out of time (--budget)"] * 3


def test_the_sweep_stops_at_its_deadline_and_says_so():
    lines = []

    def collect(*written):
        lines.extend(written)

    rows = bench.sweep_rows(bench.smoke_cases(), device="cpu", time_us=None, min_cache_bytes=1 << 20,
                            write=collect, deadline=-math.inf, smoke=True)
    assert rows == [] and lines == ["| - | stopped: out of time after 0 of 2 settings | - | - |"]


def test_the_engine_section_keeps_the_batch_sizes_it_finished(tmp_path, monkeypatch):
    engine = load("gpu_engine")
    done = []

    def measure(model, batch, *args):
        if done:
            raise KeyboardInterrupt  # killed during the second batch size
        done.append(batch)
        return 12.5, 0.0

    monkeypatch.setattr(engine, "measure", measure)
    out = tmp_path / "results.md"
    with pytest.raises(KeyboardInterrupt):
        engine.main(["--smoke", "--write", "--out", str(out)])
    text = out.read_text()
    assert "## The engine at Llama-3-8B's shape" in text and f"triton {triton.__version__}" in text
    assert "| 1 | 12.5 | - | - |" in text and "| 2 |" not in text
    assert engine.main(["--smoke", "--write", "--out", str(out), "--budget", "0"]) == 0
    assert out.read_text().count("not measured: out of time") == 2
    with pytest.raises(SystemExit):  # a smoke run never writes the recorded results
        engine.main(["--smoke", "--write"])


def _env(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    return {**env, "PYTHON": sys.executable, "GPU_CHECK_LOGS": str(tmp_path),
            "GPU_CHECK_RESULTS": str(tmp_path / "smoke.md")}


def test_a_step_is_skipped_without_time_and_stopped_at_its_limit(tmp_path):
    script = """
        source scripts/gpu_check.sh
        BUDGET=30; SECONDS=0
        quick() { echo measured; }
        slow() { timeout -k 1 "$LIMIT" sleep 20; }
        step "too late" 100 40 quick
        step quick 100 0 quick
        step "past its limit" 2 0 slow
        step "no such module" 100 0 quick no_such_module_here
        printf '%s\\n' "${STEPS[@]}"; echo "status=$status"
    """
    run = subprocess.run(["bash", "-c", script], cwd=REPO, env=_env(tmp_path), capture_output=True, text=True,
                         timeout=60)
    out = run.stdout
    assert re.search(r"^== too late: skipped: \d+ s left of 30 s, it needs 40 s$", out, re.M), out
    assert re.search(r"^== quick: up to \d+ s \[\d+ s elapsed, \d+ s left of 30 s\]$", out, re.M), out
    assert "\nmeasured\n" in out and re.search(r"^-- quick: ok in \d+ s \[\d+ s elapsed, \d+ s left\]$", out, re.M)
    assert re.search(r"^-- past its limit: stopped at its 2 s limit in \d+ s", out, re.M), out
    assert f"== no such module: skipped: no no_such_module_here in {sys.executable}" in out
    assert re.search(r"^\| too late \| skipped: .* \| 0 \|$", out, re.M)
    assert re.search(r"^\| past its limit \| stopped at its 2 s limit \| \d+ \|$", out, re.M)
    assert out.rstrip().endswith("status=1")


def test_the_whole_script_runs_in_smoke_mode_and_writes_as_it_goes(tmp_path):
    recorded = bench.RESULTS.read_bytes()
    run = subprocess.run(["bash", "scripts/gpu_check.sh", "--smoke"], cwd=REPO, env=_env(tmp_path),
                         capture_output=True, text=True, timeout=600)
    out = run.stdout
    assert run.returncode == 0, out[-4000:] + run.stderr[-2000:]
    for name in STEP_NAMES:  # the budget, printed before and after each step
        assert re.search(rf"^== {name}: up to \d+ s \[\d+ s elapsed, \d+ s left of 360 s\]$", out, re.M), name
        assert re.search(rf"^-- {name}: ok in \d+ s \[\d+ s elapsed, \d+ s left\]$", out, re.M), name
    checks = preflight_lines(out)
    assert checks["C compiler"][0] == checks["Python.h"][0] == checks["pytest"][0] == "ok"

    text = (tmp_path / "smoke.md").read_text()
    heads = ["# Paged-attention kernels: measured", "Table complete: 4 of 4 configurations",
             "## The engine at Llama-3-8B's shape", "## GPU tests", "## Sweep", "## The run"]
    at = [text.find(h) for h in heads]
    assert -1 not in at and at == sorted(at), f"sections missing or out of order: {dict(zip(heads, at))}"
    assert f"torch {torch.__version__}, triton {triton.__version__}" in text
    for case in bench.smoke_cases():
        assert f"\n| {case.name} | {case.kernel}" in text
    engine = text[text.find("## The engine"):text.find("## GPU tests")]
    assert "| 1 | " in engine and "| 2 | " in engine
    assert re.search(r"^- \d+ (passed|skipped)", text[text.find("## GPU tests"):], re.M)
    sweep = text[text.find("## Sweep"):text.find("## The run")]
    assert sweep.count("| smoke ") == 2 and "`tuning.TUNED_DECODE` entry for Triton" in sweep
    run_table = text[text.find("## The run"):]
    assert [row.split("|")[1].strip() for row in run_table.splitlines() if re.match(r"^\| [a-zA-Z]", row)][1:] == \
        list(STEP_NAMES)  # after the header row
    assert run_table.count("| ok |") == 5 and "- ok: C compiler: " in run_table
    assert sorted(p.name for p in tmp_path.glob("gpu_check_*.log")) == sorted(
        f"gpu_check_{fn}.log" for fn in ("preflight", "kernel_table", "engine", "gpu_tests", "sweep"))
    assert bench.RESULTS.read_bytes() == recorded, "a smoke run wrote the recorded results"
