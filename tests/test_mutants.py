"""Mutation testing of the hidden tests (judge/mutants.py): its operators on a small function, and the
committed lists of equivalent programs (autograder/mutants/<assignment>.toml) still matching what they explain.

The mutation run itself (`make mutants`) grades thousands of programs and stays out of `make test`; this module
only makes mutants (no grading) except where an entry's operator needs the solution's return kinds.
"""

from __future__ import annotations

import ast
import textwrap

import pytest

from servelab_autograder import paths
from servelab_autograder.judge import checks, mutants, mutate, verdicts

ROOT = paths.repo_root()

SMALL = textwrap.dedent('''
    def f(xs, n):
        """Docstring: 1 + 1 is never touched."""
        out = list(xs)
        total = 0
        for i in range(len(out)):
            if out[i] < n:
                total += out[i] // 2
            else:
                total -= 1
        while total > 100 and n:
            total -= n
        assert total >= 0, f"{total + 1}"
        print(total + 1)
        return int(round(total)), max(out), xs.copy(), torch.zeros(3, dtype=torch.int64).to("cpu")
''')


def _by_operator(ms):
    out = {}
    for m in ms:
        out.setdefault(m.operator, []).append(m.line)
    return out


@pytest.fixture(scope="module")
def small():
    return _by_operator(mutate.mutate("f", SMALL))


def test_every_operator_the_contract_names_makes_mutants(small):
    assert "if out[i] < n: -> if out[i] <= n:" in small["compare"]
    assert "if out[i] < n: -> if n < out[i]:" in small["operands"]
    assert "total += out[i] // 2 -> total += out[i] / 2" in small["arith"]
    assert "total += out[i] // 2 -> total -= out[i] // 2" in small["arith"]
    assert "total = 0 -> total = 1" in small["constant"] and "total = 0 -> total = -1" in small["constant"]
    rounding = " ".join(small["rounding"])
    assert "math.ceil(round(total))" in rounding and "int(math.floor(total))" in rounding
    copies = " ".join(small["copy"])
    assert "out = list(xs) -> out = xs" in small["copy"] and "return (int(round(total)), max(out), xs," in copies
    assert any("torch.zeros(3, dtype=torch.int32)" in line for line in small["convert"])
    assert any("torch.zeros(3).to('cpu')" in line for line in small["convert"])
    assert any(line.endswith("-> (removed)") and line.startswith("return") for line in small["return"])
    assert any("-> total -= 1" in line for line in small["branch"])            # the if's body removed
    assert any(line.startswith("while total > 100 and n:") and "range(32)" in line for line in small["bound"])
    assert any("range(min(len(out), 1024))" in line for line in small["bound"])
    assert "while total > 100 and n: -> while n and total > 100:" in small["order"]
    assert any("max(out)" in line and "min(out)" in line for line in small["minmax"])


def test_docstrings_messages_and_prints_are_not_mutated(small):
    lines = [line for ls in small.values() for line in ls]
    assert not [line for line in lines if "Docstring" in line or "print(" in line or "assert " in line]


def test_ints_become_floats_only_where_the_solution_returned_ints():
    seen = mutate.Seen()
    ns: dict = {"__mutant_seen__": seen}
    source = "def g(a):\n    if a:\n        return a * 2, 0.5\n    return 1.5\n"
    exec(mutate.instrument("g", source), ns)
    ns["g"](3), ns["g"](0)
    lines = [m.line for m in mutate.mutate("g", source, seen) if m.operator == "numtype"]
    assert sorted(lines) == ["return (a * 2, 0.5) -> return (a * 2, int(0.5))",
                             "return (a * 2, 0.5) -> return (float(a * 2), 0.5)",
                             "return 1.5 -> return int(1.5)"]


def test_ids_are_stable_and_tell_mutants_apart():
    first, second = mutate.mutate("f", SMALL), mutate.mutate("f", SMALL)
    assert [m.id for m in first] == [m.id for m in second]
    assert len({m.id for m in first}) == len(first) == len({m.source for m in first})
    original = ast.unparse(ast.parse(SMALL))
    for m in first:
        assert m.source != original
        compile(m.source, "f", "exec")
    assert {m.id for m in mutate.mutate("h", SMALL)}.isdisjoint(m.id for m in first)   # the exercise counts


def test_a_mutant_is_graded_on_its_own_cells_and_killed_at_its_first_failing_case():
    chapter = verdicts.table("ch01_continuous_batching")
    prep = mutants.Prepared(chapter, verdicts.Pitfalls(chapter, ROOT), None, [])
    prep.base = prep.pitfalls.namespace(None)
    src = prep.pitfalls.solution["lower_bound"]
    m = next(m for m in mutate.mutate("lower_bound", src) if "-(-sum(out_lens) // B)" in m.line
             and "sum(out_lens) / B" in m.line)
    outcome, detail = mutants.grade_mutant(prep, m)
    assert outcome == "killed" and detail.startswith("test_lower_bound:"), detail
    same = mutate.Mutant("x", "lower_bound", "none", src.replace("if not out_lens:", "if len(out_lens) == 0:"), "")
    assert mutants.grade_mutant(prep, same) == ("survived", "test_lower_bound")


@pytest.mark.parametrize("assignment", [c.assignment for c in checks.tables()])
def test_the_committed_equivalents_are_still_generated_and_explained(assignment):
    listed = mutants.equivalents(ROOT, assignment)
    if not listed:
        return
    chapter = verdicts.table(assignment)
    pitfalls = verdicts.Pitfalls(chapter, ROOT)
    seen = mutants.observe(chapter, pitfalls) if any(e["operator"] == "numtype" for e in listed.values()) else None
    made = {m.id: m for cell, src in pitfalls.solution.items() for m in mutate.mutate(cell, src, seen)}
    for mid, entry in listed.items():
        assert mid in made, f"{assignment}: equivalent {mid} ({entry.get('line')}) is no longer generated"
        m = made[mid]
        assert (entry["exercise"], entry["operator"], entry["line"]) == (m.exercise, m.operator, m.line), mid
        assert len(entry.get("reason", "").strip()) >= 20, f"{assignment}: {mid} needs a reason"


def test_a_count_drill_is_graded_exactly_whatever_its_tolerance():
    count = verdicts.Drill("d", "a count", lambda: 1199, rel_tol=0.01)
    assert count.accepts(1199.0) and not count.accepts(1200.0) and count.tolerance() == "exactly"
    share = verdicts.Drill("d", "a share", lambda: 1199.0, rel_tol=0.01)
    assert share.accepts(1200.0) and share.tolerance() == "within 1%"


def test_the_bench_section_holds_every_chapters_line_and_the_total():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_mutants", ROOT / "scripts" / "bench_mutants.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    report = ("[ch01] 3 mutants\nch01: 2 killed, 1 equivalent (explained), 0 survived  (1 s)\n  survived x\n"
              "total: 2 killed, 1 equivalent (explained), 0 survived  (1 s)\n")
    text = bench.section(report, 12.0, 2)
    assert text.startswith(bench.MARK) and "12 s wall" in text
    assert "ch01: 2 killed, 1 equivalent (explained), 0 survived" in text and "total: 2 killed" in text
    assert "survived x" not in text
