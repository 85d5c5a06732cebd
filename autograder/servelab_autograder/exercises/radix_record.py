"""Chapters 04 and 05's reference runs and their replay: where every method's cases come from.

:func:`record` runs the reference tree through a workload (``radix_workloads``) and keeps every call of each
exercise (chapter 04's five methods, chapter 05's locks and eviction) with the state it was made in; a call that
calls other exercises gets, in its frame (``replay.Recording``), the answers it was given: ``child_key`` and
``_match_len`` keyed by what they depend on (:func:`pure_key`: the page looked up; the edge and the key's tokens
beside it), ``_split_node`` by the whole tree it was made in (:func:`split_key`), with the tree it left.
:func:`with_replay` puts those answers in place of a tree's own methods in the learner's kernel; a call the
reference never made in that state raises ``replay.Diverged``.
"""

from __future__ import annotations

import json

from servelab.schedulers.radix_cache import RadixCache
from servelab_autograder.exercises.radix_state import (
    node_by_id,
    path_of,
    plain_int,
    plain_ints,
    set_tree,
    show,
    snapshot,
    state_key,
)
from servelab_autograder.exercises.radix_workloads import Allocator, run_ops
from servelab_autograder.exercises.replay import Recording, Replay, digest, once_per_workload

EXERCISES = ("child_key", "_match_len", "_split_node", "match_prefix", "insert")
LOCKS = ("inc_lock_ref", "dec_lock_ref", "evict")   # chapter 05's, recorded in the same runs
PURE = ("child_key", "_match_len")
CALLED = ("child_key", "_match_len", "_split_node")  # the exercises a method calls: a frame's tables, in this order


# ------------------------------------------------------------------------------------------------
# the keys of the calls a method makes


def pure_key(name: str, page_size: int, args: tuple) -> str:
    """What child_key and _match_len depend on: the page looked up; the edge and the key's tokens beside it."""
    if name == "child_key":
        key, offset = args
        return digest(name, page_size, plain_ints(key)[offset:offset + page_size])
    edge, key, offset = args
    return digest(name, page_size, plain_ints(edge), plain_ints(key)[offset:offset + len(edge)])


def split_key(state: dict, child_id, split_len) -> str:
    """What a split depends on: the whole tree it is made in, the node and where the edge is cut."""
    return digest("_split_node", state_key(state), plain_int(child_id), plain_int(split_len))

# ------------------------------------------------------------------------------------------------
# replaying the reference's calls of the other exercises (the learner's kernel)


def with_replay(cache, replay: dict, names=CALLED) -> Replay:
    """Answer ``cache``'s calls of ``names`` from ``replay`` (a frame's tables); returns the Replay, which keeps the
    first divergence even when the code under test catches the exception."""
    answers = Replay(replay)

    def diverge(call: str):
        answers.diverge(call, lambda: snapshot(cache))

    def child_key(key, offset=0):
        entry = answers.get("child_key", pure_key("child_key", cache.page_size, (key, offset)))
        if entry is None:
            diverge(f"child_key(key={show(plain_ints(key))}, offset={offset!r})")
        return entry

    def _match_len(edge, key, offset):
        entry = answers.get("_match_len", pure_key("_match_len", cache.page_size, (edge, key, offset)))
        if entry is None:
            diverge(f"_match_len(edge={show(plain_ints(edge))}, key={show(plain_ints(key))}, offset={offset!r})")
        return entry

    def _split_node(child, split_len):
        where = path_of(cache, child)
        entry = answers.get("_split_node", split_key(snapshot(cache), getattr(child, "id", None), split_len))
        if entry is None:
            diverge(f"_split_node(the node {show(where) if isinstance(where, list) else where}, {split_len!r})")
        set_tree(cache, entry["after"])
        return node_by_id(cache, entry["result"])

    for name, fn in (("child_key", child_key), ("_match_len", _match_len), ("_split_node", _split_node)):
        if name in names:
            setattr(cache, name, fn)
    return answers


# ------------------------------------------------------------------------------------------------
# the reference's runs: where the cases come from (the learner's lab and the grader; never the sandbox)


