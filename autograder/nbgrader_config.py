"""nbgrader configuration for servelab (loaded by the repo root's nbgrader_config.py).

Layout (nbgrader's "steps" renamed to fit the workbook):
    solutions/<a>/<a>.ipynb                    instructor notebooks (solutions + hidden tests)
    course/<a>/<a>.ipynb                       what learners open (made by `make release`)
    autograder/submitted/<student>/<a>/        submissions (runtime data, git-ignored)
    autograder/autograded/, autograder/feedback/, autograder/gradebook.db   (runtime data)

Every path is derived from this file's location, so a copy of the repo elsewhere works unchanged.
"""

import os

c = get_config()  # noqa: F821  (injected by traitlets when nbgrader loads the file)

AUTOGRADER = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(AUTOGRADER)

# --- where things live ---------------------------------------------------------------------------
c.CourseDirectory.root = ROOT
c.CourseDirectory.course_id = "servelab"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "course"
c.CourseDirectory.submitted_directory = "autograder/submitted"
c.CourseDirectory.autograded_directory = "autograder/autograded"
c.CourseDirectory.feedback_directory = "autograder/feedback"
# nbgrader's default "solution" would sit one letter away from our "solutions/": keep its
# by-products under a git-ignored folder instead.
c.CourseDirectory.solution_directory = "autograder/runs/solution"
c.CourseDirectory.source_with_tests_directory = "autograder/runs/source_with_tests"
# The gradebook holds every solution and hidden test (table source_cell): never ship or commit it.
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(AUTOGRADER, "gradebook.db")

# The release copies every non-notebook file of solutions/<a>/ into course/<a>/ unless it matches
# one of these (matched on the base name). Instructor-only support files must never reach learners:
# Python modules (reference code, hidden helpers), data stores, editor and OS debris. Learner-facing
# helpers live in the installed `servelab` package, not next to the notebook.
c.CourseDirectory.ignore = [
    ".*",  # .ipynb_checkpoints, .DS_Store, .git*, editor swap files
    "__pycache__",
    "*.pyc",
    "*.py",
    "*.db",
    "*.sqlite*",
    "*.log",
    "*.bak",
    "*.orig",
    "*.rej",
    "*~",
    "*.swp",
    "hidden*",
    "*hidden*",
    "*solution*",
    "known_wrong",
    "feedback",
    "autograded",
    "submitted",
]

# --- execution -----------------------------------------------------------------------------------
# Always the workbook's kernel, whatever kernelspec a submission carries (a saved kernelspec may
# resolve to another environment).
c.Execute.kernel_name = "servelab"
# Per-cell wall-clock limit for nbgrader run by hand (nbgrader autograde, the formgrader). The
# autograder (`make autograde`) sets its own limits in CPU time instead: servelab_autograder/runner/limits.py.
c.Execute.timeout = 60
c.Execute.startup_timeout = 60
c.Execute.interrupt_on_timeout = True
c.Execute.iopub_timeout = 4
# Scores are read from the outputs, so the kernel need not shut down gracefully: "graceful" waits up
# to 5 s for a kernel that is stuck in a loop before killing it anyway.
c.Execute.shutdown_kernel = "immediate"
# Learners must not be able to skip a graded cell by tagging it "skip-execution".
c.Execute.skip_cells_with_tag = "servelab-never-skip-" + "0" * 16

# --- grading ------------------------------------------------------------------------------------
# nbgrader scores any stderr output in a test cell as 0. Drop stderr chunks that are pure noise
# (warnings from libraries, not from the learner's logic) before scoring. Everything else on stderr
# still costs the points, by design.
# IgnorePattern ships disabled (its own `enabled` defaults to False): switch it on explicitly.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = (
    r"(?s)\A\s*(?:"
    r"[^\n]*(?:UserWarning|DeprecationWarning|FutureWarning|PendingDeprecationWarning|RuntimeWarning"
    r"|ResourceWarning)[^\n]*\n(?:[ \t][^\n]*\n?)*"  # "file:line: XWarning: msg" + indented source line
    r"|[^\n]*NNPACK[^\n]*\n?"  # torch on CPUs without NNPACK support
    r"|[^\n]*(?:Matplotlib is building the font cache|Matplotlib created a temporary)[^\n]*\n?"
    r")+\s*\Z"
)
# A deleted test cell is put back (with a comment header) and graded instead of silently scoring 0.
c.OverwriteCells.add_missing_cells = True
# Keep autograded notebooks and feedback readable: at most 1000 lines of stream output per cell.
c.LimitOutput.max_lines = 1000
c.LimitOutput.max_traceback = 100

# The autograder (servelab_autograder.runner.grade) wraps nbgrader's executor: the kernel runs in a sandbox,
# cells are limited in CPU time and output bytes, and the grader learns which cell a dead or stuck
# kernel was running (servelab_autograder.runner.kernel_guard). Without $SERVELAB_GRADE_PLAN (nbgrader run by
# hand, or from the formgrader) it behaves exactly like nbgrader's own Execute.
try:
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import (
        AssignLatePenalties,
        CheckCellMetadata,
        IgnorePattern,
        LimitOutput,
        SaveAutoGrades,
    )

    from servelab_autograder.runner.kernel_guard import GuardedExecute
except ImportError:  # pragma: no cover - servelab not installed; fall back to nbgrader's defaults
    pass
else:
    c.Autograde.autograde_preprocessors = [
        GuardedExecute,
        IgnorePattern,
        ClearMetadataPreprocessor,
        LimitOutput,
        SaveAutoGrades,
        AssignLatePenalties,
        CheckCellMetadata,
    ]
