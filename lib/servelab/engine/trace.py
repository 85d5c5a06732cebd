"""Traces as tables: `Table` (aligned text, and HTML in a notebook) for every family, and the nano-vllm engine's
shape table, one row per schedule() call (what ran, lengths, cache, queues)."""

from __future__ import annotations

import html
from collections.abc import Sequence as SequenceOf

from servelab.engine.driver import StepRecord

COLUMNS = ("step", "kind", "scheduled (name:tokens)", "length", "cached", "preempted", "finished",
           "free blocks", "waiting", "running")


def names_cell(items) -> str:
    return " ".join(items) or "-"


def pairs_cell(items) -> str:
    return " ".join(f"{name}:{n}" for name, n in items) or "-"


class Table:
    """Rows of strings under column names, for every family's trace: prints as aligned text and renders as an
    HTML table in a notebook. `columns` picks and orders a subset of `known` (all of them by default)."""

    def __init__(self, known: SequenceOf[str], rows: SequenceOf[SequenceOf[str]], columns: SequenceOf[str] = ()):
        columns = tuple(columns) or tuple(known)
        unknown = set(columns) - set(known)
        if unknown:
            raise ValueError(f"unknown columns {sorted(unknown)}; choose from {list(known)}")
        idx = [list(known).index(c) for c in columns]
        self.columns = columns
        self.rows = [tuple(row[i] for i in idx) for row in rows]

    def __str__(self) -> str:
        widths = [max(len(c), *(len(r[i]) for r in self.rows)) if self.rows else len(c)
                  for i, c in enumerate(self.columns)]
        line = lambda cells: " | ".join(cell.ljust(w) for cell, w in zip(cells, widths)).rstrip()
        sep = "-+-".join("-" * w for w in widths)
        return "\n".join([line(self.columns), sep, *(line(r) for r in self.rows)])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in self.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def shape_rows(trace: SequenceOf[StepRecord]) -> list[tuple[str, ...]]:
    """Rows of strings, one per step. `length`, `cached` and `free blocks` are taken right after
    schedule(); `finished`, `waiting` and `running` after postprocess."""
    return [(str(r.step), r.kind, pairs_cell(r.scheduled), pairs_cell(r.lengths), pairs_cell(r.cached),
             names_cell(r.preempted), names_cell(r.finished), str(r.free_blocks), names_cell(r.waiting),
             names_cell(r.running))
            for r in trace]


class ShapeTable(Table):
    """The nano-vllm engine's trace as a `Table`."""

    def __init__(self, trace: SequenceOf[StepRecord], columns: SequenceOf[str] = COLUMNS):
        super().__init__(COLUMNS, shape_rows(trace), columns)


def shape_table(trace: SequenceOf[StepRecord], columns: SequenceOf[str] = COLUMNS) -> ShapeTable:
    """The shape table of a trace from `servelab.engine.driver.Engine`: one row per schedule() call.

    >>> from servelab.schedulers.scheduler import Scheduler, Sequence, SamplingParams
    >>> from servelab.engine.driver import Engine
    >>> sch = Scheduler(num_blocks=5, block_size=4, max_num_batched_tokens=8, enable_prefix_caching=False)
    >>> reqs = [Sequence(list(range(n)), SamplingParams(max_tokens=1, ignore_eos=True), name=c)
    ...         for c, n in [("A", 6), ("B", 5)]]
    >>> print(shape_table(Engine(sch).run(reqs), columns=("step", "kind", "scheduled (name:tokens)")))
    step | kind | scheduled (name:tokens)
    -----+------+------------------------
    0    | P    | A:6
    1    | P    | B:5
    """
    return ShapeTable(trace, columns)
