"""The learner notebooks in course/ are exactly what nbgrader makes from solutions/, and leak nothing.

- every chapter in solutions/ has its release in course/;
- course/ is what a fresh `nbgrader generate_assignment` into a temporary folder makes, compared as JSON the way
  `python -m servelab_autograder.course.release --check` compares it (the command itself is run on one chapter); a
  learner's answers in course/ are tolerated as long as the committed notebook is current;
- no nbgrader marker and no line of any solution region or hidden-test block reaches course/ (and the
  scanner does catch a planted leak);
- nbgrader's Validator passes every graded cell of the solutions notebook, and (inverted) passes none of the
  release's, shown on the first and the newest chapter. `nbgrader validate` itself exits 0 even on failure, so
  the API is used. For every other chapter the same two facts are proved by cheaper runs the suite makes anyway:
  nbval runs each solutions notebook cell by cell, tests/test_autograde.py grades each chapter's solution to full
  marks with nbgrader in the sandbox, and tests/test_chNN_grading.py fails the stubs on every graded cell.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from servelab_autograder import paths
from servelab_autograder.course import leaks, release
from servelab_autograder.runner import nbgrader_process

ROOT = paths.repo_root()
CHAPTERS = paths.chapters(ROOT)
ENDS = sorted({CHAPTERS[0], CHAPTERS[-1]}) if CHAPTERS else []   # the first and the newest chapter


def _env():
    return nbgrader_process.venv_path_env()


@pytest.fixture(scope="session")
def fresh(tmp_path_factory):
    """Every chapter built now by `nbgrader generate_assignment` (no gradebook), in a temp folder."""
    dest = tmp_path_factory.mktemp("fresh-release")
    failed = release.build_all(ROOT, CHAPTERS, dest)
    assert not failed, failed
    return dest


def _pristine(assignment, fresh) -> bool:
    """course/<a> is byte-for-byte (as JSON) the fresh build, i.e. holds no learner answers."""
    course = paths.release_notebook(ROOT, assignment)
    return course.is_file() and release.comparable(course) == \
        release.comparable(paths.release_notebook(ROOT, assignment, fresh))


def test_there_are_chapters():
    assert CHAPTERS, f"no chapters under {ROOT / 'solutions'}"


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_every_chapter_has_a_release(assignment):
    path = paths.release_notebook(ROOT, assignment)
    assert path.is_file(), f"{path} is missing: run `make release`"


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_course_is_what_generate_assignment_makes(assignment, fresh):
    """course/<a> against the fixture's fresh release, through the comparison `release --check` makes."""
    problems, _ = release.compare(ROOT, assignment, fresh)
    assert not problems, f"course/{assignment} is stale (run `make release`):\n" + "\n".join(problems)


def test_release_check_passes_from_the_command_line():
    """The command itself, on the first chapter (it builds its own release: the comparison is proved above)."""
    proc = subprocess.run([sys.executable, "-m", "servelab_autograder.course.release", "--check", CHAPTERS[0]],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"course/ is stale or leaks (run `make release`):\n{proc.stdout}{proc.stderr}"
    assert f"ok    {CHAPTERS[0]}" in proc.stdout


def test_no_solution_or_hidden_test_text_in_course(fresh):
    # what generate_assignment makes now, and what sits in course/ (unless it holds a learner's answers)
    found = leaks.find_leaks(ROOT, CHAPTERS, release_dir=fresh)
    found += leaks.find_leaks(ROOT, [a for a in CHAPTERS if _pristine(a, fresh)])
    assert not found, "the release gives away solutions or hidden tests:\n" + "\n".join(found[:30])


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_solution_regions_hold_secrets(assignment):
    """The leak scan is only meaningful if it has something to look for."""
    assert leaks.secret_lines(paths.source_notebook(ROOT, assignment)), \
        f"{assignment}: no solution or hidden-test lines found"


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_leak_scanner_catches_a_planted_leak(assignment, fresh, tmp_path):
    from servelab_autograder.course.execute import graded

    built = paths.release_notebook(ROOT, assignment, fresh)
    secret = sorted(leaks.secret_lines(paths.source_notebook(ROOT, assignment)), key=len)[-1]
    folder = tmp_path / assignment
    shutil.copytree(built.parent, folder)
    nb = json.loads((folder / built.name).read_text(encoding="utf-8"))
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["source"] = "".join(code["source"]) + "\n    " + secret + "\n### BEGIN HIDDEN TESTS\n"
    answers = [(name, value) for name, value, _ in leaks.drill_answers(assignment)
               if not (value.is_integer() and abs(value) < 10)]
    if answers:  # a drill's answer printed by a cell the release keeps the outputs of
        shown = next(c for c in nb["cells"] if c["cell_type"] == "code" and not graded(c))
        shown["outputs"] = [{"output_type": "stream", "name": "stdout", "text": f"total: {answers[0][1]:.6g} steps\n"}]
    (folder / built.name).write_text(json.dumps(nb), encoding="utf-8")
    (folder / "notes.txt").write_text(f"{secret}\n", encoding="utf-8")
    found = leaks.find_leaks(ROOT, [assignment], release_dir=tmp_path)
    assert any("BEGIN HIDDEN TESTS" in leak for leak in found), found
    assert sum(repr(secret) in leak for leak in found) == 2, found
    if answers:
        assert any(f"the answer to {answers[0][0]}" in leak for leak in found), found


def test_release_keeps_outputs_of_ungraded_cells_only():
    """The pictures a learner sees before Run All: ungraded cells that ran with the stubs keep their outputs
    (nbval compares them with a fresh run, see conftest.py); graded cells never hold any."""
    from servelab_autograder.course.execute import graded

    for a in CHAPTERS:
        nb = json.loads(paths.release_notebook(ROOT, a).read_text(encoding="utf-8"))
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert not [c["id"] for c in code if graded(c) and (c["outputs"] or c["execution_count"])], a
        assert any(c["outputs"] for c in code if not graded(c)), f"{a}: the release keeps no outputs"


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_learner_answers_are_not_a_stale_release(assignment, fresh, tmp_path):
    """A learner working in course/ (answers, outputs, scratch cells) does not make --check fail, but
    any change to what the release itself contains does."""
    built = paths.release_notebook(ROOT, assignment, fresh)
    nb = json.loads(built.read_text(encoding="utf-8"))
    mine = tmp_path / "mine.ipynb"
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution"):
            cell["source"] = "def my_answer():\n    return 42\n"
        if cell["cell_type"] == "code":
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "hi\n"}]
            cell["execution_count"] = 3
    scratch = {"cell_type": "code", "id": "my-scratch", "metadata": {}, "source": "1 + 1",
               "outputs": [], "execution_count": None}
    nb["cells"].insert(1, scratch)
    mine.write_text(json.dumps(nb), encoding="utf-8")
    assert release.learner_edits_only(built, mine)
    test_cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade"))
    test_cell["source"] = "pass\n"
    mine.write_text(json.dumps(nb), encoding="utf-8")
    assert not release.learner_edits_only(built, mine)


