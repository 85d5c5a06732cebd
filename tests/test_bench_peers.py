"""scripts/bench_peers.py: both parts in one run, servelab alone when no peer is at hand, and its section of
bench/results.md kept beside the other scripts' (no timing is asserted)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


def _script(name: str):
    sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_peers_it_prints_servelabs_figures_alone_and_says_so(capsys, monkeypatch, tmp_path):
    bench = _script("bench_peers")
    monkeypatch.delenv("SERVELAB_NANO_VLLM", raising=False)
    monkeypatch.setattr(bench, "RESULTS", tmp_path / "results.md")
    missing = tmp_path / "no-such.whl"
    assert bench.main(["--quick", "--repeats", "1", "--no-download", "--sglang", str(missing)]) == 0
    out = capsys.readouterr().out
    assert "SGLang: none" in out and "nano-vllm: none given" in out, out
    rows = [line for line in out.splitlines() if line.startswith("| radix |") or line.startswith("| scheduler |")]
    assert len(rows) == 9 + 6 and all("| - |" in line for line in rows), rows
    assert not (tmp_path / "results.md").exists()   # --quick is never recorded


def test_its_section_goes_in_place_and_keeps_the_others():
    bench = _script("bench_peers")
    other = "<!-- engine: scripts/bench_engine.py -->\n\n## engine\n"
    text = bench.record("# Benchmark\n\n| a |\n\n" + other, bench.MARK + "\n\n## peers v1\n", bench.MARK)
    assert text.index("# Benchmark") < text.index(bench.MARK) < text.index("<!-- engine:")
    again = bench.record(text, bench.MARK + "\n\n## peers v2\n", bench.MARK)
    assert again.count(bench.MARK) == 1 and "peers v2" in again and "peers v1" not in again
    assert again.endswith(other)


def test_a_disagreement_is_loud_and_fails(capsys, monkeypatch):
    bench = _script("bench_peers")
    bad = {"workload": "W1", "servelab_s": 1.0, "peer_s": 2.0, "ratio": 2.0, "agree": False, "note": ""}
    monkeypatch.setattr(bench, "rows", lambda args: ([("radix", bad)], ["SGLang: test"]))
    assert bench.main(["--quick"]) == 1
    out = capsys.readouterr().out
    assert "AGREEMENT FAILED on W1" in out and "**NO**" in out


def test_the_record_shows_no_machines_folders():
    results_md = _script("results_md")
    assert results_md.shown(ROOT / ".venv" / "bin" / "python") == ".venv/bin/python"
    assert results_md.shown("/somewhere/else/nano-vllm") == "nano-vllm"
    text = (ROOT / "bench" / "results.md").read_text(encoding="utf-8")
    absolute = re.findall(r"(?:^|[\s(`'\"])(/[\w.-]+/[\w./-]*)", text, re.M)
    assert not absolute, f"bench/results.md records absolute paths: {absolute}"
