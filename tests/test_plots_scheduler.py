"""servelab.plots.batching.plot_free_blocks: free KV blocks per step of an Engine trace, step kinds, preemptions."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from servelab.engine.driver import Engine  # noqa: E402
from servelab.plots.batching import plot_free_blocks  # noqa: E402
from servelab.schedulers.scheduler import SamplingParams, Scheduler, Sequence  # noqa: E402


def _lesson_trace():
    sch = Scheduler(num_blocks=5, block_size=4, max_num_batched_tokens=8, enable_prefix_caching=False)
    reqs = [Sequence([ord(n) * 100 + j for j in range(L)], SamplingParams(max_tokens=4, ignore_eos=True), name=n)
            for n, L in [("A", 6), ("B", 5), ("C", 3)]]
    return Engine(sch).run(reqs)


def _free_line(ax, n):
    lines = [ln for ln in ax.lines if len(ln.get_xdata()) == n and ln.get_linestyle() == "-"]
    assert len(lines) == 1
    return lines[0]


def test_draws_free_blocks_step_kinds_and_preemptions():
    trace = _lesson_trace()
    fig = plot_free_blocks(trace, num_blocks=5)
    try:
        assert isinstance(fig, Figure)
        ax = fig.axes[0]
        line = _free_line(ax, len(trace))
        assert list(line.get_xdata()) == list(range(7))
        assert list(line.get_ydata()) == [3, 0, 0, 1, 0, 3, 3]          # the shape table's "free blocks"
        # one background span per step, coloured by its kind: P P D D D P D
        spans = [p for p in ax.patches if p.get_width() == pytest.approx(1.0)]
        colours = [to_hex(p.get_facecolor()) for p in sorted(spans, key=lambda p: p.get_x())]
        kinds = ["P" if c == colours[0] else "D" for c in colours]
        assert kinds == ["P", "P", "D", "D", "D", "P", "D"] and len(set(colours)) == 2
        # C is preempted at step 3: one marker there, labelled with its name
        assert [t.get_text() for t in ax.texts] == ["preempted seq C"]
        markers = [ln for ln in ax.lines if ln.get_marker() == "X"]
        assert [(list(m.get_xdata()), list(m.get_ydata())) for m in markers] == [([3], [1])]
        # the cache's size as a dashed line, and the title sums the run up
        dashed = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
        assert len(dashed) == 1 and list(dashed[0].get_ydata()) == [5, 5]
        assert ax.get_title(loc="left") == "free KV blocks: 7 steps (3 prefill), 1 preemption"
        assert ax.get_ylim()[1] > 5
        assert {t.get_text() for t in ax.get_legend().get_texts()} == {
            "prefill step", "decode step", "preemption", "num_blocks = 5"}
    finally:
        plt.close(fig)


def test_draws_on_the_axes_it_is_given():
    fig, (left, right) = plt.subplots(1, 2)
    try:
        assert plot_free_blocks(_lesson_trace(), num_blocks=5, ax=right) is fig
        assert not left.lines and right.lines
    finally:
        plt.close(fig)


def test_empty_trace_gives_empty_axes():
    fig = plot_free_blocks([], num_blocks=3)
    try:
        ax = fig.axes[0]
        assert _free_line(ax, 0) is not None and not ax.texts
        assert ax.get_title(loc="left") == "free KV blocks: 0 steps (0 prefill), 0 preemptions"
    finally:
        plt.close(fig)


def test_rejects_a_num_blocks_that_does_not_fit_the_trace():
    trace = _lesson_trace()
    with pytest.raises(ValueError, match="more free blocks than num_blocks=2"):
        plot_free_blocks(trace, num_blocks=2)
    with pytest.raises(ValueError, match="num_blocks must be >= 1"):
        plot_free_blocks(trace, num_blocks=0)


def test_a_step_that_preempts_two_names_both():
    sch = Scheduler(num_blocks=4, block_size=4, max_num_batched_tokens=16, enable_prefix_caching=False)
    reqs = [Sequence([ord(n) * 10 + j for j in range(4)], SamplingParams(max_tokens=3, ignore_eos=True), name=n)
            for n in "ABCD"]
    fig = plot_free_blocks(Engine(sch).run(reqs), num_blocks=4)
    try:
        assert [t.get_text() for t in fig.axes[0].texts] == ["preempted seqs C, D"]
    finally:
        plt.close(fig)
