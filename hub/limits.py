"""Per-learner memory, CPU and process limits for the hub's local process spawner, enforced by the Linux kernel.

JupyterHub's own traits `Spawner.mem_limit` and `Spawner.cpu_limit` are only passed on as MEM_LIMIT / CPU_LIMIT by
the local process spawner; `LimitedSpawner` enforces them. Before a learner's server starts it makes the cgroups
servelab/<user> (cgroup v1: the memory, cpu and pids hierarchies under /sys/fs/cgroup; v2: one group with
memory.max, cpu.max and pids.max) and the server joins them between fork and exec, while still root: the server and
every kernel and terminal it starts share the learner's limits, and the kernel's OOM killer picks within that
learner's group only. Swap counts against the memory limit where the kernel accounts it (memory.memsw). Where no
cgroup hierarchy is writable, each process gets RLIMIT_AS instead, and the hub's log says so.

Where systemd runs as PID 1, jupyterhub-systemdspawner does the same with a transient unit per server
(`c.JupyterHub.spawner_class = "systemdspawner"`, `c.SystemdSpawner.mem_limit = "4G"`,
`c.SystemdSpawner.cpu_limit = 1.0`, `c.SystemdSpawner.isolate_tmp = True`); on Kubernetes, KubeSpawner's
`mem_limit` / `cpu_limit` become the pod's resource limits.
"""

from __future__ import annotations

import errno
import os
import resource
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Integer

ROOT = Path(os.environ.get("SERVELAB_CGROUP_ROOT", "/sys/fs/cgroup"))
GROUP = "servelab"
PERIOD_US = 100_000


def _write(path: Path, value) -> None:
    path.write_text(f"{value}\n")


def _v1(controller: str) -> Path | None:
    base = ROOT / controller
    return base if (base / "cgroup.procs").is_file() and os.access(base, os.W_OK) else None


def groups(user: str) -> list[Path]:
    """The learner's cgroup folders (made if missing), or [] where no hierarchy is writable."""
    if (ROOT / "cgroup.controllers").is_file() and os.access(ROOT, os.W_OK):       # cgroup v2, one tree
        parent = ROOT / GROUP
        parent.mkdir(exist_ok=True)
        for folder in (ROOT, parent):
            try:
                _write(folder / "cgroup.subtree_control", "+memory +cpu +pids")
            except OSError:
                pass
        (parent / user).mkdir(exist_ok=True)
        return [parent / user]
    out = []
    for controller in ("memory", "cpu", "pids"):
        base = _v1(controller)
        if base is not None:
            (base / GROUP / user).mkdir(parents=True, exist_ok=True)
            out.append(base / GROUP / user)
    return out


def apply(folders: list[Path], mem_bytes: int | None, cpus: float | None, pids: int | None) -> None:
    """Write the limits into the learner's groups (None: unlimited)."""
    for folder in folders:
        if (folder / "memory.max").is_file():                                        # v2
            _write(folder / "memory.max", mem_bytes or "max")
            if (folder / "memory.swap.max").is_file():
                _write(folder / "memory.swap.max", 0 if mem_bytes else "max")
            _write(folder / "cpu.max", f"{int(cpus * PERIOD_US)} {PERIOD_US}" if cpus else f"max {PERIOD_US}")
            _write(folder / "pids.max", pids or "max")
        elif (folder / "memory.limit_in_bytes").is_file():                           # v1 memory
            mem, memsw = folder / "memory.limit_in_bytes", folder / "memory.memsw.limit_in_bytes"
            paths = [mem, memsw] if memsw.is_file() else [mem]
            try:        # memsw (memory + swap) may never be below the memory limit: lowering, memory goes first
                for path in paths:
                    _write(path, mem_bytes or -1)
            except OSError:   # raising: memsw first
                for path in reversed(paths):
                    _write(path, mem_bytes or -1)
        elif (folder / "cpu.cfs_quota_us").is_file():                                # v1 cpu
            _write(folder / "cpu.cfs_period_us", PERIOD_US)
            _write(folder / "cpu.cfs_quota_us", int(cpus * PERIOD_US) if cpus else -1)
        elif (folder / "pids.max").is_file():                                        # v1 pids
            _write(folder / "pids.max", pids or "max")


def release(user: str) -> None:
    """Remove the learner's groups once their server has stopped (a group still holding a process stays)."""
    folders = [ROOT / GROUP / user] + [ROOT / c / GROUP / user for c in ("memory", "cpu", "pids")]
    for folder in folders:
        try:
            folder.rmdir()
        except OSError as err:
            if err.errno not in (errno.ENOENT, errno.EBUSY, errno.ENOTEMPTY, errno.EACCES, errno.EROFS):
                raise


class LimitedSpawner(LocalProcessSpawner):
    """The local process spawner with `mem_limit`, `cpu_limit` and `pids_limit` enforced per learner."""

    pids_limit = Integer(512, config=True, help="most processes and threads a learner's server may hold at once")

    def make_preexec_fn(self, name):
        setuid = super().make_preexec_fn(name)
        folders = groups(name)
        apply(folders, self.mem_limit, self.cpu_limit, self.pids_limit)
        mem = self.mem_limit
        if not folders and mem:
            self.log.warning("no writable cgroup hierarchy under %s: %s's processes get RLIMIT_AS %s each instead",
                             ROOT, name, mem)

        def preexec():
            pid = str(os.getpid())
            for folder in folders:        # still root here: join the learner's groups, then become the learner
                (folder / "cgroup.procs").write_text(pid)
            if not folders and mem:
                resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            setuid()

        return preexec

    async def stop(self, now=False):
        await super().stop(now=now)
        release(self.user.name)
