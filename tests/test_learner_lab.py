"""The learner's JupyterLab without a course (`make lab`) and on a course hub: nbgrader's instructor tools are off in
both; its Assignments tab, menu and Validate button, which need a course's exchange, are off only locally."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from jupyterlab_server.config import get_static_page_config

ROOT = Path(__file__).resolve().parents[1]
INSTRUCTOR = {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:course-list"}
COURSE_ONLY = {"@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:validate-assignment", "@jupyter/nbgrader:menu"}


def _disabled(config_path: str, monkeypatch) -> set[str]:
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", config_path)
    return {k for k, v in get_static_page_config(level="all").get("disabledExtensions", {}).items() if v}


def test_make_lab_puts_the_local_layer_before_the_learners_and_shows_the_url():
    dry = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, check=True,
                         env=dict(os.environ, MAKEFLAGS="")).stdout
    path = re.search(r"JUPYTER_CONFIG_PATH=(\S+?)\$", dry).group(1)
    layers = [Path(part).resolve() for part in path.split(":")]
    assert layers == [ROOT / "lab" / "local", ROOT / "lab" / "learner"], path
    assert "| .venv/bin/python scripts/lab_url.py" in dry, "the lab's log goes through the filter that shows its URL"


def test_the_local_lab_hides_what_needs_a_course(monkeypatch):
    off = _disabled(f"{ROOT}/lab/local:{ROOT}/lab/learner", monkeypatch)
    assert INSTRUCTOR | COURSE_ONLY <= off


def test_the_hub_lab_keeps_the_assignments_tab_and_validate(monkeypatch):
    off = _disabled(f"{ROOT}/lab/learner", monkeypatch)
    assert INSTRUCTOR <= off and not COURSE_ONLY & off


def test_make_lab_says_where_to_open_the_lab_once_in_one_line():
    log = ("[I 2026-12-04 ServerApp] Jupyter Server is running at:\n"
           "[I 2026-12-04 ServerApp] http://localhost:8888/lab?token=0123abcd\n"
           "[I 2026-12-04 ServerApp]     http://127.0.0.1:8888/lab?token=0123abcd\n"
           "[I 2026-12-04 ServerApp] Use Control-C to stop this server\n") * 2
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "lab_url.py")], input=log, capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith(log)   # the lab's own log, unchanged
    said = [line for line in out.splitlines() if line.startswith("==>")]
    assert said == ["==> JupyterLab is up: open http://localhost:8888/lab?token=0123abcd  (Ctrl-C twice stops it)"]
