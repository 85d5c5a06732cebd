"""scripts/peers_radix.py: servelab's figures alone (no peer), and the agreement check. Nothing here times anything
(SGLang's wheel is not needed: the script says so and measures servelab alone)."""

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "peers_radix.py"


def _script():
    spec = importlib.util.spec_from_file_location("script_peers_radix", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _script()


def test_measure_without_a_peer_gives_servelab_alone():
    rows = bench.measure(None, repeats=1, quick=True)
    assert len(rows) == 9
    for r in rows:
        assert set(r) == {"workload", "servelab_s", "peer_s", "ratio", "agree", "note", "tuples_s"}
        assert r["servelab_s"] >= 0 and r["peer_s"] is None and r["ratio"] is None and r["agree"] is None
        assert "no peer" in r["note"]
        # the W rows time the tuple form beside the array form; evict(1) has no key to give in either
        assert (r["tuples_s"] is None) == r["workload"].startswith("evict") and (r["tuples_s"] or 0) >= 0
    assert [r["workload"][:2] for r in rows] == ["W1", "W1", "W2", "W2", "W3", "W3", "W4", "W4", "ev"]


def test_a_missing_wheel_is_said_and_servelab_measured_alone(tmp_path):
    rows = bench.measure(str(tmp_path / "nope.whl"), repeats=1, quick=True)
    assert all(r["peer_s"] is None and "no such file" in r["note"] for r in rows)


def test_agreement_compares_every_result():
    requests = bench.with_values(bench.w3_random_short(bench.random.Random(0), True, 1)[0])
    _, ours = bench.run_servelab(requests, 1, 200)
    _, again = bench.run_servelab(requests, 1, 200)
    assert bench.agree(ours, again) == (True, "")
    _, arrays = bench.run_servelab(bench.as_arrays(requests), 1, 200)   # the bulk form builds the same tree
    assert bench.agree(ours, arrays) == (True, "")
    assert len(ours["evicted counts"]) == len(requests) // 8 and sum(ours["evicted counts"]) > 0
    for field in ours:
        other = {k: list(v) for k, v in ours.items()}
        other[field][-1] = "different"
        ok, why = bench.agree(ours, other)
        assert not ok and field in why


def test_main_without_a_peer_says_so_and_a_failed_agreement_is_loud(capsys, monkeypatch):
    assert bench.main(["--quick", "--no-download", "--repeats", "1"]) == 0
    assert "servelab's figures alone" in capsys.readouterr().out
    row = {"workload": "W1 x", "servelab_s": 1.0, "peer_s": 2.0, "ratio": 2.0, "agree": False, "note": "differ in y"}
    monkeypatch.setattr(bench, "measure", lambda *a, **k: [row])
    assert bench.main(["--quick", "--no-download"]) == 1
    assert "AGREEMENT FAILED: W1 x: differ in y" in capsys.readouterr().out
