"""One locked-down sandbox per submission, made with bubblewrap (``bwrap``, what Flatpak uses).

    python -m servelab_autograder.runner.sandbox            # can this machine grade safely? one line of why not
    python -m servelab_autograder.runner.sandbox --setup    # as root: create the sandbox users (make sandbox-deps)

Only the learner's kernel lives inside. What it sees:

- read-only: ``/usr``, ``/bin``, ``/lib*`` and a few files of ``/etc`` (the system's programs and libraries);
  the interpreter and the course environment at their own paths (Python, numpy, torch, triton, ipykernel);
  under ``/course`` what the notebooks import and read: ``lib/servelab``, the :data:`KERNEL_SIDE` modules of
  ``autograder/servelab_autograder`` and ``bench/kernels_results.md``;
- read-write, size-capped: ``/scratch``, the submission's working copy (``work/`` is the current folder;
  ``home/``; ``tmp/`` is also ``/tmp`` and ``shm/`` is ``/dev/shm``).

No view of ``solutions/``, the gradebook, ``autograder/`` runtime folders, other submissions or the rest of
the grader; no network (a network namespace with only a loopback); its own PID namespace (every process it
starts dies with it, however it detaches), IPC and UTS namespaces; a clean environment. The kernel talks to
the grader over Unix sockets in ``/scratch/ipc`` (Jupyter's ``ipc`` transport; TCP cannot cross a network
namespace).

Two modes, chosen by who runs the grader:

- **root**: bwrap builds the namespaces with root's rights (so it can bind an interpreter that lives in
  root's home, mode 700), then ``setpriv`` drops to one of the dedicated system users
  ``servelab-sandbox-1..N`` with no capabilities and ``no_new_privs``. Each running sandbox holds one of those
  users through a lock, so the process limit (counted per user by Linux) is that sandbox's alone, and no
  sandbox can signal another. The scratch folder is a tmpfs of the capped size, mounted for the sandbox.
- **user**: bwrap makes a user namespace (the machine must allow unprivileged ones); the sandbox runs as
  the grader's own user outside, the process limit counts inside that namespace, and the scratch folder
  is a plain folder whose size the grader checks while the kernel runs.

Inside, :mod:`servelab_autograder.runner.sandbox_init` sets the resource limits and starts the kernel in a session
of its own (ipykernel must not be PID 1's child, and its interrupts must reach only itself).
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import functools
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from servelab_autograder import paths
from servelab_autograder.runner.limits import Limits

USER_PREFIX = "servelab-sandbox-"
DEFAULT_USERS = 8
LOCK_DIR = Path("/run/lock/servelab-sandbox")
SCRATCH = "/scratch"
COURSE = "/course"
# The part of servelab_autograder the kernel may see: what the notebooks import (the chapters' learner-facing
# modules; the hidden test cells of chapters not yet graded from a table call their check helpers), the probe
# that answers the grader, and the plain-data format. The grading tables, the known-wrong patches and the rest
# of the grader stay outside.
KERNEL_SIDE = ("__init__.py", "exercises",
               # the old paths of the exercise modules, for notebooks released before they moved
               "_moved.py", *(f"{m}.py" for m in ("ch[0-9][0-9]", "common", "plain", "probe", "spec")))
# Files of the course the notebooks read (chapter 06 shows the GPU bench's results).
COURSE_FILES = ("bench/kernels_results.md",)
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "fonts", "localtime", "nsswitch.conf", "host.conf",
             "mime.types")
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")
FIX = {
    "bwrap": "install bubblewrap (`sudo apt-get install bubblewrap`, or `make sandbox-deps`)",
    "setpriv": "install util-linux's setpriv (`sudo apt-get install util-linux`)",
    "users": "create the sandbox users as root (`make sandbox-deps`)",
}


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot be made on this machine; the message says why and how to fix it."""


def mode() -> str:
    return "root" if os.geteuid() == 0 else "user"


# ------------------------------------------------------------------------------------------------
# the sandbox users (root mode)


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int


def users() -> list[User]:
    """The dedicated sandbox users that exist, in slot order."""
    found = []
    for i in range(1, 1000):
        try:
            entry = pwd.getpwnam(f"{USER_PREFIX}{i}")
        except KeyError:
            break
        if entry.pw_uid == 0 or entry.pw_gid == 0:
            raise SandboxUnavailable(f"{entry.pw_name} has uid or gid 0: a sandbox user must be unprivileged")
        found.append(User(entry.pw_name, entry.pw_uid, entry.pw_gid))
    return found


