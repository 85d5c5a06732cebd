"""scripts/peers_scheduler.py: servelab's figures alone (no peer), and the trace-for-trace agreement check.
Nothing here times anything."""

import importlib.util
import sys
from pathlib import Path

import pytest

from servelab.schedulers import scheduler as sl

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "peers_scheduler.py"


def _script():
    spec = importlib.util.spec_from_file_location("script_peers_scheduler", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = _script()


def test_measure_without_a_peer_gives_servelab_alone():
    rows = bench.measure(None, quick=True)
    assert len(rows) == 6
    for r in rows:
        assert set(r) == {"workload", "servelab_s", "peer_s", "ratio", "agree", "note"}
        assert r["servelab_s"] >= 0 and r["peer_s"] is None and r["ratio"] is None and r["agree"] is None
        assert "no peer" in r["note"]
    assert {"bs 16", "bs 256"} == {r["workload"].rsplit(", ", 1)[1] for r in rows}


def test_main_without_a_peer_says_so(capsys):
    assert bench.main(["--quick"]) == 0
    assert "servelab's figures alone" in capsys.readouterr().out


def test_the_workloads_preempt_and_hit_the_cache():
    quick = {w.name: w for w in bench.workloads(quick=True)}
    for name, w in quick.items():
        trace = bench.run(bench.Servelab(), w, record=True)[1]
        preemptions, hits = sum(len(row[2]) for row in trace[:-1]), trace[-1][1]
        if name.startswith("tight"):
            assert preemptions > 0
        if name.startswith("shared"):
            assert hits > 0
        # every request ends with its fake-model tokens up to eos (unless it ignores eos) or max_tokens
        for (prompt, max_tokens, ignore_eos), out, tokens in zip(w.requests, w.outputs, trace[-1][0]):
            stop = max_tokens if ignore_eos or bench.EOS not in out else out.index(bench.EOS) + 1
            assert tokens == prompt + out[:min(stop, max_tokens)]


class _OtherServelab(bench.Servelab):
    """servelab with one request fewer per decode step: a different trace."""

    def scheduler(self, w):
        sch = super().scheduler(w)
        sch.max_num_seqs -= 1
        return sch


def test_agreement_compares_the_traces_step_for_step():
    w = bench.make_workload("tight", 16, n=40)
    a = bench.run(bench.Servelab(), w, record=True)[1]
    assert bench.first_difference(a, bench.run(bench.Servelab(), w, record=True)[1]) is None
    w.max_num_seqs = 8
    b, c = bench.run(bench.Servelab(), w, record=True)[1], bench.run(_OtherServelab(), w, record=True)[1]
    diff = bench.first_difference(b, c)
    assert diff is not None and diff.startswith("step ")
    assert bench.first_difference(b, b[:-2] + b[-1:]) is not None   # one step short


def test_a_failed_agreement_is_loud_and_fails(monkeypatch, capsys):
    row = {"workload": "x", "servelab_s": 1.0, "peer_s": 1.0, "ratio": 1.0, "agree": False,
           "note": "DISAGREE: step 3: batch differ"}
    monkeypatch.setattr(bench, "measure", lambda *a, **k: [row])
    monkeypatch.setattr(bench, "NanoVllm", lambda path: type("P", (), {"commit": None})())
    assert bench.main(["--peer", "somewhere"]) == 1
    assert "AGREEMENT FAILED" in capsys.readouterr().out


def test_a_peer_path_that_is_not_nano_vllm_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="not a copy of nano-vllm"):
        bench.NanoVllm(str(tmp_path))


def test_servelab_stack_is_the_library_scheduler():
    w = bench.make_workload("plain", 16, n=5)
    assert type(bench.Servelab().scheduler(w)) is sl.Scheduler
