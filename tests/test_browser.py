"""The released chapter works for a learner in JupyterLab, driven in a real (headless) Chromium.

A JupyterLab server runs on a temporary copy of `course/` with its own HOME, config, workspaces and
settings, so nothing on the machine changes and no earlier session leaks in. It is the learner's lab, as
`make lab` starts it (`lab/learner` on JUPYTER_CONFIG_PATH). The tests open the first chapter and check
what the learner sees: the picture before anything has run, then, after Run All, the plot, the
`NotImplementedError` of an unsolved exercise, and that Run All reached the end of the notebook; that the
learner's lab has none of nbgrader's instructor tools and no news pop-up, while the instructor's lab
(`make lab-instructor`, without that folder) has them; and that a feedback page from the grader shows a
pitfall's message whole, wrapped rather than cut.

Knobs (environment variables):
  SERVELAB_BROWSER_NOTEBOOK  notebook to open, relative to the course dir
                             (default ch01_continuous_batching/ch01_continuous_batching.ipynb)
  SERVELAB_BROWSER_COURSE    course dir to copy (default <repo>/course)
  SERVELAB_BROWSER_TIMEOUT   seconds allowed for Run All (default 240)
  SERVELAB_CHROMIUM          browser binary (default /usr/bin/chromium)
  CI                         when true, a missing browser fails the test instead of skipping it
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from lab_page import JS_CHECK_OUTPUT, JS_RUN_CHECK

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
CHROMIUM = Path(os.environ.get("SERVELAB_CHROMIUM", "/usr/bin/chromium"))
COURSE = Path(os.environ.get("SERVELAB_BROWSER_COURSE", REPO / "course"))
NOTEBOOK = os.environ.get("SERVELAB_BROWSER_NOTEBOOK", "ch01_continuous_batching/ch01_continuous_batching.ipynb")
KERNEL_NAME = "servelab"
SERVER_START_TIMEOUT_S = 120
PAGE_TIMEOUT_S = 90
RUN_ALL_TIMEOUT_S = float(os.environ.get("SERVELAB_BROWSER_TIMEOUT", "240"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, n: int = 60) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"(no server log: {e})"
    return "\n".join(lines[-n:])


def _kernel_data_dirs() -> list[str]:
    """Data dirs holding the `servelab` kernelspec (installed with `--sys-prefix` into the venv)."""
    dirs = [Path(sys.prefix) / "share" / "jupyter"]
    extra = os.environ.get("JUPYTER_PATH")
    out = [str(d) for d in dirs if (d / "kernels" / KERNEL_NAME / "kernel.json").exists()]
    if extra:
        out += [p for p in extra.split(os.pathsep) if p]
    return out


@dataclass
class LabServer:
    base: str
    token: str
    root: Path
    log: Path
    proc: subprocess.Popen

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base}{path}{sep}token={self.token}"

    def log_tail(self, n: int = 60) -> str:
        return f"--- jupyter lab log (last {n} lines of {self.log}) ---\n{_tail(self.log, n)}"


def _require_browser() -> None:
    if CHROMIUM.exists():
        return
    msg = f"{CHROMIUM} not found: install Debian's chromium (`make browser-deps`)"
    if _in_ci():
        pytest.fail(f"CI is set and the browser test cannot run: {msg}")
    pytest.skip(msg)


def _write_lab_settings(settings_dir: Path) -> None:
    """User settings that keep the page clean: no news or update toast over the notebook."""
    target = settings_dir / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))


LEARNER_LAB = REPO / "lab" / "learner"   # what `make lab` puts on JUPYTER_CONFIG_PATH
INSTRUCTOR_PLUGINS = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                      "@jupyter/nbgrader:course-list")
NEWS_PLUGIN = "@jupyterlab/apputils-extension:announcements"


def _start_server(tmp: Path, root: Path, learner: bool = True) -> LabServer:
    home = tmp / "home"
    for d in (home, tmp / "config", tmp / "data", tmp / "runtime", tmp / "workspaces", tmp / "settings"):
        d.mkdir(parents=True, exist_ok=True)
    _write_lab_settings(tmp / "settings")
    kernel_dirs = _kernel_data_dirs()
    if not kernel_dirs:
        pytest.fail(
            f"no `{KERNEL_NAME}` kernelspec under {sys.prefix}/share/jupyter: run `make setup` "
            f"(it installs the kernel with `ipykernel install --sys-prefix`)"
        )
    env = dict(os.environ)
    env.update(
        HOME=str(home),
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_DATA_DIR=str(tmp / "data"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        JUPYTER_PATH=os.pathsep.join(kernel_dirs),
        IPYTHONDIR=str(home / ".ipython"),
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
        SERVELAB_STATE=str(tmp / "state"),   # %check's progress and graded copies: not the repository's .servelab
    )
    env.pop("JUPYTER_TOKEN", None)
    env.pop("JUPYTER_CONFIG_PATH", None)
    if learner:
        env["JUPYTER_CONFIG_PATH"] = str(LEARNER_LAB)

    token = secrets.token_hex(24)
    last_error = ""
    for _attempt in range(3):  # another process may grab the free port between probing and binding
        port = _free_port()
        log = tmp / f"jupyter-lab-{port}.log"
        cmd = [
            str(VENV_BIN / "jupyter"),
            "lab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
            f"--LabApp.user_settings_dir={tmp / 'settings'}",
            "--LabApp.news_url=None",
            "--LabApp.extension_manager=readonly",
        ]
        if learner:  # as `make lab` runs it (lab/learner's config exposes the app to the page, for %check)
            cmd += [f"--LabApp.app_settings_dir={LEARNER_LAB / 'settings'}",
                    "--LabApp.default_url=/lab/tree/README.md"]
        else:
            cmd.append("--LabApp.expose_app_in_browser=True")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")  # as root the server refuses to start without it
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        server = LabServer(f"http://127.0.0.1:{port}", token, root, log, proc)
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(server.url("/api/status"), timeout=5) as r:
                    if r.status == 200:
                        return server
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.5)
        else:
            _stop_server(server)
            pytest.fail(
                f"jupyter lab did not answer /api/status within {SERVER_START_TIMEOUT_S} s\n{server.log_tail()}"
            )
        last_error = server.log_tail()
        if "already in use" not in last_error:
            break
    pytest.fail(f"jupyter lab exited during startup (exit code {proc.returncode})\n{last_error}")


def _stop_server(server: LabServer) -> None:
    """Shut the server down with its kernels; escalate to signals if it does not go."""
    proc = server.proc
    if proc.poll() is None:
        try:
            req = urllib.request.Request(server.url("/api/shutdown"), method="POST")
            urllib.request.urlopen(req, timeout=10).close()
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> LabServer:
    _require_browser()
    if not (COURSE / NOTEBOOK).is_file():
        pytest.fail(f"{COURSE / NOTEBOOK} does not exist: run `make release` to build the course notebooks")
    tmp = tmp_path_factory.mktemp("jupyterlab")
    root = tmp / "course"
    shutil.copytree(COURSE, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    server = _start_server(tmp, root)
    try:
        yield server
    finally:
        _stop_server(server)


@pytest.fixture(scope="module")
def instructor_lab(tmp_path_factory) -> LabServer:
    _require_browser()
    tmp = tmp_path_factory.mktemp("jupyterlab-instructor")
    root = tmp / "course"
    shutil.copytree(COURSE, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    server = _start_server(tmp, root, learner=False)
    try:
        yield server
    finally:
        _stop_server(server)


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


# JavaScript run in the page (JupyterLab exposes the app as window.jupyterapp).
JS_PANEL = "const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
JS_KERNEL_IDLE = f"""() => {{ {JS_PANEL}
  const k = panel && panel.sessionContext && panel.sessionContext.session
            && panel.sessionContext.session.kernel;
  return !!k && k.status === 'idle';
}}"""
JS_KERNEL_INFO = f"""() => {{ {JS_PANEL}
  if (!panel || !panel.sessionContext) return {{widget: panel ? panel.constructor.name : null}};
  const s = panel.sessionContext.session;
  const k = s && s.kernel;
  return {{widget: panel.constructor.name, path: s ? s.path : null,
           kernel: k ? k.name : null, status: k ? k.status : null,
           dialogs: Array.from(document.querySelectorAll('.jp-Dialog')).map(d => d.innerText.slice(0, 300))}};
}}"""
JS_START_RUN_ALL = """() => {
  window.__servelabRunAll = 'running';
  window.jupyterapp.commands.execute('notebook:run-all-cells').then(
    () => { window.__servelabRunAll = 'done'; },
    (e) => { window.__servelabRunAll = 'error: ' + e; });
  return true;
}"""
JS_RUN_FINISHED = f"""() => {{ {JS_PANEL}
  const k = panel.sessionContext.session && panel.sessionContext.session.kernel;
  const busyPrompt = Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-InputPrompt'))
                         .some(p => p.textContent.includes('[*]'));
  return window.__servelabRunAll !== 'running' && !!k && k.status === 'idle' && !busyPrompt;
}}"""
JS_CODE_CELLS = f"""() => {{ {JS_PANEL}
  return panel.content.widgets.filter(w => w.model.type === 'code').map(w => {{
    const meta = w.model.sharedModel.getMetadata() || {{}};
    const outputs = w.model.outputs.toJSON();
    const err = outputs.find(o => o.output_type === 'error');
    return {{
      count: w.model.executionCount,
      source: w.model.sharedModel.getSource().slice(0, 80),
      tags: meta.tags || [],
      grade_id: (meta.nbgrader || {{}}).grade_id || null,
      error: err ? `${{err.ename}}: ${{String(err.evalue).slice(0, 120)}}` : null,
    }};
  }});
}}"""
JS_SCROLL_TO_COUNT = f"""(count) => {{ {JS_PANEL}
  const w = panel.content.widgets.find(w => w.model.type === 'code' && w.model.executionCount === count);
  if (w) w.node.scrollIntoView({{block: 'start'}});
  return !!w;
}}"""
JS_IMAGES = """() => Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-OutputArea-output img'))
  .map(img => ({w: img.naturalWidth, h: img.naturalHeight, complete: img.complete}))"""
JS_ERRORS = """() => Array.from(document.querySelectorAll(
    '.jp-NotebookPanel .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'))
  .map(e => e.textContent)"""


def _wait(page, js: str, timeout_s: float, what: str, lab: LabServer, polling: int = 250) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(js, timeout=timeout_s * 1000, polling=polling)
    except PlaywrightTimeout:
        state = page.evaluate(JS_KERNEL_INFO)
        pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}; page state: {state}\n{lab.log_tail()}")


def test_run_all_in_jupyterlab(lab, browser, tmp_path):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    t0 = time.monotonic()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console_errors.append(f"pageerror: {e}"))
    shots = []
    try:
        page.goto(lab.url(f"/lab/tree/{NOTEBOOK}?reset"), timeout=PAGE_TIMEOUT_S * 1000)
        _wait(
            page,
            "() => !!document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell')",
            PAGE_TIMEOUT_S,
            "the notebook's cells to render",
            lab,
        )
        _wait(page, JS_KERNEL_IDLE, PAGE_TIMEOUT_S, f"the `{KERNEL_NAME}` kernel to start and go idle", lab)
        info = page.evaluate(JS_KERNEL_INFO)
        assert info["path"] and info["path"].endswith(Path(NOTEBOOK).name), f"wrong notebook open: {info}"
        assert info["kernel"] == KERNEL_NAME, f"notebook runs kernel {info['kernel']!r}, not {KERNEL_NAME!r}"

        # (0) before anything runs, the release's kept outputs already show the why-it-matters picture
        _wait(page, f"() => ({JS_IMAGES})().some(i => i.complete && i.w > 0 && i.h > 0)", 30,
              "the picture the release keeps, before Run All", lab)

        page.evaluate(JS_START_RUN_ALL)
        _wait(
            page,
            JS_RUN_FINISHED,
            RUN_ALL_TIMEOUT_S,
            "Run All to finish (kernel idle, no [*] prompts)",
            lab,
            polling=500,
        )
        run_all = page.evaluate("() => window.__servelabRunAll")
        assert run_all == "done", f"notebook:run-all-cells failed in the page: {run_all}"

        problems: list[str] = []

        # (a) the plot renders as a real PNG image.
        img = page.locator(".jp-NotebookPanel .jp-OutputArea-output img").first
        try:
            img.scroll_into_view_if_needed(timeout=10_000)
            page.wait_for_function(f"() => ({JS_IMAGES})().some(i => i.complete && i.w > 0 && i.h > 0)", timeout=30_000)
            page.wait_for_timeout(300)
            shots.append(tmp_path / "run_all_plot.png")
            page.screenshot(path=str(shots[-1]))
        except PlaywrightTimeout:
            images = page.evaluate(JS_IMAGES)
            problems.append(
                "(a) no output renders a decoded PNG <img> with a non-zero natural width"
                f" (images found: {images or 'none'})"
            )

        # (b) an unsolved exercise shows its NotImplementedError in an error output.
        errors = page.evaluate(JS_ERRORS)
        if any("NotImplementedError" in e for e in errors):
            page.locator(
                '.jp-NotebookPanel .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]',
                has_text="NotImplementedError",
            ).first.scroll_into_view_if_needed(timeout=10_000)
            page.wait_for_timeout(300)
            shots.append(tmp_path / "run_all_error.png")
            page.screenshot(path=str(shots[-1]))
        else:
            problems.append(
                "(b) no error output mentions NotImplementedError"
                f" (error outputs: {[e[:200] for e in errors] or 'none'})"
            )

        # (c) Run All went through the whole notebook: the last code cell, and every other, has run.
        cells = page.evaluate(JS_CODE_CELLS)
        if not cells:
            problems.append("(c) the notebook has no code cells")
        elif cells[-1]["count"] is None or any(c["count"] is None for c in cells):
            ran = [c for c in cells if c["count"] is not None]
            stopper = max(ran, key=lambda c: c["count"]) if ran else None
            where = (
                f"it stopped after cell {stopper['grade_id'] or stopper['source'][:40]!r} "
                f"(tags {stopper['tags']}, error {stopper['error']!r})"
                if stopper
                else "no cell ran"
            )
            not_run = [c["grade_id"] or c["source"][:40] for c in cells if c["count"] is None]
            problems.append(
                f"(c) Run All did not reach the last code cell: {where}; {len(not_run)} code cells never ran"
                f" ({not_run[:6]}). A cell that raises in the released notebook stops Run All unless it is"
                " tagged `raises-exception`."
            )
            if stopper:
                page.evaluate(JS_SCROLL_TO_COUNT, stopper["count"])
                page.wait_for_timeout(300)
                shots.append(tmp_path / "run_all_stopped.png")
                page.screenshot(path=str(shots[-1]))

        assert not problems, "JupyterLab Run All check failed:\n  " + "\n  ".join(problems)
    except BaseException:
        try:
            shots.append(tmp_path / "failure.png")
            page.screenshot(path=str(shots[-1]))
        except Exception:  # noqa: BLE001 - the original failure matters more
            pass
        if console_errors:
            print("browser console errors:\n  " + "\n  ".join(console_errors[-20:]))
        raise
    finally:
        for s in shots:
            if s.exists():
                print(f"screenshot: {s}")
        print(f"browser test took {time.monotonic() - t0:.1f} s (server already running)")
        context.close()


def test_check_from_inside_the_lab(lab, browser):
    """%check in the learner's notebook saves it (through the app the learner lab exposes) and prints make check's
    report for that chapter, graded outside the kernel, with the progress kept in the server's SERVELAB_STATE."""
    chapter = Path(NOTEBOOK).parent.name
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        page.goto(lab.url(f"/lab/tree/{NOTEBOOK}"), timeout=PAGE_TIMEOUT_S * 1000)
        _wait(page, JS_KERNEL_IDLE, PAGE_TIMEOUT_S, f"the `{KERNEL_NAME}` kernel to start and go idle", lab)
        page.evaluate(JS_RUN_CHECK)
        _wait(page, f"() => ({JS_CHECK_OUTPUT})().includes('your progress')", RUN_ALL_TIMEOUT_S,
              "%check's report", lab, polling=500)
        text = page.evaluate(JS_CHECK_OUTPUT)
        assert f"saved {Path(NOTEBOOK).name}" in text, f"%check did not save the notebook first:\n{text}"
        assert f"{chapter}: 0 / " in text and "NotImplementedError: fill in the function first" in text, text
        saved = json.loads((lab.root / NOTEBOOK).read_text(encoding="utf-8"))
        assert any("".join(c["source"]) == "%check" for c in saved["cells"]), "the notebook on disk was not saved"
        progress = json.loads((lab.root.parent / "state" / "progress.json").read_text(encoding="utf-8"))
        assert progress[chapter]["score"] == 0 and progress[chapter]["todo"], progress
    finally:
        context.close()


