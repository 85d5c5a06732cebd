"""What one submission may use while it is graded: the defaults, and the chapters that need other values.

Time is CPU time of the sandbox's whole process tree, measured from outside the sandbox, so a loaded
machine does not cost a learner points: importing torch takes about 2 CPU-seconds however long the
machine makes it wait. Each CPU limit has a wall-clock backstop ``wall_factor`` times larger, for code
that waits instead of computing; a cell stopped by that backstop gets the notebook graded once more with
the cell's limits doubled before it costs points (a starved machine is not the learner's fault).

| limit | default | what happens past it |
|---|---|---|
| ``cell_cpu_s`` | 60 s | the cell is interrupted (a kernel that ignores it: killed, re-graded without the cell) |
| ``notebook_cpu_s`` | 600 s | grading stops: ``notebook-timeout`` |
| ``wall_factor`` | 5 | backstops: 300 s a cell, 3000 s a notebook |
| ``address_space`` | 4 GiB | per process: the allocation fails (``MemoryError``) |
| ``memory`` | 8 GiB | resident memory of the whole sandbox: the kernel is killed |
| ``processes`` | 64 | processes and threads: ``fork``/``Thread.start`` fail |
| ``scratch`` | 512 MiB | the sandbox's only writable folder: writes fail (``ENOSPC``) |
| ``file_size`` | 256 MiB | one file: the write fails (``EFBIG``) |
| ``open_files`` | 512 | ``open`` fails (``EMFILE``) |
| ``cell_output`` | 1 MiB | the rest of the cell's output becomes one "output truncated at N bytes" line |
| ``notebook_output`` | 8 MiB | the same, for the whole notebook |
| ``probe_output`` | 16 MiB | what the kernel hands back for one graded cell: past it, the cell gets no answer (0) |

A chapter that needs more says so in :data:`CHAPTERS`; ``python -m servelab_autograder.runner.grade`` flags
(``--cell-cpu``, ``--notebook-cpu``, ``--wall-factor``, ``--limit NAME=VALUE``) override both for one run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class Limits:
    cell_cpu_s: float = 60.0
    notebook_cpu_s: float = 600.0
    wall_factor: float = 5.0
    address_space: int = 4 * GiB
    memory: int = 8 * GiB
    processes: int = 64
    scratch: int = 512 * MiB
    file_size: int = 256 * MiB
    open_files: int = 512
    cell_output: int = 1 * MiB
    notebook_output: int = 8 * MiB
    probe_output: int = 16 * MiB

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"grading limit {f.name} must be a positive number, not {value!r}")
        if self.wall_factor < 1:
            raise ValueError(f"wall_factor must be at least 1 (the backstop is never below the CPU limit), "
                             f"not {self.wall_factor!r}")

    @property
    def cell_wall_s(self) -> float:
        return self.cell_cpu_s * self.wall_factor

    @property
    def notebook_wall_s(self) -> float:
        return self.notebook_cpu_s * self.wall_factor

    def replace(self, **changes) -> Limits:
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


# Per-chapter changes to the defaults, e.g. {"ch07_mini_engine": {"cell_cpu_s": 120}}. Every chapter so far
# fits the defaults: its slowest legitimate cell (importing torch and Triton, then a seeded simulation or
# the Triton interpreter) takes under 5 CPU-seconds on the 2-core box.
CHAPTERS: dict[str, dict] = {}


def for_chapter(assignment: str, base: Limits | None = None, **overrides) -> Limits:
    """The limits ``assignment`` is graded under: ``base`` (the defaults), its :data:`CHAPTERS` entry, then
    ``overrides`` (None values ignored)."""
    limits = (base or Limits()).replace(**CHAPTERS.get(assignment, {}))
    return limits.replace(**overrides)


UNITS = {"KiB": KiB, "MiB": MiB, "GiB": GiB, "K": KiB, "M": MiB, "G": GiB}


def parse(text: str) -> tuple[str, float | int]:
    """``"memory=2GiB"`` -> ("memory", 2147483648); a name of :class:`Limits`, a number, an optional unit."""
    name, sep, value = text.partition("=")
    names = [f.name for f in dataclasses.fields(Limits)]
    if not sep or name.strip() not in names:
        raise ValueError(f"{text!r}: expected NAME=VALUE with NAME one of {', '.join(names)}")
    value = value.strip()
    unit = next((u for u in sorted(UNITS, key=len, reverse=True) if value.endswith(u)), "")
    try:
        number = float(value[: len(value) - len(unit)] if unit else value)
    except ValueError:
        raise ValueError(f"{text!r}: {value!r} is not a number (units: {', '.join(UNITS)})") from None
    number *= UNITS.get(unit, 1)
    kind = type(getattr(Limits(), name.strip()))
    return name.strip(), int(number) if kind is int else number