def _validator(invert: bool):
    from nbgrader.validator import Validator
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    config.Validator.invert = invert
    return Validator(config=config)


@pytest.mark.parametrize("assignment", ENDS)
def test_validator_passes_the_solutions(assignment):
    result = _validator(invert=False).validate(str(paths.source_notebook(ROOT, assignment)))
    problems = {k: v for k, v in result.items() if v}
    detail = "\n".join(f"{k}: {item.get('raw_error') or item.get('source', '')[:300]}"
                       for k, items in problems.items() for item in items)
    assert not problems, f"{assignment}: the solutions notebook fails nbgrader validation:\n{detail}"


@pytest.mark.parametrize("assignment", ENDS)
def test_validator_fails_the_release(assignment, fresh):
    path = paths.release_notebook(ROOT, assignment)
    if not _pristine(assignment, fresh):  # missing (test above fails) or holds a learner's answers
        path = paths.release_notebook(ROOT, assignment, fresh)
    result = _validator(invert=True).validate(str(path))
    assert not result.get("changed"), f"{assignment}: release checksums do not match its locked cells"
    passing = [item["source"].splitlines()[0] if item["source"] else "" for item in result.get("passed", [])]
    assert not passing, f"{assignment}: these test cells pass on the unsolved release: {passing}"


def test_release_is_byte_stable(fresh, tmp_path):
    """generate_assignment gives the same bytes twice, so --check needs no normalisation beyond JSON. Shown on the
    first and the newest chapter: stability is the tool's property (the fixture already released every chapter)."""
    for a in ENDS:
        run = release.generate(ROOT, a, release_dir=tmp_path, db=False)
        assert run.returncode == 0, nbgrader_process.last_error(run.output)
        again = paths.release_notebook(ROOT, a, tmp_path).read_bytes()
        assert again == paths.release_notebook(ROOT, a, fresh).read_bytes(), a


def test_start_page_maps_every_chapter():
    """course/README.md, the page `make lab` opens first: one row per chapter, each linking its notebook."""
    import re

    page = (ROOT / paths.RELEASE_DIR / "README.md").read_text(encoding="utf-8")
    links = dict(re.findall(r"\| \[(ch\d\d_\w+)\]\(([^)]+)\)", page))
    assert sorted(links) == CHAPTERS, f"the start page lists {sorted(links)}, the course has {CHAPTERS}"
    for a, target in links.items():
        assert (ROOT / paths.RELEASE_DIR / target).resolve() == paths.release_notebook(ROOT, a).resolve(), a
    assert "make check" in page and "make check CH=" in page


def test_a_chapter_is_named_whole_or_by_its_short_id():
    assert paths.resolve(["ch03_token_budget", "ch03", "3", "03"], CHAPTERS) == ["ch03_token_budget"] * 4
    assert paths.resolve([], CHAPTERS) == []
    for wrong in ("ch99", "token_budget", "ch0", "99"):
        with pytest.raises(ValueError, match=f"no chapter '{wrong}': .*ch03 \\(ch03_token_budget\\)"):
            paths.resolve([wrong], CHAPTERS)


def test_if_stale_touches_only_the_chapters_asked_for_and_says_so_in_one_line(monkeypatch, capsys):
    asked = []
    monkeypatch.setattr(release, "is_stale", lambda root, a, stamps: asked.append(a) and False)
    monkeypatch.setattr(release, "save_stamps", lambda root, stamps: None)
    monkeypatch.setattr(release, "find_leaks", lambda root, todo: [])
    assert release.main(["--if-stale", "ch02"]) == 0
    assert asked == ["ch02_nanovllm_scheduler"]
    assert capsys.readouterr().out == "up to date  ch02_nanovllm_scheduler\n"
    assert release.main(["--if-stale"]) == 0
    assert capsys.readouterr().out == f"up to date  {len(CHAPTERS)} chapters\n"
    assert release.main(["--if-stale", "ch99"]) == 2
    assert "no chapter 'ch99'" in capsys.readouterr().err