JS_PLUGINS = """(ids) => ids.map(id => window.jupyterapp.hasPlugin(id))"""


def _open_lab(server: LabServer, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.goto(server.url("/lab?reset"), timeout=PAGE_TIMEOUT_S * 1000)
    _wait(page, "() => !!(window.jupyterapp && window.jupyterapp.started)", PAGE_TIMEOUT_S, "JupyterLab to start",
          server)
    page.evaluate("() => window.jupyterapp.started")
    return context, page


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as err:
        return err.code


def test_learner_lab_has_no_instructor_tools(lab, browser):
    context, page = _open_lab(lab, browser)
    try:
        plugins = INSTRUCTOR_PLUGINS + (NEWS_PLUGIN,)
        present = dict(zip(plugins, page.evaluate(JS_PLUGINS, list(plugins)), strict=True))
        assert not any(present.values()), f"the learner's lab still has: {[p for p, on in present.items() if on]}"
        assert page.evaluate(JS_PLUGINS, ["@jupyter/nbgrader:assignment-list"]) == [True], \
            "the learner's lab lost the Assignments tab"
        assert _status(lab.url("/formgrader")) == 404, "the formgrader's server side still answers"
        # the start page opens first, rendered, with the chapter map
        page.goto(lab.url("/"), timeout=PAGE_TIMEOUT_S * 1000)
        _wait(page, "() => !!document.querySelector('.jp-MarkdownViewer .jp-RenderedMarkdown table')", PAGE_TIMEOUT_S,
              "the start page, rendered, with its chapter table", lab)
        text = page.locator(".jp-MarkdownViewer .jp-RenderedMarkdown").first.inner_text()
        assert "make check" in text and "ch01_continuous_batching" in text, text[:400]
    finally:
        context.close()


def test_instructor_lab_has_the_tools(instructor_lab, browser):
    context, page = _open_lab(instructor_lab, browser)
    try:
        present = dict(zip(INSTRUCTOR_PLUGINS, page.evaluate(JS_PLUGINS, list(INSTRUCTOR_PLUGINS)), strict=True))
        assert all(present.values()), f"the instructor's lab lacks: {[p for p, on in present.items() if not on]}"
        assert _status(instructor_lab.url("/formgrader")) != 404, "the formgrader is not served"
    finally:
        context.close()


PITFALL = "static_finish_at_batch_end"   # its message is the one the old feedback page cut mid-word


@pytest.fixture(scope="module")
def feedback_page(tmp_path_factory) -> tuple[Path, str]:
    """One known-wrong chapter 01 submission graded by the real grader: its feedback page and the pitfall line."""
    from servelab_autograder.judge import known_wrong
    from servelab_autograder.runner import grade, sandbox
    from servelab_autograder.testing import submissions

    _require_browser()
    assignment = "ch01_continuous_batching"
    tmp = tmp_path_factory.mktemp("feedback")
    nb, _ = submissions.known_wrong(assignment)[PITFALL]
    submissions.write_one(tmp / "submitted", "ada", assignment, nb)
    try:
        sandbox.check()
        how = []
    except sandbox.SandboxUnavailable:
        how = ["--unsafe-no-sandbox"]   # trusted: the repository's own known-wrong submission
    assert grade.main([str(tmp / "submitted"), "--out", str(tmp / "out"), "--quiet", "--seed", "1", *how]) == 0
    message = known_wrong.load(known_wrong.folder(REPO, assignment) / f"{PITFALL}.diff").message
    return tmp / "out" / "feedback" / "ada" / assignment / f"{assignment}.html", message


def test_feedback_page_shows_the_pitfall_whole(feedback_page, browser):
    page_path, message = feedback_page
    assert page_path.is_file(), f"no feedback page at {page_path}"
    context = browser.new_context(viewport={"width": 1000, "height": 900})
    page = context.new_page()
    try:
        page.goto(page_path.as_uri(), timeout=PAGE_TIMEOUT_S * 1000)
        toc = page.locator("#toc li", has_text="simulate_static").first
        assert message in toc.inner_text(), f"the list at the top does not name the pitfall: {toc.inner_text()!r}"
        assert page.locator("#toc a", has_text="Test cell").count() == 0, "test cells are still listed unnamed"
        box = page.locator(".output_error pre", has_text=message.split(";")[0][:60]).first
        box.scroll_into_view_if_needed(timeout=10_000)
        assert message in box.inner_text(), "the failure message is not shown whole"
        cut = box.evaluate("e => e.scrollWidth > e.clientWidth + 1")
        assert not cut, "the failure message runs past its box instead of wrapping"
    finally:
        context.close()
