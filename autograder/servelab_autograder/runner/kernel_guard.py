"""The executor nbgrader runs while grading (wired in by autograder/nbgrader_config.py), on the trusted side.

``servelab_autograder.runner.grade`` hands each nbgrader run a *plan* (a JSON file named by $SERVELAB_GRADE_PLAN):

    {"progress": FILE, "skip": {INDEX: MESSAGE}, "scale": {INDEX: FACTOR}, "limits": {...},
     "sandbox": true, "box_dir": DIR, "font_cache": FILE or null, "library": DIR (optional),
     "verdicts": {"assignment": NAME, "seed": N, "learner": ID, "course": ID} (optional)}

With a plan, :class:`GuardedExecute` is nbgrader's ``Execute`` that also

- starts the kernel inside a :class:`~servelab_autograder.runner.sandbox.Sandbox` (``"sandbox": true``), through
  :class:`SandboxKernelManager`: Jupyter's ``ipc`` transport, interrupts sent as messages (a signal would
  reach bwrap, not the kernel);
- watches every code cell from outside, on the sandbox's process tree: past the cell's CPU limit it
  interrupts the kernel, past the wall-clock backstop too; a kernel that ignores the interrupt is killed
  (the grader re-grades without that cell); past the notebook's CPU limit or the memory limit the kernel
  is killed;
- caps the output it keeps, in bytes per cell and per notebook, without ever dropping what decides a
  score (an error, something on stderr);
- appends one JSON line per event to the progress file, so the grader knows which cell a dead or stuck
  kernel was running, and which cell called ``exit()``;
- for a chapter graded from a table (``"verdicts"``), answers each graded test cell with a probe and a
  verdict made here (:mod:`servelab_autograder.judge.verdicts`; drawn drills on ``learner``'s numbers, which the
  kernel is also told, to print them), and does not run the cells that only show the reference;
- does not run the cells listed in ``skip``, giving them a ``CellTimeoutError`` output (0 points for a
  graded cell, as a timeout), and runs the cells in ``scale`` with their time limits multiplied.

Without a plan it is nbgrader's ``Execute``, unchanged.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import nbformat
from jupyter_client import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbgrader.preprocessors import Execute

from servelab_autograder import paths
from servelab_autograder.runner import nbgrader_process, procs, sandbox
from servelab_autograder.runner.limits import Limits

ENV_PLAN = "SERVELAB_GRADE_PLAN"
TIMEOUT_ENAME = "CellTimeoutError"
TICK_S = 0.1             # how often a running cell is measured
GRACE_CPU_S = 2.0        # after an interrupt: CPU the kernel may still burn before it is killed
GRACE_WALL_S = 10.0      # ... or wall-clock time
KERNEL_LOG_BYTES = 64 * 1024   # of the kernel's own stderr (not its cells' output), kept for the grader's log
ZMQ_GC_START = '__import__("zmq.utils.garbage").utils.garbage.gc.start()'
DEMO_NOTE = ("(not run while grading: this cell shows the reference, which the grading sandbox does not have; "
             "it runs as usual in your own notebook)\n")
DEMO_SHOWN = ("(as released, not run while grading: this cell shows the reference, which the grading sandbox does "
              "not have)\n")
TRUNCATED = "[output truncated at {} bytes: the grader keeps at most {} per cell and {} per notebook]"


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _error(ename: str, evalue: str):
    """An error output, as a failing cell would have: nbgrader scores a graded cell holding one 0."""
    lines = evalue.splitlines() or [""]
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue,
                                  traceback=[f"{ename}: {lines[0]}", *lines[1:]])


def learner_env(plan: dict) -> dict[str, str]:
    """What the kernel is told of whose drill numbers to print (exercises.variants): the plan's learner and course.
    Only the display: the verdicts use the plan's learner on this side."""
    v = plan.get("verdicts") or {}
    return {k: str(v[key]) for k, key in (("SERVELAB_LEARNER", "learner"), ("SERVELAB_COURSE_ID", "course"))
            if v.get(key)}


def load_plan() -> dict | None:
    path = os.environ.get(ENV_PLAN)
    if not path:
        return None
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def record(plan: dict | None, event: dict) -> None:
    """Append one event to the plan's progress file (written at once: the process may be killed next)."""
    if not plan or not plan.get("progress"):
        return
    try:
        with open(plan["progress"], "a", encoding="utf-8") as fh:
            fh.write(json.dumps(event) + "\n")
    except OSError:
        pass


