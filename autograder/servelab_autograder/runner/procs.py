"""The processes of a tree, read from Linux's /proc: who descends from whom, and what they used.

The grader measures a sandbox from outside: a learner's code can neither hide its CPU time nor fake it.
CPU time is the tree's own user + system time plus what its reaped children used (``cutime``/``cstime``
of the living), so nothing is counted twice and a child that exited still counts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    cpu_ticks: int   # utime + stime + cutime + cstime
    rss_pages: int


@dataclass(frozen=True)
class Usage:
    cpu_s: float     # CPU seconds of the tree (its reaped children included)
    rss_bytes: int   # resident memory of the living processes
    count: int       # living processes (0: the tree is gone)


def table() -> dict[int, Proc]:
    """Every process this /proc shows."""
    procs = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return procs
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode("utf-8", "replace")
            f = stat.rsplit(")", 1)[1].split()
            procs[int(entry)] = Proc(int(entry), int(f[1]), sum(int(x) for x in f[11:15]), int(f[21]))
        except (OSError, IndexError, ValueError):
            continue
    return procs


def descendants(pid: int, procs: dict[int, Proc] | None = None) -> list[int]:
    """Every living descendant of ``pid``, parents before children."""
    procs = table() if procs is None else procs
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def usage(pid: int) -> Usage:
    """What the tree rooted at ``pid`` (``pid`` included) has used so far."""
    procs = table()
    tree = [p for p in [pid, *descendants(pid, procs)] if p in procs]
    return Usage(sum(procs[p].cpu_ticks for p in tree) / TICKS, sum(procs[p].rss_pages for p in tree) * PAGE,
                 len(tree))


def with_argument(text: str) -> list[int]:
    """The living processes whose command line holds ``text`` (how tests find a process they marked)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if text.encode() in fh.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found
