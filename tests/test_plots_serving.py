"""servelab.plots.serving: step timelines, latency CDFs and the batch sweep, checked through what they draw."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B  # noqa: E402
from servelab.plots.serving import plot_batch_sweep, plot_latency_cdfs, plot_step_timeline  # noqa: E402
from servelab.simulator import MixedBudget, PrefillFirst, Requests, merge_requests, simulate  # noqa: E402


@pytest.fixture(scope="module")
def long_prompt_runs():
    """Four chats decoding when a 4000-token prompt arrives, with and without chunking."""
    reqs, (chats, long) = merge_requests(Requests(np.zeros(4), np.full(4, 128), np.full(4, 60)),
                                         Requests([0.1], [4000], [4]))
    runs = {"one step": simulate(reqs, PrefillFirst(max_num_batched_tokens=8192), LLAMA3_8B, H100_SXM),
            "chunks of 256": simulate(reqs, MixedBudget(max_num_batched_tokens=256), LLAMA3_8B, H100_SXM)}
    return runs, chats


def _close(fig):
    plt.close(fig)


def test_step_timeline_draws_every_step_and_every_gap(long_prompt_runs):
    runs, chats = long_prompt_runs
    fig = plot_step_timeline(runs, ids=chats)
    try:
        assert isinstance(fig, Figure)
        top, bottom = fig.axes
        # one segment per step, from its start to its end, at the height of its duration (ms)
        segments = [c for c in top.collections if isinstance(c, LineCollection)]
        assert len(segments) == 2
        for coll, res in zip(segments, runs.values()):
            segs = coll.get_segments()
            assert len(segs) == res.step_end_s.size
            assert [s[0][0] for s in segs] == pytest.approx(res.step_start_s.tolist())
            assert [s[1][0] for s in segs] == pytest.approx(res.step_end_s.tolist())
            assert [s[0][1] for s in segs] == pytest.approx((res.step_duration_s * 1e3).tolist())
        # one dot per inter-token gap of the chats, at the time of the later token
        for line, res in zip(bottom.lines, runs.values()):
            t, gap = res.gap_timeline(chats)
            assert list(line.get_xdata()) == pytest.approx(t.tolist())
            assert list(line.get_ydata()) == pytest.approx((gap * 1e3).tolist())
        labels = [t.get_text() for t in bottom.get_legend().get_texts()]
        worst = [np.nanmax(r.max_gap[chats]) * 1e3 for r in runs.values()]
        assert labels == [f"one step, worst {worst[0]:.0f} ms", f"chunks of 256, worst {worst[1]:.0f} ms"]
        assert worst[0] > 5 * worst[1]            # the long prefill stalls every chat; chunks do not
        assert top.get_yscale() == bottom.get_yscale() == "log"
    finally:
        _close(fig)


def test_step_timeline_zooms_and_draws_on_given_axes(long_prompt_runs):
    runs, chats = long_prompt_runs
    fig, axes = plt.subplots(2, 1)
    try:
        assert plot_step_timeline(runs, ids=chats, ax=axes, t_range=(0.09, 0.2), log=False) is fig
        top, bottom = axes
        assert bottom.get_xlim() == pytest.approx((0.09, 0.2))
        assert top.get_yscale() == "linear"
        for coll in [c for c in top.collections if isinstance(c, LineCollection)]:
            assert all(s[1][0] >= 0.09 and s[0][0] <= 0.2 for s in coll.get_segments())
        assert all(((line.get_xdata() >= 0.09) & (line.get_xdata() <= 0.2)).all() for line in bottom.lines)
    finally:
        _close(fig)
    with pytest.raises(ValueError, match="mapping"):
        plot_step_timeline({})
    with pytest.raises(ValueError, match=r"runs\['x'\] is a int, not a SimResult"):
        plot_step_timeline({"x": 3})
    with pytest.raises(ValueError, match="ax must be None or 2 Axes"):
        plot_step_timeline(runs, ax=[axes[0]])


def test_latency_cdfs_count_every_request_and_mark_the_targets():
    reqs = Requests(np.linspace(0, 0.5, 20), np.full(20, 300), np.full(20, 20))
    served = simulate(reqs, MixedBudget(max_num_batched_tokens=512), LLAMA3_8B, H100_SXM)
    half = simulate(reqs, MixedBudget(max_num_batched_tokens=512), LLAMA3_8B, H100_SXM,
                    admission=lambda state, i: i % 2 == 0)
    fig = plot_latency_cdfs({"all": served, "half rejected": half}, ttft_target_s=0.05, tpot_target_s=0.01)
    try:
        left, right = fig.axes
        curves = [ln for ln in left.lines if ln.get_linestyle() == "-"]
        assert len(curves) == 2
        # every request counts: the rejected half never gets a first token, so that curve stops at 0.5
        assert curves[0].get_ydata()[-1] == pytest.approx(1.0) and curves[1].get_ydata()[-1] == pytest.approx(0.5)
        assert curves[0].get_ydata()[0] == 0 and sorted(curves[0].get_xdata()[1:]) == pytest.approx(
            sorted(served.ttft.tolist()))
        # the targets as dashed vertical lines, TTFT in s and TPOT in ms
        assert [ln.get_xdata()[0] for ln in left.lines if ln.get_linestyle() == "--"] == [0.05]
        assert [ln.get_xdata()[0] for ln in right.lines if ln.get_linestyle() == "--"] == [10.0]
        labels = [t.get_text() for t in left.get_legend().get_texts()]
        met = served.slo_met(0.05, 0.01).mean()
        assert labels[0] == f"all: {met:.0%} meet both" and labels[1].startswith("half rejected: ")
        tpot_curves = [ln for ln in right.lines if ln.get_linestyle() == "-"]
        assert sorted(tpot_curves[0].get_xdata()[1:]) == pytest.approx(sorted((served.tpot * 1e3).tolist()))
    finally:
        _close(fig)


def test_batch_sweep_marks_the_best_batch_for_users():
    batches = [8, 16, 24, 32]
    fig = plot_batch_sweep(batches, [1100, 1640, 1940, 2135], [1100, 1640, 0, 0], [0.0071, 0.0097, 0.0122, 0.0148],
                           tpot_target_s=0.012)
    try:
        ax, twin = fig.axes
        thr, good = ax.lines
        assert list(thr.get_xdata()) == batches and list(good.get_ydata()) == [1100, 1640, 0, 0]
        assert [t.get_text() for t in ax.texts] == ["best for users: batch 16"]
        tpot, target = twin.lines
        assert list(tpot.get_ydata()) == pytest.approx([7.1, 9.7, 12.2, 14.8])
        assert list(target.get_ydata()) == pytest.approx([12.0, 12.0])
        assert "TPOT target 12 ms" in [t.get_text() for t in ax.get_legend().get_texts()]
    finally:
        _close(fig)
    fig = plot_batch_sweep([1, 2], [10, 20], [10, 20])
    try:
        assert len(fig.axes) == 1 and [t.get_text() for t in fig.axes[0].texts] == ["best for users: batch 2"]
    finally:
        _close(fig)
    with pytest.raises(ValueError, match="one entry per batch size"):
        plot_batch_sweep([1, 2], [10], [10, 20])
    with pytest.raises(ValueError, match="tpot_s needs one entry per batch size"):
        plot_batch_sweep([1, 2], [10, 20], [10, 20], tpot_s=[0.01])
