"""The grading sandbox, proved from inside: each limit holds, nothing of the grader is visible or writable,
no network, no process outlives it, and the grader refuses to grade where a sandbox cannot be made.

Each test runs a few lines of Python inside a fresh :class:`servelab_autograder.runner.sandbox.Sandbox` (bwrap, as
the grader makes it for a kernel) and reads what they print. ``make test`` installs bubblewrap and, as
root, the sandbox users (``make sandbox-deps``); without them these tests fail with the grader's own reason.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from servelab_autograder.runner import procs, sandbox
from servelab_autograder.runner.limits import GiB, Limits, MiB

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def _available():
    try:
        sandbox.check()
    except sandbox.SandboxUnavailable as err:
        pytest.fail(f"no grading sandbox on this machine: {err}")


@pytest.fixture
def make_box(tmp_path):
    boxes = []

    def make(**limits) -> sandbox.Sandbox:
        box = sandbox.Sandbox(tmp_path / f"box{len(boxes)}", Limits(**limits)).open()
        boxes.append(box)
        return box

    yield make
    for box in boxes:
        box.close()


def inside(box: sandbox.Sandbox, code: str, timeout: float = 120) -> dict:
    """Run ``code`` in the sandbox; it must print one JSON object last."""
    done = box.run([box.python, "-c", textwrap.dedent(code)], timeout=timeout)
    assert done.returncode == 0, f"exit {done.returncode}\nstdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_it_runs_as_an_unprivileged_user_with_no_capabilities(make_box):
    box = make_box()
    got = inside(box, """
        import json, os
        status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
        print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
                          "cap": status["CapEff"].strip(), "bnd": status["CapBnd"].strip(),
                          "nnp": status["NoNewPrivs"].strip()}))
    """)
    assert got["uid"] != 0 and got["gid"] != 0 and 0 not in got["groups"], got
    assert int(got["cap"], 16) == 0 and int(got["bnd"], 16) == 0 and got["nnp"] == "1", got
    if box.mode == "root":
        assert (got["uid"], got["gid"]) == (box.slot.user.uid, box.slot.user.gid)
        assert pwd.getpwuid(got["uid"]).pw_name.startswith(sandbox.USER_PREFIX)


def test_it_sees_the_course_library_and_its_scratch_and_nothing_of_the_grader(make_box):
    box = make_box()
    got = inside(box, f"""
        import json, os
        course = sorted(os.path.join(d, f)[len("/course/"):] for d, _, fs in os.walk("/course") for f in fs
                        if "__pycache__" not in d)
        probes = {[str(ROOT / "solutions"), str(ROOT / "autograder" / "gradebook.db"), str(ROOT / "course"),
                   str(ROOT / "autograder" / "servelab_autograder" / "grade.py"), str(ROOT / ".git"), "/root/.ssh",
                   tempfile.gettempdir() + "/servelab-grade-probe"]!r}
        print(json.dumps({{"top": sorted(os.listdir("/")), "course": course,
                          "visible": [p for p in probes if os.path.exists(p)]}}))
    """)
    # The interpreter and its environment are bound at their own paths, wherever the checkout lives (CI: /check).
    interpreter = {Path(d).parts[1] for d in sandbox.python_dirs(box.python)}
    assert set(got["top"]) <= {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "proc", "dev", "tmp",
                                "scratch", "course"} | interpreter, (got["top"], interpreter)
    assert got["visible"] == []
    grader_side = {p for p in got["course"] if p.startswith("autograder/")}
    pkg = ROOT / "autograder" / "servelab_autograder"
    allowed = {f"autograder/servelab_autograder/{f.relative_to(pkg)}" for p in sandbox.kernel_side_files(ROOT)
               for f in ([p] if p.is_file() else [q for q in p.rglob("*") if q.is_file()])
               if "__pycache__" not in f.parts}
    assert grader_side == allowed
    for trusted in ("grade.py", "verdicts.py", "known_wrong.py", "checks/ch01.py", "kernel_guard.py"):
        assert f"autograder/servelab_autograder/{trusted}" not in grader_side, trusted
    for kernel_side in ("exercises/ch01.py", "exercises/probe.py", "exercises/plain.py", "exercises/spec.py",
                        "exercises/atlas/ch01_continuous_batching.json", "ch01.py"):
        assert f"autograder/servelab_autograder/{kernel_side}" in grader_side, kernel_side
    assert "lib/servelab/schedulers/scheduler.py" in got["course"] and "sandbox_init.py" in got["course"]
    assert not any(p.startswith(("solutions", "course", "tests")) for p in got["course"])


def test_it_can_write_only_in_its_scratch_folder(make_box):
    box = make_box()
    targets = ["/course/lib/servelab/evil.py", "/course/autograder/servelab_autograder/exercises/ch01.py",
               os.path.join(sys.prefix, "evil.pth"), sys.executable, "/usr/evil", "/etc/passwd", "/evil",
               "/scratch/work/mine.txt", "/tmp/mine.txt", "/dev/shm/mine.txt", "/scratch/home/mine.txt"]
    got = inside(box, f"""
        import json
        ok = []
        for path in {targets!r}:
            try:
                with open(path, "a") as fh:
                    fh.write("x")
                ok.append(path)
            except OSError:
                pass
        print(json.dumps({{"written": ok}}))
    """)
    assert got["written"] == ["/scratch/work/mine.txt", "/tmp/mine.txt", "/dev/shm/mine.txt", "/scratch/home/mine.txt"]
    assert (box.scratch / "tmp" / "mine.txt").read_text() == "x"  # /tmp is inside the scratch folder


def test_its_environment_holds_nothing_of_the_graders(make_box, monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setenv("SERVELAB_GRADE_PLAN", "/secret/plan.json")
    box = make_box()
    got = inside(box, "import json, os; print(json.dumps(dict(os.environ)))")
    assert got.pop("PWD") == "/scratch/work"  # bwrap's --chdir sets it
    assert set(got) == set(box.env()), set(got) ^ set(box.env())
    assert got["HOME"].startswith("/scratch") and got["OMP_NUM_THREADS"] == "1"


def test_it_has_no_network(make_box):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        got = inside(make_box(), f"""
            import json, socket
            reached = []
            for host, port in [("127.0.0.1", {port}), ("1.1.1.1", 53), ("8.8.8.8", 443)]:
                try:
                    socket.create_connection((host, port), timeout=2).close()
                    reached.append(f"{{host}}:{{port}}")
                except OSError:
                    pass
            print(json.dumps({{"reached": reached, "interfaces": [n for _, n in socket.if_nameindex()]}}))
        """)
    finally:
        listener.close()
    assert got == {"reached": [], "interfaces": ["lo"]}


def test_it_has_its_own_pid_namespace(make_box):
    got = inside(make_box(), f"""
        import json, os
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        try:
            os.kill({os.getpid()}, 0)
            signalled = True
        except OSError:
            signalled = False
        print(json.dumps({{"pids": pids, "me": os.getpid(), "signalled_grader": signalled}}))
    """)
    assert len(got["pids"]) <= 4 and max(got["pids"]) < 100, got  # bwrap's init, the wrapper, python
    assert not got["signalled_grader"] or os.getpid() in got["pids"]


def test_a_daemon_dies_with_its_sandbox(make_box):
    marker = f"servelab-test-daemon-{os.getpid()}-{time.monotonic_ns()}"
    got = inside(make_box(), f"""
        import json, os, subprocess, sys
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{marker}"],
                                 start_new_session=True)
            os._exit(0)
        os.wait()
        import time
        time.sleep(0.5)
        print(json.dumps({{"daemon_started": any("{marker}" in open(f"/proc/{{p}}/cmdline").read()
                                                 for p in os.listdir("/proc") if p.isdigit())}}))
    """)
    assert got["daemon_started"]
    deadline = time.monotonic() + 30
    while procs.with_argument(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert procs.with_argument(marker) == [], "a process started in the sandbox outlived it"


def test_the_address_space_limit_makes_a_big_allocation_fail(make_box):
    got = inside(make_box(), """
        import json
        try:
            hog = bytearray(6 * 2**30)
            result = "allocated"
        except MemoryError:
            result = "MemoryError"
        print(json.dumps({"result": result}))
    """)
    assert got["result"] == "MemoryError" and Limits().address_space == 4 * GiB


def test_the_process_limit_stops_a_fork_bomb(make_box):
    got = inside(make_box(processes=16), """
        import json, threading, time
        started, error = 0, None
        try:
            for _ in range(100):
                threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
                started += 1
        except RuntimeError as err:
            error = str(err)
        print(json.dumps({"started": started, "error": error}))
    """)
    assert got["error"] and got["started"] < 16, got


def test_the_file_size_limit_stops_one_big_file(make_box):
    got = inside(make_box(file_size=4 * MiB), """
        import json
        written = 0
        try:
            with open("big.bin", "wb") as fh:
                for _ in range(16):
                    fh.write(b"\\0" * 2**20)
                    written += 1
        except OSError as err:
            print(json.dumps({"mib": written, "error": err.strerror}))
    """)
    assert got == {"mib": 4, "error": "File too large"}


def test_the_scratch_folder_is_capped(make_box):
    box = make_box(scratch=16 * MiB, file_size=64 * MiB)
    if box.mode != "root":
        pytest.skip("in user mode the grader measures the scratch folder while the kernel runs")
    got = inside(box, """
        import json
        written = 0
        try:
            for i in range(8):
                with open(f"part{i}.bin", "wb") as fh:
                    for _ in range(4):
                        fh.write(b"\\0" * 2**20)
                        written += 1
        except OSError as err:
            print(json.dumps({"mib": written, "error": err.strerror}))
    """)
    assert got["error"] == "No space left on device" and got["mib"] <= 16, got


def test_the_open_files_limit_holds(make_box):
    got = inside(make_box(open_files=32), """
        import json
        files = []
        try:
            for i in range(100):
                files.append(open(f"f{i}", "w"))
        except OSError as err:
            print(json.dumps({"opened": len(files), "error": err.strerror}))
    """)
    assert got["error"] == "Too many open files" and got["opened"] < 32


def test_the_limits_inside_are_the_ones_asked_for(make_box):
    box = make_box(processes=20, open_files=100, address_space=2 * GiB)
    got = inside(box, """
        import json, resource
        names = ["RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CORE", "RLIMIT_CPU"]
        print(json.dumps({n: resource.getrlimit(getattr(resource, n))[0] for n in names}))
    """)
    assert got == box.rlimits()
    assert got["RLIMIT_NPROC"] == 20 and got["RLIMIT_AS"] == 2 * GiB


def test_two_sandboxes_at_once_never_share_a_user(make_box):
    a, b = make_box(), make_box()
    if a.mode != "root":
        pytest.skip("user mode: each sandbox has a user namespace of its own")
    assert a.slot.user.uid != b.slot.user.uid


def test_closing_removes_the_sandbox_and_its_mount(tmp_path):
    box = sandbox.Sandbox(tmp_path / "box").open()
    scratch = box.scratch
    assert scratch.is_dir()
    box.close()
    assert not box.dir.exists() and not os.path.ismount(scratch)


@pytest.mark.skipif(os.geteuid() != 0, reason="as an ordinary user the other tests run in user mode already")
def test_user_mode_as_an_unprivileged_user_enforces_the_process_limit(tmp_path):
    """What a learner's own machine gets (``make check`` without root): bwrap's user namespace, as them."""
    user = sandbox.users()[-1]
    base = Path(tempfile.mkdtemp(prefix="servelab-usermode-"))
    try:
        os.chmod(base, 0o755)
        box = sandbox.Sandbox(base / "box", Limits(processes=12), mode="user", python="/usr/bin/python3").open()
        for path in [box.dir, *box.dir.rglob("*")]:
            os.lchown(path, user.uid, user.gid)
        code = textwrap.dedent("""
            import json, os, threading, time
            started = 0
            try:
                for _ in range(50):
                    threading.Thread(target=time.sleep, args=(3,), daemon=True).start()
                    started += 1
            except RuntimeError:
                pass
            print(json.dumps({"uid": os.getuid(), "started": started}))
        """)
        cmd = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--",
               *box.command([box.python, "-c", code])]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout.strip().splitlines()[-1])
        assert got["started"] < 12, got
        assert got["uid"] == user.uid, got  # bwrap maps the user onto itself inside its namespace
    finally:
        subprocess.run(["umount", "--lazy", str(base / "box" / "scratch")], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_check_says_what_is_missing_and_how_to_fix_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    sandbox._check.cache_clear()
    try:
        with pytest.raises(sandbox.SandboxUnavailable, match="bubblewrap is not installed: install bubblewrap"):
            sandbox.check()
    finally:
        monkeypatch.undo()
        sandbox._check.cache_clear()


def test_the_grader_refuses_to_grade_without_a_sandbox(tmp_path):
    subs = tmp_path / "subs" / "someone" / "ch01_continuous_batching"
    subs.mkdir(parents=True)
    (subs / "ch01_continuous_batching.ipynb").write_text("{}")
    bindir = tmp_path / "bin"  # a PATH with Python but without bwrap
    bindir.mkdir()
    (bindir / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": str(bindir)}
    done = subprocess.run([sys.executable, "-m", "servelab_autograder.runner.grade", str(tmp_path / "subs"), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to grade without a sandbox: bubblewrap is not installed" in lines[0], lines
    assert "--unsafe-no-sandbox" in lines[0] and "apt-get install bubblewrap" in lines[0]
    assert not (tmp_path / "out" / "grades.csv").exists()
