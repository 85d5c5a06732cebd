import pytest

from servelab.engine.driver import Engine
from servelab.engine.trace import COLUMNS, shape_rows, shape_table
from servelab.schedulers.scheduler import SamplingParams, Scheduler, Sequence


def _lesson_trace():
    sch = Scheduler(num_blocks=5, block_size=4, max_num_batched_tokens=8, enable_prefix_caching=False)
    reqs = [Sequence([ord(n) * 100 + j for j in range(L)], SamplingParams(max_tokens=4, ignore_eos=True), name=n)
            for n, L in [("A", 6), ("B", 5), ("C", 3)]]
    return Engine(sch).run(reqs)


def test_rows_follow_the_trace():
    rows = shape_rows(_lesson_trace())
    assert len(rows) == 7
    assert rows[1] == ("1", "P", "B:5 C:3", "B:5 C:3", "B:0 C:0", "-", "-", "0", "-", "A B C")
    assert rows[3][COLUMNS.index("preempted")] == "C"
    assert rows[4][COLUMNS.index("finished")] == "A B"


def test_text_and_html_rendering():
    table = shape_table(_lesson_trace(), columns=("step", "kind", "free blocks"))
    lines = str(table).splitlines()
    assert lines[0] == "step | kind | free blocks"
    assert [line.split("|")[2].strip() for line in lines[2:]] == ["3", "0", "0", "1", "0", "3", "3"]
    assert table._repr_html_().count("<tr>") == 8


def test_unknown_column_is_named():
    with pytest.raises(ValueError, match="unknown columns \\['blocks'\\]"):
        shape_table(_lesson_trace(), columns=("step", "blocks"))
