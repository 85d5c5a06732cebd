"""Every number a chapter registers in servelab.claims is recomputed from the library, stated as printed by the
notebook cell it names (its source or its stored outputs, in solutions/), and describes a step the serving model
lets run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab import claims
from servelab.analytic import serving
from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B

ROOT = Path(__file__).resolve().parents[1]
ALL = [c for a in sorted(claims.CHAPTERS) for c in claims.of(a)]


def _cells(assignment: str) -> dict[str, str]:
    nb = json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    out = {}
    for cell in nb["cells"]:
        outputs = "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                          for o in cell.get("outputs", []))
        out[cell["id"]] = "".join(cell["source"]) + "\n" + outputs
    return out


@pytest.mark.parametrize("claim", ALL, ids=[f"{c.assignment[:4]}-{c.name}" for c in ALL])
def test_the_cell_states_the_claim(claim):
    cells = _cells(claim.assignment)
    assert claim.cell in cells, f"{claim.assignment} has no cell {claim.cell!r} (claim {claim.name!r})"
    assert claim.text in cells[claim.cell], (
        f"{claim.assignment} cell {claim.cell} should state {claim.name} as {claim.text!r} (computed by "
        f"servelab.claims); it says:\n{cells[claim.cell][:2000]}")


@pytest.mark.parametrize("claim", [c for c in ALL if c.point is not None],
                         ids=[f"{c.assignment[:4]}-{c.name}" for c in ALL if c.point is not None])
def test_the_claims_point_can_run(claim):
    serving.check(claim.point)


def test_every_chapter_with_claims_is_a_chapter():
    chapters = {p.name for p in (ROOT / "solutions").iterdir() if p.is_dir()}
    assert set(claims.CHAPTERS) <= chapters


def test_a_claim_states_its_point_or_why_it_has_none():
    with pytest.raises(ValueError, match="give the serving point"):
        claims.Claim("ch01_continuous_batching", "cell-01", "x", 1, "{}", None)


def test_the_full_cache_point_is_the_edge_of_kv_capacity():
    point = claims.full_cache(LLAMA3_8B, H100_SXM)
    got = serving.check(point)
    assert got.kv_tokens == got.kv_capacity and got.max_context <= 8192
    one_more = serving.ServingPoint(LLAMA3_8B, H100_SXM, decode_contexts=point.decode_contexts, resident_tokens=1)
    with pytest.raises(serving.Infeasible, match="KV tokens"):
        serving.check(one_more)