def setup_users(count: int = DEFAULT_USERS) -> list[str]:
    """Create the missing system users servelab-sandbox-1..count (root only); returns the names created."""
    if os.geteuid() != 0:
        raise SandboxUnavailable("only root can create the sandbox users")
    made = []
    for i in range(1, count + 1):
        name = f"{USER_PREFIX}{i}"
        try:
            pwd.getpwnam(name)
            continue
        except KeyError:
            pass
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                        "--shell", "/usr/sbin/nologin", "--comment", "servelab grading sandbox", name],
                       check=True, capture_output=True, text=True)
        made.append(name)
    return made


class Slot:
    """One sandbox user held for the life of one sandbox (an exclusive lock on its file)."""

    def __init__(self, user: User, fd: int):
        self.user, self.fd = user, fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def acquire_slot(wait_s: float = 600.0) -> Slot:
    """Lock a free sandbox user; waits while every one is busy (other gradings on this machine)."""
    pool = users()
    if not pool:
        raise SandboxUnavailable(f"no sandbox users ({USER_PREFIX}1...): {FIX['users']}")
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    os.chmod(LOCK_DIR, 0o700)
    deadline = time.monotonic() + wait_s
    while True:
        for user in pool:
            fd = os.open(LOCK_DIR / f"{user.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            # Nothing may still run as this user: a sandbox of a grader that was killed outright.
            kill_user(user.uid)
            return Slot(user, fd)
        if time.monotonic() > deadline:
            raise SandboxUnavailable(f"all {len(pool)} sandbox users stayed busy for {wait_s:g} s: "
                                     f"grade fewer at a time, or `make sandbox-deps SANDBOX_USERS=N`")
        time.sleep(0.1)


def kill_user(uid: int) -> int:
    """SIGKILL every process whose owner is ``uid``; returns how many there were."""
    victims = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    victims.append(int(entry))
            except OSError:
                pass
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(victims)


# ------------------------------------------------------------------------------------------------
# what the sandbox shows


def course_root() -> Path:
    """The course whose library and check helpers the sandbox shows: this package's checkout, or $SERVELAB_ROOT when
    it holds them (a course hub's public copy, hub/install.sh, where the package is installed, not checked out)."""
    root = paths.repo_root()
    if (root / "lib" / "servelab").is_dir() and (root / "autograder" / "servelab_autograder").is_dir():
        return root
    return Path(__file__).resolve().parents[3]


def kernel_side_files(root: Path) -> list[Path]:
    pkg = root / "autograder" / "servelab_autograder"
    return sorted({p for pattern in KERNEL_SIDE for p in pkg.glob(pattern)})


def _ancestors(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def python_dirs(python: str) -> list[str]:
    """The folders an interpreter needs besides /usr: its environment and the Python it was made from."""
    prefixes = [os.path.dirname(os.path.dirname(os.path.realpath(python)))]
    if python == sys.executable:
        prefixes += [sys.base_prefix, sys.prefix]
    dirs = {os.path.realpath(p) for p in prefixes}
    return sorted((d for d in dirs if d != "/usr" and not d.startswith("/usr/")), key=lambda d: (d.count("/"), d))


@dataclass
class Sandbox:
    """A sandbox for one submission, rooted at the host folder ``dir`` (short: socket paths have a limit).

    ``open()`` makes it (takes a user, mounts the scratch tmpfs, copies the working files), ``command()``
    wraps a command to run inside, ``close()`` kills what is left and removes everything."""

    dir: Path
    limits: Limits = field(default_factory=Limits)
    root: Path = field(default_factory=course_root)
    mode: str = field(default_factory=mode)
    python: str = sys.executable
    library: Path | None = None          # a build of servelab to show instead of the checkout's (build_library)
    slot: Slot | None = None
    extra_env: dict = field(default_factory=dict)   # what the grader tells the kernel (whose drill numbers)

    # --- host paths ---
    @property
    def scratch(self) -> Path:
        return self.dir / "scratch"

    def host(self, inside: str) -> Path:
        """The host path of a path under /scratch."""
        assert inside == SCRATCH or inside.startswith(SCRATCH + "/"), inside
        return self.scratch / inside[len(SCRATCH) + 1:]

    # --- life cycle ---
    def open(self, work_from: Path | None = None, font_cache: Path | None = None) -> Sandbox:
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o711)
        try:
            if self.mode == "root":
                self.slot = acquire_slot()
            self.scratch.mkdir(exist_ok=True)
            if self.mode == "root":
                u = self.slot.user
                subprocess.run(["mount", "-t", "tmpfs", "-o",
                                f"size={self.limits.scratch},mode=0700,uid={u.uid},gid={u.gid},nosuid,nodev",
                                "servelab-scratch", str(self.scratch)], check=True, capture_output=True, text=True)
            for sub in ("work", "home", "tmp", "shm", "ipc", "home/.config/matplotlib"):
                (self.scratch / sub).mkdir(parents=True, exist_ok=True)
            if work_from is not None:
                size = sum(p.stat().st_size for p in Path(work_from).rglob("*") if p.is_file() and not p.is_symlink())
                if size > self.limits.scratch // 2:
                    raise ValueError(f"the submission's files take {size / 2**20:.0f} MiB, over half of the "
                                     f"{self.limits.scratch / 2**20:.0f} MiB scratch folder")
                shutil.copytree(work_from, self.scratch / "work", symlinks=True, dirs_exist_ok=True)
            if font_cache is not None and font_cache.is_file():
                shutil.copy(font_cache, self.scratch / "home/.config/matplotlib" / font_cache.name)
            self._write_etc()
            if self.mode == "root":
                u = self.slot.user
                for path in [self.scratch, *self.scratch.rglob("*")]:
                    os.lchown(path, u.uid, u.gid)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Kill whatever still runs in the sandbox, unmount and remove it, give its user back."""
        if self.slot is not None:
            kill_user(self.slot.user.uid)
        sweep(self.dir)
        if self.slot is not None:
            self.slot.release()
            self.slot = None

    # --- inside ---
    def _write_etc(self) -> None:
        etc = self.dir / "etc"
        etc.mkdir(exist_ok=True)
        uid, gid = (self.slot.user.uid, self.slot.user.gid) if self.slot else (os.getuid(), os.getgid())
        (etc / "passwd").write_text(f"root:x:0:0::/nonexistent:/usr/sbin/nologin\n"
                                    f"learner:x:{uid}:{gid}::{SCRATCH}/home:/usr/sbin/nologin\n"
                                    f"nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n")
        (etc / "group").write_text(f"root:x:0:\nlearner:x:{gid}:\nnogroup:x:65534:\n")

    def env(self) -> dict[str, str]:
        """The whole environment inside: nothing of the grader's."""
        env = {
            "PATH": f"{os.path.dirname(self.python)}:/usr/local/bin:/usr/bin:/bin",
            "HOME": f"{SCRATCH}/home",
            "TMPDIR": "/tmp",
            "USER": "learner",
            "LOGNAME": "learner",
            "LANG": "C.UTF-8",
            "PYTHONPATH": f"{COURSE}/lib:{COURSE}/autograder",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "MPLCONFIGDIR": f"{SCRATCH}/home/.config/matplotlib",
            "TRITON_CACHE_DIR": f"{SCRATCH}/home/.triton",
        }
        # One thread per library pool: threads count against the process limit, and CPU time is the budget.
        env.update({var: "1" for var in THREAD_VARS})
        env.update(self.extra_env)
        return env

    def rlimits(self) -> dict[str, int]:
        lim = self.limits
        # RLIMIT_CPU is per process and kills outright: only a backstop past the notebook's own CPU limit,
        # which the grader measures for the whole tree.
        return {"RLIMIT_AS": lim.address_space, "RLIMIT_NPROC": lim.processes, "RLIMIT_FSIZE": lim.file_size,
                "RLIMIT_NOFILE": lim.open_files, "RLIMIT_CORE": 0,
                "RLIMIT_CPU": int(lim.notebook_cpu_s * 2 + 60)}

    def binds(self) -> list[str]:
        args: list[str] = []
        made: set[str] = set()

        def parents(dest: str) -> None:
            # bwrap creates missing parents with mode 0700, which the sandbox user could not cross
            for d in _ancestors(dest):
                if d not in made:
                    made.add(d)
                    args.extend(["--perms", "0755", "--dir", d])

        def ro(src: Path | str, dest: str) -> None:
            parents(dest)
            args.extend(["--ro-bind", str(src), dest])

        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            path = Path("/" + name)
            if path.is_symlink():
                args.extend(["--symlink", os.readlink(path), f"/{name}"])
            elif path.is_dir():
                ro(path, f"/{name}")
        ro("/usr", "/usr")
        for name in ETC_FILES:
            if os.path.exists(f"/etc/{name}"):
                ro(f"/etc/{name}", f"/etc/{name}")
        ro(self.dir / "etc/passwd", "/etc/passwd")
        ro(self.dir / "etc/group", "/etc/group")
        # The writable places before the interpreter and the course: an environment that lives under /tmp
        # (a checkout in /tmp) must be bound over the sandbox's /tmp, not hidden by it.
        args.extend(["--proc", "/proc", "--dev", "/dev"])
        parents(SCRATCH)
        args.extend(["--bind", str(self.scratch), SCRATCH, "--bind", str(self.scratch / "tmp"), "/tmp",
                     "--bind", str(self.scratch / "shm"), "/dev/shm"])
        made.update({"/proc", "/dev", "/dev/shm", "/tmp", SCRATCH})
        for d in python_dirs(self.python):
            ro(d, d)
        ro(self.library or self.root / "lib" / "servelab", f"{COURSE}/lib/servelab")
        for path in kernel_side_files(self.root):
            ro(path, f"{COURSE}/autograder/servelab_autograder/{path.name}")
        for rel in COURSE_FILES:
            if (self.root / rel).is_file():
                ro(self.root / rel, f"{COURSE}/{rel}")
        ro(Path(__file__).with_name("sandbox_init.py"), f"{COURSE}/sandbox_init.py")
        return args

    def command(self, argv: list[str], cwd: str = f"{SCRATCH}/work") -> list[str]:
        """``argv`` wrapped to run inside this (opened) sandbox."""
        cmd = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
               "--die-with-parent", "--new-session", "--hostname", "sandbox", "--clearenv"]
        if self.mode == "user":
            cmd += ["--unshare-user", "--disable-userns"]
        cmd += self.binds()
        for key, value in self.env().items():
            cmd += ["--setenv", key, value]
        cmd += ["--chdir", cwd]
        if self.mode == "root":
            u = self.slot.user
            cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
                    "setpriv", f"--reuid={u.uid}", f"--regid={u.gid}", "--clear-groups", "--inh-caps=-all",
                    "--bounding-set=-all", "--no-new-privs"]
        cmd += ["--", self.python, "-I", "-S", f"{COURSE}/sandbox_init.py", json.dumps(self.rlimits()), "--", *argv]
        return cmd

    def scratch_used(self) -> int:
        """Bytes in the scratch folder (what user mode checks against the cap while the kernel runs)."""
        total = 0
        for dirpath, _, files in os.walk(self.scratch):
            for name in files:
                try:
                    total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
                except OSError:
                    pass
        return total

    def run(self, argv: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        """Run ``argv`` inside to completion (for checks and tests)."""
        return subprocess.run(self.command(argv), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, **kw)


UNAVAILABLE = '''

# --- added by the grader: the references of the chapter being graded are not available while it grades ---
def _servelab_unavailable(name):
    def unavailable(*args, **kwargs):
        raise RuntimeError(f"{name} is not available while grading: the grader compares your code with it")
    unavailable.__name__ = unavailable.__qualname__ = name.rsplit(".", 1)[-1]
    return unavailable
'''


def _without_bodies(text: str, names: list[str], module: str) -> str:
    """``text`` with each named function's (or ``Class.method``'s) definition replaced by one that raises, so
    the reference's code is not in the copy to be read and run either; raises ValueError for a name that is
    not a ``def`` there."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    spans = []
    for name in names:
        scope, node = tree.body, None
        for part in name.split("."):
            node = next((n for n in scope if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                         and n.name == part), None)
            if node is None:
                raise ValueError(f"reference {module}:{name}: no such definition in {module}")
            scope = getattr(node, "body", [])
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            raise ValueError(f"reference {module}:{name} is not a function")
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        indent = " " * node.col_offset
        why = f"{module}.{name} is not available while grading: the grader compares your code with it"
        stub = f"{indent}def {node.name}(*args, **kwargs):\n{indent}    raise RuntimeError({why!r})\n"
        spans.append((first, node.end_lineno, stub))
    for first, last, stub in sorted(spans, reverse=True):
        lines[first - 1:last] = [stub]
    return "".join(lines)


def build_library(root: Path, dest: Path, references: tuple[str, ...] | list[str]) -> Path:
    """A copy of the checkout's ``servelab`` under ``dest`` in which each reference ``"module:name"`` (or
    ``"module:Class.method"``) raises "not available while grading", by any route: its definition is
    replaced in the source (nothing to read and run) and its name rebound (nothing to reach through an alias);
    the copy is what the sandbox shows, so a learner's code can only call its own. Returns the package folder."""
    lib = Path(dest) / "servelab"
    shutil.copytree(Path(root) / "lib" / "servelab", lib, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    by_module: dict[str, list[str]] = {}
    for ref in references:
        module, _, name = ref.partition(":")
        if not module.startswith("servelab") or not name:
            raise ValueError(f"reference {ref!r}: expected 'servelab.module:name'")
        by_module.setdefault(module, []).append(name)
    for module, names in by_module.items():
        parts = module.split(".")[1:]
        path = lib.joinpath(*parts).with_suffix(".py")
        if not path.is_file():
            path = lib.joinpath(*parts, "__init__.py")
        text = _without_bodies(path.read_text(encoding="utf-8"), names, module) + UNAVAILABLE
        for name in names:
            text += f"{name} = _servelab_unavailable({module + '.' + name!r})\n"
        path.write_text(text, encoding="utf-8")
    for path in [Path(dest), *Path(dest).rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return lib


def sweep(box_dir: Path | None) -> None:
    """Remove what a sandbox left behind when its owner was killed before it could close it (the tmpfs
    mount, the folder). Its processes died with their owner (``--die-with-parent``, and the PID namespace
    goes with its first process); a user slot's leftovers are killed when the slot is next taken."""
    if box_dir is None:
        return
    scratch = Path(box_dir) / "scratch"
    if scratch.is_dir() and os.path.ismount(scratch):
        subprocess.run(["umount", "--lazy", str(scratch)], capture_output=True)
    shutil.rmtree(box_dir, ignore_errors=True)


# ------------------------------------------------------------------------------------------------
# can this machine make one?


@functools.lru_cache(maxsize=1)
def _check() -> str | None:
    if shutil.which("bwrap") is None:
        return f"bubblewrap is not installed: {FIX['bwrap']}"
    if mode() == "root":
        if shutil.which("setpriv") is None:
            return f"setpriv is missing: {FIX['setpriv']}"
        if not users():
            return f"there are no sandbox users ({USER_PREFIX}1...): {FIX['users']}"
    with tempfile.TemporaryDirectory(prefix="servelab-sbx-check-") as tmp:
        box = Sandbox(Path(tmp) / "box")
        try:
            box.open()
            done = box.run([box.python, "-I", "-S", "-c", "import os; print(os.getuid())"], timeout=60)
        except SandboxUnavailable as err:
            return str(err)
        except (OSError, subprocess.SubprocessError) as err:
            return f"cannot set up a sandbox here: {err}"
        finally:
            box.close()
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr or "").splitlines() if ln.strip()] or [f"exit status {done.returncode}"]
        why = lines[-1].strip()
        if "namespace" in why.lower() or "permission" in why.lower():
            why += " (this machine does not let bwrap make namespaces: allow unprivileged user namespaces, " \
                   "or grade as root)"
        return f"bwrap cannot make a sandbox here: {why}"
    if mode() == "root" and done.stdout.strip() == "0":
        return "the sandbox ran as root: setpriv did not drop to the sandbox user"
    return None


def check() -> None:
    """Raise SandboxUnavailable (one line: why, and how to fix it) unless sandboxes work here."""
    why = _check()
    if why:
        raise SandboxUnavailable(why)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servelab_autograder.runner.sandbox", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setup", action="store_true", help="as root: create the sandbox users")
    parser.add_argument("--users", type=int, default=DEFAULT_USERS, metavar="N",
                        help=f"how many sandbox users --setup makes (default {DEFAULT_USERS}: that many gradings "
                             f"at once on this machine)")
    args = parser.parse_args(argv)
    if args.setup:
        if os.geteuid() != 0:
            print("not root: the sandbox will use a user namespace as you (no users to create)")
        else:
            made = setup_users(args.users)
            print(f"sandbox users: created {', '.join(made)}" if made else f"sandbox users: {len(users())} present")
        _check.cache_clear()
    try:
        check()
    except SandboxUnavailable as err:
        print(f"no grading sandbox: {err}")
        return 1
    detail = f"{len(users())} sandbox users" if mode() == "root" else "a user namespace as you"
    print(f"grading sandbox ready ({mode()} mode, {detail})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