# ------------------------------------------------------------------------------------------------
# the kernel, inside the sandbox


class SandboxKernelManager(AsyncKernelManager):
    """Starts the kernel inside a fresh sandbox (one per kernel) and removes it with the kernel."""

    box: sandbox.Sandbox | None = None
    _stderr_head: bytes = b""

    @property
    def kernel_spec(self):
        spec = AsyncKernelManager.kernel_spec.fget(self)
        if spec is not None:
            spec.interrupt_mode = "message"  # SIGINT would go to bwrap (and kill it), not to the kernel
        return spec

    async def _async_pre_start_kernel(self, **kw):
        plan = load_plan() or {}
        limits = Limits(**plan.get("limits", {}))
        cwd = kw.get("cwd")
        font = plan.get("font_cache")
        box_dir = Path(plan.get("box_dir") or tempfile.mkdtemp(prefix="servelab-box-"))
        library = plan.get("library")
        self.box = sandbox.Sandbox(box_dir, limits, library=Path(library) if library else None,
                                   extra_env=learner_env(plan))
        self.box.open(work_from=Path(cwd) if cwd else None, font_cache=Path(font) if font else None)
        self.transport = "ipc"
        self.cache_ports = False
        self.ip = str(self.box.host(f"{sandbox.SCRATCH}/ipc/k"))
        self.connection_file = str(self.box.dir / "connection.json")
        kw["cwd"] = str(self.box.dir)
        kw["env"] = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        kw["stdout"] = subprocess.DEVNULL
        kw["stderr"] = subprocess.PIPE
        return await super()._async_pre_start_kernel(**kw)

    pre_start_kernel = _async_pre_start_kernel

    def format_kernel_cmd(self, extra_arguments=None):
        """The kernel spec's command, with the connection file the kernel reads inside, run in the sandbox."""
        with open(self.connection_file, encoding="utf-8") as fh:
            info = json.load(fh)
        info["ip"] = f"{sandbox.SCRATCH}/ipc/k"
        inside = f"{sandbox.SCRATCH}/ipc/kernel.json"
        host = self.box.host(inside)
        host.write_text(json.dumps(info), encoding="utf-8")
        if self.box.slot is not None:
            os.chown(host, self.box.slot.user.uid, self.box.slot.user.gid)
        argv = [a.replace("{connection_file}", inside) for a in self.kernel_spec.argv]
        return self.box.command([*argv, *(extra_arguments or [])])

    async def _async_post_start_kernel(self, **kw):
        proc = getattr(self.provisioner, "process", None)
        if proc is not None and proc.stderr is not None:
            threading.Thread(target=self._drain, args=(proc.stderr,), daemon=True).start()
        await super()._async_post_start_kernel(**kw)

    post_start_kernel = _async_post_start_kernel

    def _drain(self, stream) -> None:
        """Keep the head of what the sandbox writes on its own stderr (bwrap's and ipykernel's messages)."""
        while chunk := stream.read1(65536):
            if len(self._stderr_head) < KERNEL_LOG_BYTES:
                self._stderr_head += chunk[: KERNEL_LOG_BYTES - len(self._stderr_head)]

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        try:
            await super()._async_cleanup_resources(restart=restart)
        finally:
            if self._stderr_head:
                self.log.info("sandbox stderr: %s", self._stderr_head.decode("utf-8", "replace")[-4000:])
            if self.box is not None:
                self.box.close()

    cleanup_resources = _async_cleanup_resources


# ------------------------------------------------------------------------------------------------
# watching cells


class Watch:
    """One code cell's run: its limits, what it used, and whether and why it was stopped."""

    def __init__(self, index: int, gid: str | None, limits: Limits, scale: float):
        self.index, self.gid = index, gid
        self.cpu_limit = limits.cell_cpu_s * scale
        self.wall_limit = limits.cell_wall_s * scale
        self.cpu = self.wall = 0.0
        self.stopped: str | None = None   # "cpu" or "wall"
        self.killed: str | None = None    # why the kernel was killed during this cell
        self.stop_cpu = self.stop_at = 0.0

    def message(self) -> str:
        if self.stopped == "cpu":
            return (f"this cell used more than {self.cpu_limit:g} s of CPU time, the per-cell limit, "
                    f"and was stopped")
        return (f"this cell ran past the {self.wall_limit:g} s wall-clock backstop while using only "
                f"{self.cpu:.1f} s of CPU (the limit is {self.cpu_limit:g} s), and was stopped")


