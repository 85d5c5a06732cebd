"""What crosses from the learner's kernel (plain data, and nothing that runs), the probe that makes it, and the
known-wrong patches the grader applies to the solution."""

from __future__ import annotations

import json
import math
import textwrap

import numpy as np
import pytest
import torch

from servelab_autograder.exercises import plain, probe
from servelab_autograder.judge import known_wrong


def roundtrip(x):
    return plain.decode(json.loads(json.dumps(plain.encode(x))))


def test_plain_values_cross_unchanged_and_keep_their_kind():
    value = {"a": (1, [2.5, None, True], "x"), 3: [(), []], (1, 2): "key"}
    got = roundtrip(value)
    assert got == value and isinstance(got["a"], tuple) and isinstance(got[3][1], list)
    assert math.isnan(roundtrip(float("nan"))) and roundtrip(float("-inf")) == float("-inf")
    assert roundtrip(True) is True and roundtrip(1) == 1 and type(roundtrip(1)) is int
    from collections import namedtuple

    assert roundtrip(namedtuple("P", "x y")(1, 2)) == (1, 2)


def test_numbers_and_arrays_cross_as_data():
    assert roundtrip(np.int64(7)) == 7 and roundtrip(np.int64(7)).dtype == np.int64
    assert roundtrip(np.float32(0.5)).dtype == np.float32
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = roundtrip(a)
    assert got.dtype == np.float32 and got.shape == (3, 4) and (got == a).all()
    t = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    got = roundtrip(t)
    assert got.dtype == np.float32 and got.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_anything_else_becomes_an_opaque_value_equal_to_nothing():
    class Yes:
        def __eq__(self, other):
            return True

        def __repr__(self):
            return "Yes()"

    got = roundtrip([Yes(), {1, 2}, lambda: 1])
    assert all(isinstance(g, plain.Opaque) for g in got)
    assert got[0] != got[0] and got[0].repr == "Yes()" and got[0].type.endswith("Yes")
    assert got[1].type == "set"


def test_sizes_are_capped():
    deep: list = []
    for _ in range(plain.MAX_DEPTH + 5):
        deep = [deep]
    assert "levels deep" in repr(roundtrip(deep)[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0])
    assert isinstance(roundtrip(list(range(plain.MAX_ITEMS + 1))), plain.Opaque)


@pytest.mark.parametrize("bad", [
    {"$": "tuple", "v": "no"}, {"$": "float", "v": "1.5"}, {"$": "number", "dtype": "object", "v": 1},
    {"$": "array", "dtype": "float32", "shape": [2], "b64": "AAAA"}, {"$": "exec", "v": "import os"},
    {"no": "tag"}, {"$": "dict", "v": [[[1], 2]]},
])
def test_malformed_data_is_refused(bad):
    with pytest.raises(plain.Malformed):
        plain.decode(bad)


def test_the_probe_answers_with_data_about_the_namespace():
    ns: dict = {}
    exec(textwrap.dedent("""
        def f(xs, k):
            xs.append(k)
            return (sum(xs), k)
        def g(x):
            raise ValueError("no")
        answer = 42
    """), ns)
    reply = probe.answer({"calls": [{"name": "f", "cases": [[[1, 2], 3]]}, {"name": "g", "cases": [[1]]},
                                    {"name": "h", "cases": [[1]]}], "names": ["answer", "missing"]}, ns)
    f, g, h = reply["calls"]
    assert plain.decode(f["results"][0]["ok"]) == (6, 3) and plain.decode(f["results"][0]["after"]) == [[1, 2, 3], 3]
    assert g["results"][0]["raised"] == "ValueError" and g["results"][0]["message"] == "no"
    assert h == {"missing": "h"} and reply["values"] == {"answer": 42}
    json.dumps(reply)  # plain JSON, all of it


PATCH = """\
Pitfall: the sum, not the max.
fails: test_f
says: not the max
--- f
+++ f
@@
 def f(xs):
-    return max(xs)
+    return sum(xs)
"""


def test_a_patch_applies_exactly_once(tmp_path):
    path = tmp_path / "sum.diff"
    path.write_text(PATCH)
    p = known_wrong.load(path)
    assert (p.message, p.fails, p.says) == ("Pitfall: the sum, not the max.", ("test_f",), "not the max")
    assert p.cells == {"f"}
    assert p.apply({"f": "def f(xs):\n    return max(xs)\n"}) == {"f": "def f(xs):\n    return sum(xs)\n"}
    with pytest.raises(known_wrong.BadPatch, match="does not occur"):
        p.apply({"f": "def f(xs):\n    return min(xs)\n"})
    with pytest.raises(known_wrong.BadPatch, match="occurs 2 times"):
        p.apply({"f": "def f(xs):\n    return max(xs)\ndef f(xs):\n    return max(xs)\n"})
    with pytest.raises(known_wrong.BadPatch, match="no solution cell"):
        p.apply({"g": ""})


@pytest.mark.parametrize("text, why", [
    (PATCH.replace("fails: test_f\n", ""), "pitfall's line"),
    (PATCH.replace("says: not the max\n", "says:\n"), "'says:'"),
    (PATCH.replace("-    return max(xs)\n+    return sum(xs)\n", ""), "changes nothing"),
    (PATCH.replace("@@\n", ""), "outside a hunk"),
])
def test_a_malformed_patch_is_refused_with_a_reason(tmp_path, text, why):
    path = tmp_path / "bad.diff"
    path.write_text(text)
    with pytest.raises(known_wrong.BadPatch, match=why):
        known_wrong.load(path)
