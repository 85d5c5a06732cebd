"""scripts/test_durations.py: the suite's time per test module from pytest's JUnit XML (make test writes it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
XML = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" time="12.5">
<testcase classname="tests.test_tables.TestCh09" name="test_a" time="2.0" />
<testcase classname="tests.test_tables.TestCh12" name="test_b" time="1.0"><failure message="x" /></testcase>
<testcase classname="tests.test_claims" name="test_c" time="0.5" />
<testcase classname="solutions.ch01_a.ch01_a.ipynb" name="Cell 0" time="4.0" />
</testsuite></testsuites>"""


def _script():
    spec = importlib.util.spec_from_file_location("test_durations", ROOT / "scripts" / "test_durations.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_durations_add_up_per_module_slowest_first(tmp_path):
    mod = _script()
    (tmp_path / "p.xml").write_text(XML)
    rows, suite_s = mod.per_module(tmp_path / "p.xml")
    assert suite_s == 12.5   # the suite's time as the XML above states it: a parsed number, not a timing
    assert rows == [("solutions/ch01_a/ch01_a.ipynb", 4.0, 1, 0), ("tests/test_tables.py", 3.0, 2, 1),
                    ("tests/test_claims.py", 0.5, 1, 0)]


def test_durations_are_recorded_once_in_the_results(tmp_path):
    mod = _script()
    (tmp_path / "p.xml").write_text(XML)
    results = tmp_path / "results.md"
    results.write_text("# Benchmark\n\nbefore\n")
    for _ in range(2):
        assert mod.main([str(tmp_path / "p.xml"), "--into", str(results)]) == 0
    text = results.read_text()
    assert text.count(mod.START) == 1 and "before" in text and "| tests/test_tables.py | 3.0 |" in text
