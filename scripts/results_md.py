"""bench/results.md is shared: scripts/bench.py writes its head, and each other bench script one section that starts
at a marker comment of its own. `record` puts one script's section in and keeps everything else as it is."""

from __future__ import annotations

import platform
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results.md"
# any section marker: a script's (`<!-- name: scripts/x.py -->`) or a hand-written section's (`<!-- simulator
# profile: by hand -->`): a section runs to the next one, so none of them is swallowed by the one before
SECTION_MARK = re.compile(r"^<!-- [\w. -]+: [\w./ -]+ -->$", re.M)


def cpu_model() -> str:
    """The CPU's model name, as a record names the machine (/proc/cpuinfo; elsewhere what platform knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def shown(path) -> str:
    """A path as the record shows it: relative to the repository when inside it, else by its name alone (a
    machine's own folders say nothing to a reader, and the record is committed)."""
    path = Path(path).absolute()
    root = RESULTS.parents[1]
    return str(path.relative_to(root)) if path.is_relative_to(root) else path.name


def record(text: str, section: str, mark: str) -> str:
    """`text` (bench/results.md) with `section` (which starts with `mark`) put in: in place of the old one (from
    `mark` to the next section marker or the end), else just before the first other section (so
    scripts/bench_engine.py's section, which runs to the end of the file, stays last), else at the end."""
    section = section.rstrip("\n") + "\n"
    if mark in text:
        start = text.index(mark)
        nxt = SECTION_MARK.search(text, start + len(mark))
        end = nxt.start() if nxt else len(text)
        return text[:start] + section + ("\n" + text[end:] if nxt else "")
    nxt = SECTION_MARK.search(text)
    if nxt:
        return text[:nxt.start()] + section + "\n" + text[nxt.start():]
    keep = text.rstrip("\n")
    return (keep + "\n\n" if keep else "") + section
