"""Kernel side of a graded test cell: run the learner's code on inputs the grader chose, hand back plain data.

While a notebook is graded, the grader does not run a test cell's source in the learner's kernel. It sends
one line instead, ``__import__("servelab_autograder.exercises.probe", fromlist=["run"]).run(REQUEST)``, where
``REQUEST`` is JSON,

    {"calls": [{"name": "simulate_static", "cases": [[args...], ...]}, ...], "names": ["drill_1", ...]}

(either part may be left out; a call may name a ``"driver"``, see :func:`driver`), and reads back one
display output of type :data:`MIME`:

    {"calls": [{"results": [{"ok": result, "after": args} or {"raised": name, "message": text}, ...]}
               or {"missing": name}, ...],
     "values": {name: value}}

``after`` is the arguments as the call left them; a name the notebook does not define is left out of
``values``. Everything is :mod:`servelab_autograder.exercises.plain` data. The grader compares it with the reference
and decides the points: nothing here decides anything, so nothing here needs to be trusted.
"""

from __future__ import annotations

import importlib
import json

from servelab_autograder.exercises import plain

MIME = "application/vnd.servelab.probe+json"


def _namespace() -> dict:
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else {}


def _where(e: BaseException) -> str:
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_qualname if tb is not None else ""


def driver(name: str):
    """The kernel-side driver ``"servelab_autograder.module:function"``: ``function(fn, *args)`` builds the
    objects a stateful exercise works on from plain-data ``args``, runs the learner's ``fn`` on them and
    returns the run's trace as plain data."""
    module, _, attr = name.partition(":")
    if not module.startswith("servelab_autograder.") or not attr:
        raise ValueError(f"not a driver: {name!r}")
    return getattr(importlib.import_module(module), attr)


def _call(name: str, cases: list, namespace: dict, driven_by: str | None = None) -> dict:
    fn = namespace.get(name)
    if fn is None:
        return {"missing": name}
    run = driver(driven_by) if driven_by else None
    results = []
    for case in cases:
        args = plain.decode(case)
        try:
            out = run(fn, *args) if run else fn(*args)
        except Exception as e:  # noqa: BLE001 - reported as data; KeyboardInterrupt (a time limit) goes on up
            results.append({"raised": type(e).__name__, "message": str(e)[:2000], "where": _where(e)})
            continue
        # a driver builds its own objects from the arguments: only a plain call can change the caller's data
        results.append({"ok": plain.encode(out)} if run else
                       {"ok": plain.encode(out), "after": plain.encode(list(args))})
    return {"results": results}


def answer(request: dict, namespace: dict) -> dict:
    """The plain-data answer to ``request`` about the learner's ``namespace``."""
    out: dict = {}
    if "calls" in request:
        out["calls"] = [_call(c["name"], c["cases"], namespace, c.get("driver")) for c in request["calls"]]
    if "names" in request:
        out["values"] = {n: plain.encode(namespace[n]) for n in request["names"] if n in namespace}
    return out


def run(request: str) -> None:
    """Answer ``request`` (JSON) about the kernel's namespace, as one display output of type :data:`MIME`."""
    from IPython.display import display

    display({MIME: json.dumps(answer(json.loads(request), _namespace()))}, raw=True)
