"""What a course of N learners needs from its server, measured here (as root, after `make hub-deps`):

    python hub/sizing.py [--learners 200] [--grade 8]

1. the memory of an idle learner server: the course environment's JupyterLab with the learner lab, started as an
   unprivileged user, its proportional set size (PSS: shared pages split among the processes sharing them) once it
   answers;
2. the memory of a kernel with each chapter's imports: a fresh `servelab` kernel in that server runs the chapter's
   first code cell (its imports and setup), then its PSS;
3. grading throughput: `--grade N` copies of chapter 01's solution graded by the sandboxed grader with one job and
   on a Dask LocalCluster of one worker per core (the hub's path), in submissions per minute per core;
and, from those, the machine a course of `--learners` needs (printed with the assumptions it makes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

PREFIX = Path(os.environ.get("SERVELAB_HUB_PREFIX", "/opt/servelab-hub"))
REPO = Path(__file__).resolve().parents[1]
USER = os.environ.get("SERVELAB_SIZING_USER", "nobody")


def pss_kib(pid: int) -> int:
    """PSS of ``pid`` and every process below it, in KiB."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            rollup = Path(f"/proc/{p}/smaps_rollup").read_text()
            total += int(next(ln.split()[1] for ln in rollup.splitlines() if ln.startswith("Pss:")))
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            continue
    return total