class _Recorder(Recording):
    """Every call of every exercise in one reference run, with the state it was made in; for a method that calls
    other exercises, the replay of those calls."""

    def __init__(self):
        super().__init__((*EXERCISES, *LOCKS))
        self.where = ""
        self.seen: set = set()

    def pure(self, cache, name: str, args: tuple, out) -> None:
        case = (cache.page_size, *[plain_ints(a) if isinstance(a, tuple | list) else a for a in args])
        key = json.dumps([name, case])
        if key not in self.seen:
            self.seen.add(key)
            self.cases[name].append(case)
        self.note(name, pure_key(name, cache.page_size, args), out)

    def stateful(self, cache, name: str, run, text: str, args: tuple, split=None):
        before = snapshot(cache)
        where = f"{self.where} (page_size {cache.page_size})"
        if self.frames:
            where += f", inside {self.frames[-1].call}"
        with self.frame(text, CALLED) as frame:
            try:
                out = run()
            finally:
                replay = frame.tables
                self.cases[name].append((where, before, *args, replay) if name in EXERCISES
                                        else (where, before, *args))
        if split is not None:
            self.note("_split_node", split_key(before, split[0].id, split[1]), {
                "before": before, "after": snapshot(cache), "result": out.id, "child": split[0].id,
                "split_len": split[1]})
        return out


def _recording_class(rec: _Recorder) -> type:
    base = RadixCache

    class Recording(base):
        def child_key(self, key, offset=0):
            out = base.child_key(self, key, offset)
            rec.pure(self, "child_key", (key, offset), out)
            return out

        def _match_len(self, edge, key, offset):
            out = base._match_len(self, edge, key, offset)
            rec.pure(self, "_match_len", (edge, key, offset), out)
            return out

        def _split_node(self, child, split_len):
            return rec.stateful(self, "_split_node", lambda: base._split_node(self, child, split_len),
                                f"_split_node(the node {show(path_of(self, child))}, {split_len})",
                                (child.id, split_len), split=(child, split_len))

        def match_prefix(self, key):
            return rec.stateful(self, "match_prefix", lambda: base.match_prefix(self, key),
                                f"match_prefix({show(key)})", (list(key),))

        def insert(self, key, value):
            return rec.stateful(self, "insert", lambda: base.insert(self, key, value),
                                f"insert({show(key)}, ...)", (list(key), list(value)))

        def inc_lock_ref(self, node):
            return rec.stateful(self, "inc_lock_ref", lambda: base.inc_lock_ref(self, node), "inc_lock_ref",
                                (node.id,))

        def dec_lock_ref(self, node):
            return rec.stateful(self, "dec_lock_ref", lambda: base.dec_lock_ref(self, node), "dec_lock_ref",
                                (node.id,))

        def evict(self, num_tokens):
            return rec.stateful(self, "evict", lambda: base.evict(self, num_tokens), "evict", (num_tokens,))

    return Recording

@once_per_workload
def record(work: dict) -> dict:
    """A run of the reference through ``work``: every call of each exercise (and of chapter 05's locks and
    eviction) with the state it was made in, each with the replay it needs. Made once per workload."""
    rec = _Recorder()
    cache = _recording_class(rec)(page_size=work["page_size"], eviction_policy=work["policy"],
                                  token_to_kv_pool_allocator=Allocator())
    if "start" in work:
        set_tree(cache, work["start"])

    def before(k, _):
        rec.where = f"operation {k} of '{work['label']}'"

    run_ops(cache, work["ops"], before)
    return rec.cases


def cases_of(exercise: str, workloads) -> list[tuple]:
    """The cases of ``exercise`` (a method name, or "RadixCache" for the whole class) from reference runs."""
    if exercise == "RadixCache":
        return [(w["label"], w) for w in workloads]
    out, seen = [], set()
    for w in workloads:
        for case in record(w)[exercise]:
            if exercise in PURE:
                key = json.dumps(case)
                if key in seen:
                    continue
                seen.add(key)
            out.append(tuple(case))
    return out


__all__ = ["CALLED", "EXERCISES", "LOCKS", "PURE", "cases_of", "pure_key", "record", "split_key", "with_replay"]