def _size(obj) -> int:
    if isinstance(obj, str | bytes):
        return len(obj)
    if isinstance(obj, dict):
        return sum(_size(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(_size(v) for v in obj)
    return 8


def released_outputs(assignment: str, demos: set[str]) -> dict[str, list]:
    """grade_id -> the outputs the release keeps for each demo cell (its pictures and traces, made from the reference
    when the chapter was released): a feedback page shows them instead of an empty cell. Read on the grader's side
    from the release in the repository; {} where there is none."""

    path = paths.release_notebook(paths.repo_root(), assignment)
    try:
        nb = nbformat.read(path, as_version=4)
    except (OSError, ValueError):
        return {}
    return {gid: list(cell.outputs) for cell in nb.cells
            if cell.cell_type == "code" and (gid := _grade_id(cell)) in demos and cell.get("outputs")}


class GuardedExecute(Execute):
    __doc__ = __doc__

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.plan = load_plan()
        if self.plan is not None:
            self.limits = Limits(**self.plan.get("limits", {}))
            if self.plan.get("sandbox"):
                self.kernel_manager_class = SandboxKernelManager
            # pyzmq sends a large frame without copying through a helper thread it starts on first use; a
            # notebook that used up its process limit would then break the kernel's own messages. Start it
            # before any of the learner's code runs.
            self.extra_arguments = [*self.extra_arguments, f"--IPKernelApp.exec_lines={ZMQ_GC_START}"]
            scale = max([1.0, *map(float, self.plan.get("scale", {}).values())])
            # nbclient's own timeout only as a last resort behind the watch
            self.timeout = int(self.limits.cell_wall_s * scale + 60)
        self._cell_bytes: dict[int, int] = {}
        self._notebook_bytes = 0
        self._marked: set[tuple[int, str]] = set()
        self._probing = False
        self.chapter = self.pitfalls = None
        self.seed = 0
        self.learner = ""    # whose drill numbers: the student id the grader's plan names
        self.released: dict[str, list] = {}
        if self.plan is not None and self.plan.get("verdicts"):
            from servelab_autograder.judge import verdicts

            self.chapter = verdicts.table(self.plan["verdicts"]["assignment"])
            self.seed = int(self.plan["verdicts"]["seed"])
            self.learner = str(self.plan["verdicts"].get("learner") or "")
            self.pitfalls = verdicts.Pitfalls(self.chapter, paths.repo_root())
            self.released = released_outputs(self.chapter.assignment, set(self.chapter.demos))

    # --- one cell ---------------------------------------------------------------------------------
    def preprocess_cell(self, cell, resources, index):
        gid = _grade_id(cell)
        skipped = (self.plan or {}).get("skip", {}).get(str(index))
        if skipped is not None and cell.cell_type == "code":
            self._check_assign_resources(resources)
            cell.outputs = [_error(TIMEOUT_ENAME, skipped)]
            cell.execution_count = None
            record(self.plan, {"index": index, "grade_id": gid, "event": "skipped"})
            return cell, self.resources
        if self.chapter is not None and gid in self.chapter.demos:
            self._check_assign_resources(resources)
            shown = self.released.get(gid)
            note = nbformat.v4.new_output("stream", name="stdout", text=DEMO_SHOWN if shown else DEMO_NOTE)
            cell.outputs = [note, *copy.deepcopy(shown or [])]
            cell.execution_count = None
            record(self.plan, {"index": index, "grade_id": gid, "event": "demo"})
            return cell, self.resources
        if cell.cell_type == "code":
            record(self.plan, {"index": index, "grade_id": gid, "event": "start"})
        try:
            if self.chapter is not None and gid in self.chapter.cells:
                return self._verdict(cell, resources, index, gid)
            return super().preprocess_cell(cell, resources, index)
        except BaseException as err:
            record(self.plan, {"index": index, "grade_id": gid, "event": "error", "error": type(err).__name__,
                               "detail": str(err)[:500]})
            raise

    def _verdict(self, cell, resources, index, gid):
        """A graded test cell: its source is never run in the kernel. The kernel runs the learner's code on the
        table's cases (a probe) and hands back plain data; the verdict is made here, and written as the cell's
        output for nbgrader to score."""
        from servelab_autograder.exercises import probe
        from servelab_autograder.judge import verdicts

        req = verdicts.request(self.chapter, gid, self.seed)
        call = f"__import__({probe.__name__!r}, fromlist=['run']).run"
        probe_cell = nbformat.v4.new_code_cell(f"{call}({json.dumps(req)!r})")
        probe_cell.metadata = copy.deepcopy(cell.metadata)  # the same grade id in every event and message
        self._probing = True
        try:
            super().preprocess_cell(probe_cell, resources, index)
        finally:
            self._probing = False
            self.nb.cells[index] = cell
        cell.execution_count = probe_cell.execution_count
        stopped = [o for o in probe_cell.outputs if o.get("output_type") == "error" and o.get("ename") == TIMEOUT_ENAME]
        replies = [o["data"][probe.MIME] for o in probe_cell.outputs
                   if o.get("output_type") == "display_data" and probe.MIME in o.get("data", {})]
        if stopped:
            cell.outputs = stopped
            return cell, self.resources
        if len(replies) != 1:
            errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in probe_cell.outputs
                      if o.get("output_type") == "error"]
            why = f" (the kernel said {errors[0][:300]})" if errors else ""
            v = verdicts.Verdict(False, f"the grader got no answer from your kernel for this cell{why}; "
                                        f"it scores 0")
        else:
            try:
                reply = json.loads(replies[0])
            except (TypeError, ValueError):
                reply = {}
            v = verdicts.judge(self.chapter, gid, self.seed, reply if isinstance(reply, dict) else {}, self.pitfalls,
                               self.learner)
        if v.passed:
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"{v.message} (seed {self.seed})\n")]
        else:
            cell.outputs = [_error(v.ename, v.message)]
        record(self.plan, {"index": index, "grade_id": gid, "event": "verdict", "passed": v.passed})
        return cell, self.resources

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        if self.plan is None or cell.cell_type != "code" or not cell.source.strip():
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        gid = _grade_id(cell)
        watch = Watch(cell_index, gid, self.limits, float(self.plan.get("scale", {}).get(str(cell_index), 1)))
        task = asyncio.ensure_future(self._watch(watch))
        try:
            cell = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        except ValueError as err:
            if "Signature" not in str(err):
                raise
            # a message the kernel's session did not sign as a whole: the kernel is broken; end it
            self._kill()
            raise DeadKernelError(f"the kernel sent a broken message ({err})") from None
        except DeadKernelError:
            if watch.killed == "stuck":
                raise CellTimeoutError(f"{watch.message()}; the kernel ignored the interrupt and was "
                                       f"killed") from None
            raise
        finally:
            task.cancel()
        if not await self.km.is_alive():
            # the cell's reply came, but the kernel is gone (it killed its own sandbox on the way out):
            # the next cell would be blamed for it
            record(self.plan, {"index": cell_index, "grade_id": gid, "event": "died"})
        if watch.stopped:
            cell.outputs = [o for o in cell.outputs
                            if not (o.get("output_type") == "error" and o.get("ename") == "KeyboardInterrupt")]
            cell.outputs.append(_error(TIMEOUT_ENAME, watch.message()))
        return cell

    execute_cell = run_sync(async_execute_cell)

    def _kill(self) -> None:

        pid = getattr(self.km.provisioner, "pid", None) if self.km is not None else None
        if pid:
            nbgrader_process.kill_tree(pid)

    async def _watch(self, w: Watch) -> None:
        pid = getattr(self.km.provisioner, "pid", None)
        if not pid:
            return
        box = getattr(self.km, "box", None)
        start = procs.usage(pid).cpu_s
        t0 = time.monotonic()
        ticks = 0
        while True:
            await asyncio.sleep(TICK_S)
            ticks += 1
            used = procs.usage(pid)
            if used.count == 0:
                return
            w.cpu, w.wall = used.cpu_s - start, time.monotonic() - t0
            limit = None
            if used.cpu_s > self.limits.notebook_cpu_s:
                limit = ("notebook-cpu", f"grading used more than {self.limits.notebook_cpu_s:g} s of CPU time, "
                                         f"the notebook limit")
            elif used.rss_bytes > self.limits.memory:
                limit = ("memory", f"the sandbox used more than {self.limits.memory / 2**30:g} GiB of memory")
            elif box is not None and box.mode == "user" and ticks % 10 == 0 and \
                    box.scratch_used() > self.limits.scratch:
                limit = ("scratch", f"the sandbox wrote more than {self.limits.scratch / 2**20:g} MiB")
            if limit is not None:
                record(self.plan, {"index": w.index, "grade_id": w.gid, "event": "limit", "limit": limit[0],
                                   "detail": limit[1]})
                w.killed = limit[0]
                self._kill()
                return
            if w.stopped is None:
                if w.cpu > w.cpu_limit:
                    w.stopped = "cpu"
                elif w.wall > w.wall_limit:
                    w.stopped = "wall"
                if w.stopped:
                    w.stop_cpu, w.stop_at = w.cpu, time.monotonic()
                    record(self.plan, {"index": w.index, "grade_id": w.gid, "event": "stopped", "why": w.stopped,
                                       "cpu": round(w.cpu, 2), "wall": round(w.wall, 2)})
                    await self.km.interrupt_kernel()
            elif w.cpu - w.stop_cpu > GRACE_CPU_S or time.monotonic() - w.stop_at > GRACE_WALL_S:
                record(self.plan, {"index": w.index, "grade_id": w.gid, "event": "killed", "why": w.stopped})
                w.killed = "stuck"
                self._kill()
                return

    def on_cell_executed(self, **kw):
        super().on_cell_executed(**kw)
        reply = kw.get("execute_reply") or {}
        for payload in (reply.get("content") or {}).get("payload") or []:
            if isinstance(payload, dict) and payload.get("source") == "ask_exit" and not payload.get("keepkernel"):
                cell = kw.get("cell") or {}
                record(self.plan, {"index": kw.get("cell_index"), "event": "exit",
                                   "grade_id": _grade_id(cell)})

    # --- output caps ------------------------------------------------------------------------------
    def process_message(self, msg, cell, cell_index):
        if self.plan is not None and msg.get("msg_type") in ("stream", "display_data", "execute_result", "error",
                                                             "update_display_data"):
            msg = self._capped(msg, cell_index)
            if msg is None:
                return None
        return super().process_message(msg, cell, cell_index)

    def handle_comm_msg(self, outs, msg, cell_index):
        """Widget messages: nothing to grade, and their state would be stored in the notebook unbounded."""
        return None

    def _capped(self, msg: dict, index: int) -> dict | None:
        lim = self.limits
        if self._probing:  # the probe's answer is read here, never stored in the notebook
            return msg if _size(msg.get("content") or {}) <= lim.probe_output else None
        content = msg.get("content") or {}
        size = _size(content)
        left = min(lim.cell_output - self._cell_bytes.get(index, 0), lim.notebook_output - self._notebook_bytes)
        kind = msg["msg_type"]
        if size <= left:
            self._cell_bytes[index] = self._cell_bytes.get(index, 0) + size
            self._notebook_bytes += size
            return msg
        note = TRUNCATED.format(lim.cell_output if lim.cell_output - self._cell_bytes.get(index, 0) <= left
                                else lim.notebook_output, lim.cell_output, lim.notebook_output)
        # What is left of the budget is used up; past it, each kind of output that decides a score
        # (an error, a write to stderr) still leaves one short trace in the cell.
        self._cell_bytes[index] = lim.cell_output
        self._notebook_bytes += max(left, 0)
        if kind == "error":
            key = (index, "error")
            if key in self._marked:
                return None
            self._marked.add(key)
            tb = [str(line)[:2000] for line in (content.get("traceback") or [])[-20:]]
            content = {"ename": str(content.get("ename", "Error"))[:200],
                       "evalue": str(content.get("evalue", ""))[:2000], "traceback": tb}
        elif kind == "stream":
            name = content.get("name") if content.get("name") in ("stdout", "stderr") else "stdout"
            key = (index, name)
            if key in self._marked:
                return None
            self._marked.add(key)
            text = str(content.get("text", ""))
            content = {"name": name, "text": text[: max(left, 0)] + f"\n{note}\n"}
        elif kind in ("display_data", "execute_result"):
            key = (index, "display")
            if key in self._marked:
                return None
            self._marked.add(key)
            content = {"data": {"text/plain": note}, "metadata": {},
                       **({"execution_count": content.get("execution_count")} if kind == "execute_result" else {})}
        else:
            return None
        return {**msg, "content": content}