def run_in_kernel(base: str, token: str, kernel_id: str, code: str, timeout: float = 300, ctx=None) -> tuple[str, str]:
    """(how it ended: ok / error / died / timeout, what it printed): ``code`` run in the kernel through the Jupyter
    websocket protocol, as the lab runs a cell."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    url = f"{base.replace('http', 'ws', 1)}/api/kernels/{kernel_id}/channels"

    async def go() -> tuple[str, str]:
        conn = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"},
                                                   ssl_options=ctx, request_timeout=60))
        msg_id, out = uuid.uuid4().hex, []
        conn.write_message(json.dumps({
            "header": {"msg_id": msg_id, "username": "servelab", "session": uuid.uuid4().hex, "version": "5.3",
                       "msg_type": "execute_request", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                try:
                    raw = await asyncio.wait_for(conn.read_message(), max(0.1, deadline - time.monotonic()))
                except TimeoutError:
                    break
                if raw is None:
                    return "died", "".join(out)
                msg = json.loads(raw)
                kind, content = msg.get("msg_type") or msg["header"]["msg_type"], msg.get("content", {})
                if kind == "status" and content.get("execution_state") in ("restarting", "dead"):
                    return "died", "".join(out)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                if kind == "stream":
                    out.append(content.get("text", ""))
                elif kind == "execute_reply":
                    return content.get("status", "?"), "".join(out)
            return "timeout", "".join(out)
        finally:
            conn.close()

    return asyncio.run(go())


def api(base: str, token: str, method: str, path: str, body: dict | None = None, ctx=None):
    req = urllib.request.Request(f"{base}{path}", method=method, headers={"Authorization": f"token {token}"},
                                 data=json.dumps(body).encode() if body is not None else None)
    with urllib.request.urlopen(req, timeout=60, context=ctx) as r:
        text = r.read().decode()
        return json.loads(text) if text else {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_code_cell(chapter: str) -> str:
    nb = json.loads((REPO / "course" / chapter / f"{chapter}.ipynb").read_text())
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
    return "".join(cell["source"]).replace("%matplotlib inline", "import matplotlib; matplotlib.use('Agg')")


def measure_server(chapters: list[str]) -> tuple[int, dict[str, int]]:
    """(idle server PSS, {chapter: kernel PSS after its first cell}), in KiB."""
    home = Path(tempfile.mkdtemp(prefix="servelab-sizing-"))
    shutil.copytree(REPO / "course", home / "course")
    shutil.chown(home, USER)
    for p in home.rglob("*"):
        shutil.chown(p, USER)
    token, port = secrets.token_hex(16), free_port()
    env = {"PATH": f"{PREFIX}/venv/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
           "JUPYTER_CONFIG_PATH": f"{PREFIX}/lab/learner", "SERVELAB_ROOT": f"{PREFIX}/root"}
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    log = open(home.parent / f"{home.name}.log", "w")
    # runuser sets HOME to the account's own: `env -i` gives the server this scratch home instead
    server = subprocess.Popen([runuser, "-u", USER, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
                               f"{PREFIX}/venv/bin/jupyter-lab", "--no-browser",
                               f"--port={port}", "--ip=127.0.0.1", f"--IdentityProvider.token={token}",
                               f"--ServerApp.root_dir={home}",
                               f"--LabApp.app_settings_dir={PREFIX}/lab/learner/settings"],
                              cwd=home, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                api(base, token, "GET", "/api/status")
                break
            except OSError:
                if server.poll() is not None:
                    raise RuntimeError(f"the learner's server exited: see {log.name}") from None
                time.sleep(0.5)
        else:
            raise RuntimeError(f"the learner's server did not answer in 2 minutes: see {log.name}")
        time.sleep(5)                                   # let its start-up settle
        idle = pss_kib(server.pid)
        kernels = {}
        for chapter in chapters:
            kernel = api(base, token, "POST", "/api/kernels", {"name": "servelab"})
            ended, printed = run_in_kernel(base, token, kernel["id"], first_code_cell(chapter))
            kernel_pid = pss_kib(server.pid) - idle
            kernels[chapter] = kernel_pid if ended == "ok" else -1
            api(base, token, "DELETE", f"/api/kernels/{kernel['id']}")
            time.sleep(1)
            print(f"  kernel after {chapter}'s first cell: {kernels[chapter] / 1024:.0f} MiB ({ended})", flush=True)
        Path(log.name).unlink(missing_ok=True)
        return idle, kernels
    except Exception:
        print(f"the learner server's log is kept: {log.name}", file=sys.stderr)
        raise
    finally:
        server.terminate()
        server.wait(30)
        log.close()
        shutil.rmtree(home, ignore_errors=True)


def grading_rate(copies: int, jobs: int, dask: bool = False) -> float:
    """Submissions graded per minute with ``jobs`` sandboxes (on a Dask LocalCluster of ``jobs`` workers, as
    `make hub-autograde WORKERS=N` grades, or the local process pool), over ``copies`` copies of chapter 01's
    solution."""
    chapter = "ch01_continuous_batching"
    with tempfile.TemporaryDirectory() as tmp:
        built = Path(tmp) / "built"
        subprocess.run([sys.executable, "-m", "servelab_autograder.testing.submissions", str(built), chapter],
                       check=True, capture_output=True, cwd=REPO)
        solution = built / "solution" / chapter
        subs = Path(tmp) / "subs"
        for i in range(copies):
            shutil.copytree(solution, subs / f"learner{i:03d}" / chapter)
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "servelab_autograder.runner.grade", str(subs), "--out",
                        str(Path(tmp) / "out"), "--jobs", str(jobs), *(["--dask", "local"] if dask else [])],
                       check=True, capture_output=True, cwd=REPO)
        return copies / (time.monotonic() - start) * 60


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learners", type=int, default=200)
    parser.add_argument("--grade", type=int, default=8, help="copies graded for the throughput (0: skip)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("run it as root: it starts a learner's server as an unprivileged user", file=sys.stderr)
        return 2
    chapters = sorted(p.name for p in (REPO / "course").iterdir() if (p / f"{p.name}.ipynb").is_file())
    cores = os.cpu_count() or 1
    print(f"machine: {cores} cores; course environment {PREFIX}", flush=True)
    idle, kernels = measure_server(chapters)
    print(f"idle learner server: {idle / 1024:.0f} MiB PSS", flush=True)
    heaviest = max(kernels, key=kernels.get)
    if args.grade:
        one = grading_rate(args.grade, 1)
        many = grading_rate(args.grade, cores, dask=True)
        print(f"grading chapter 01: {one:.1f} submissions/min with 1 job, {many:.1f} on a Dask LocalCluster of "
              f"{cores} workers ({many / cores:.1f} per core)", flush=True)
    else:
        many = 0.0
    gib = (idle + kernels[heaviest]) / 2**20
    print(f"\nfor {args.learners} learners, all working at once, each with one kernel of the heaviest chapter "
          f"({heaviest}): {args.learners} x {gib:.2f} GiB = {args.learners * gib:.0f} GiB of memory")
    if many:
        per_core = many / cores
        print(f"grading {args.learners} submissions of chapter 01: {args.learners / many:.1f} min on these {cores} "
              f"cores, {args.learners / (per_core * 16):.1f} min on 16 ({per_core:.1f} per core per minute)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
