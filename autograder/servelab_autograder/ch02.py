"""Hidden-test helpers for ``ch02_nanovllm_scheduler``.

The learner writes nano-vllm's scheduler piece by piece: ``needs_new_block``, ``preempt``, ``schedule``,
``postprocess`` and the prefix cache's ``can_allocate``. Each check combines the learner's method with the
reference (:mod:`servelab.scheduler`) for everything else, runs it in lockstep with the reference on the same
workload and compares the two after every ``schedule()`` and every ``postprocess()``: the step's kind and
batch, the waiting and running queues, the free list, every sequence's length, cached and scheduled counts,
block table, status and flags, the generated tokens and (prefix caching on) every block's hash and
reference count. The first difference is reported in the learner's terms: the step, what they scheduled,
what the reference scheduled, the queues before the step, the scenario, and the name of the pitfall that
explains it when one does.

Workloads: the lesson's cases (the A/B/C shape table and the tight-memory loop), one scenario per named
pitfall, and many seeded random workloads (prompts with shared prefixes, arrivals between steps, random
budgets, ``max_num_seqs`` and block sizes 1-8, prefix caching on and off, some requests stopping on eos).

Everything the learner's code produced is converted to plain ``int`` / ``bool`` / ``str`` / lists before it
is compared. Failures raise ``AssertionError`` explicitly (the checks also work under ``python -O``).
:func:`diagnose` returns the message a check would raise without raising, for visible asserts.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import random
from collections.abc import Callable
from dataclasses import dataclass

import servelab.scheduler as ref
from servelab.engine import Engine, expected, fake_model
from servelab.scheduler import BlockManager, SamplingParams, Scheduler, Sequence, SequenceStatus
from servelab_autograder import common

__all__ = [
    "DRILLS",
    "PITFALLS",
    "check_can_allocate",
    "check_drills",
    "check_lesson_step2",
    "check_needs_new_block",
    "check_postprocess",
    "check_preempt",
    "check_schedule",
    "compare_lesson_step2",
    "diagnose",
]

# Every pitfall the chapter names, in the words of its "Common pitfalls" list. Each known-wrong submission
# in autograder/known_wrong/ch02_nanovllm_scheduler/ produces one of these messages.
PITFALLS = {
    "mid_chunk_append": "Pitfall: the sampled token was appended after a mid-chunk prefill. A prefill step that "
    "ends inside the sequence samples at a prompt position; postprocess must skip it while "
    "num_cached_tokens < num_tokens.",
    "chunk_later_prefill": "Pitfall: a prefill other than the first was chunked. Only the first prefill of a "
    "step may be cut; a later one that does not fit in what is left of the budget waits for the next step.",
    "later_prefill_over_budget": "Pitfall: a later prefill jumped the token budget. A second or later prefill "
    "that does not fit in what is left of max_num_batched_tokens must wait (break), not run whole.",
    "skip_ahead": "Pitfall: a later request jumped the head of waiting. Prefill is first come, first served: "
    "when the head cannot be admitted, nobody behind it is.",
    "mixed_decode": "Pitfall: decodes were mixed into a prefill step. When any prefill is scheduled, "
    "schedule() returns at once with is_prefill=True; decodes wait for a step without prefill.",
    "decode_before_prefill": "Pitfall: a decode step ran while a waiting request could be prefilled. Prefill "
    "comes first.",
    "preempt_head": "Pitfall: preempted the head of running instead of the tail. Under memory pressure the "
    "most recently admitted sequence goes first (running.pop()).",
    "preempt_to_back": "Pitfall: a preempted sequence went to the back of waiting. It must be the first to "
    "resume (waiting.appendleft).",
    "preempt_no_free": "Pitfall: preempt did not free the sequence's blocks. Recompute-style preemption drops "
    "all of its KV (block_manager.deallocate).",
    "preempt_state": "Pitfall: preempt must leave the sequence WAITING with is_prefill = True, back in the "
    "waiting queue.",
    "finish_no_free": "Pitfall: a finished sequence's blocks were not freed. Deallocate a sequence when it "
    "finishes.",
    "finish_not_removed": "Pitfall: a finished sequence stayed in running. Remove it when it finishes.",
    "finish_rule": "Pitfall: a sequence finishes when it has generated max_tokens tokens, or sampled eos "
    "while ignore_eos is False, and not otherwise.",
    "counters": "Pitfall: postprocess must add num_scheduled_tokens to num_cached_tokens and then set "
    "num_scheduled_tokens back to 0, for every scheduled sequence.",
    "hash_blocks": "Pitfall: finished blocks were not registered in the prefix cache. postprocess calls "
    "block_manager.hash_blocks(seq) for every scheduled sequence, before num_cached_tokens advances.",
    "postprocess_return": "Pitfall: postprocess must return the list of sequences that finished this step, in "
    "batch order.",
    "decode_rule_mod0": "Pitfall: the decode rule len % block_size == 0 is off by one. The newest token sits "
    "at position len - 1; it opens a block when len % block_size == 1 (token 5 at block size 4), not when "
    "the last block is full.",
    "decode_rule_mod1": "Pitfall: len % block_size == 1 never fires at block size 1. Every token opens a "
    "block there; (len - 1) % block_size == 0 is right for every block size.",
    "can_allocate_last_block": "Pitfall: can_allocate checked the last block. The last block is never a hit, "
    "even when full, so at least one token is computed and the model produces logits.",
    "unchained_hashes": "Pitfall: block hashes are not chained. Each block's hash must include the previous "
    "block's hash, so a hit means the whole prefix matches, not just this block's tokens at any position.",
    "freed_hits_free": "Pitfall: hits on freed blocks were counted as free of cost. A hit on a block that is "
    "in use costs nothing, but a hit on a freed block still takes an entry out of the free list.",
}

_short = common.short_repr(16, 80)

_MAX_STEPS = 5000          # more steps than any case needs: the reference finishes every case well before
_RANDOM_SEED = 2024        # the seeded random workloads; every check draws the same ones


# --------------------------------------------------------------------------------------------------------
# workloads


@dataclass(frozen=True)
class _Req:
    name: str
    prompt: tuple[int, ...]
    max_tokens: int
    ignore_eos: bool = True


@dataclass(frozen=True)
class _Case:
    label: str
    num_blocks: int
    block_size: int
    budget: int
    max_num_seqs: int = 8
    eos: int = -1
    cache: bool = False
    arrivals: tuple[tuple[int, tuple[_Req, ...]], ...] = ()

    def with_cache(self, cache: bool) -> _Case:
        return _Case(f"{self.label}, prefix caching {'on' if cache else 'off'}", self.num_blocks,
                     self.block_size, self.budget, self.max_num_seqs, self.eos, cache, self.arrivals)

    def describe(self) -> str:
        head = (f"Scheduler(num_blocks={self.num_blocks}, block_size={self.block_size}, "
                f"max_num_batched_tokens={self.budget}, max_num_seqs={self.max_num_seqs}, eos={self.eos}, "
                f"enable_prefix_caching={self.cache})")
        reqs = []
        for step, group in self.arrivals:
            for r in group:
                stop = "" if r.ignore_eos else ", stops at eos"
                reqs.append(f"    {r.name}: prompt {_short.repr(list(r.prompt))} ({_n(len(r.prompt), 'token')}), "
                            f"max_tokens={r.max_tokens}{stop}, added before step {step}")
        return head + "\n  requests:\n" + "\n".join(reqs)


def _n(k, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


def _req(name, n_or_tokens, max_tokens, ignore_eos=True):
    toks = list(range(n_or_tokens)) if isinstance(n_or_tokens, int) else list(n_or_tokens)
    return _Req(name, tuple(toks), max_tokens, ignore_eos)


def _arrivals(*groups):
    """_arrivals((0, [req, ...]), (3, [req])) -> the frozen form."""
    return tuple((step, tuple(reqs)) for step, reqs in groups)


def _lesson_abc() -> _Case:
    reqs = [_req(n, [ord(n) * 100 + j for j in range(L)], 4) for n, L in [("A", 6), ("B", 5), ("C", 3)]]
    return _Case("the lesson's A/B/C shape table", 5, 4, 8, arrivals=_arrivals((0, reqs)))


def _lesson_tight(bs: int) -> _Case:
    prompts = [list(range(i * 10000, i * 10000 + n)) for i, n in enumerate([3 * bs, 1, bs + 1, 2 * bs - 1, bs])]
    reqs = [_req(str(i), p, bs + 2) for i, p in enumerate(prompts)]
    return _Case(f"the lesson's tight-memory loop at block size {bs}", 5, bs, bs + bs // 2,
                 arrivals=_arrivals((0, reqs)))


def _pitfall_cases() -> list[_Case]:
    """One small scenario per scheduler pitfall (prefix caching off)."""
    four = [_req(n, [ord(n) * 10 + j for j in range(4)], 3) for n in "ABCD"]
    eos_prompt = [5, 6, 7]
    return [
        # B does not fit in what A leaves of the budget: it must wait, neither cut nor run whole
        _Case("a second prefill that does not fit in the budget", 8, 4, 8,
              arrivals=_arrivals((0, [_req("A", 6, 2), _req("B", [9] * 5, 2)]))),
        # A is decoding when B arrives: the step must be B's prefill alone
        _Case("a request arriving while another decodes", 8, 4, 8,
              arrivals=_arrivals((0, [_req("A", 3, 3)]), (1, [_req("B", [7, 8, 9], 2)]))),
        # 10 tokens, budget 6: a mid-chunk step, then the rest of the prompt
        _Case("a prompt longer than the budget (mid-chunk step)", 4, 4, 6,
              arrivals=_arrivals((0, [_req("A", 10, 2)]))),
        # running [A, B, C, D], no free block, every one needs a block: D, then C must be preempted;
        # E (2 blocks) waits the whole time, so the preempted ones must go in front of it
        _Case("memory runs out with four sequences decoding", 4, 4, 16,
              arrivals=_arrivals((0, four), (1, [_req("E", [1, 2, 3, 4, 5], 1)]))),
        # A stops at eos after 2 tokens; B ignores eos
        _Case("a request that stops at eos", 6, 4, 8, eos=expected(eos_prompt, 3)[1],
              arrivals=_arrivals((0, [_req("A", eos_prompt, 3, ignore_eos=False),
                                      _req("B", eos_prompt, 3)]))),
        # B, the head of waiting, needs 3 blocks and 2 are free; C behind it would fit but must not jump ahead
        _Case("the head of waiting does not fit yet", 5, 4, 16,
              arrivals=_arrivals((0, [_req("A", 9, 4)]), (1, [_req("B", 9, 3), _req("C", 2, 1)]))),
    ]


def _cache_cases() -> list[_Case]:
    """Prefix-cache scenarios (caching on): the three phenomena and one per can_allocate pitfall."""
    system = list(range(100, 110))
    return [
        _Case("a shared 10-token system prompt", 10, 4, 64, cache=True,
              arrivals=_arrivals((0, [_req("A", system + [1, 2], 1)]), (1, [_req("B", system + [7, 8, 9], 2)]))),
        _Case("the same 8-token prompt twice (the last block is full)", 10, 4, 64, cache=True,
              arrivals=_arrivals((0, [_req("A", 8, 1)]), (1, [_req("B", 8, 1)]))),
        _Case("two requests with the same prompt in the same step", 10, 4, 64, cache=True,
              arrivals=_arrivals((0, [_req("A", 9, 2), _req("B", 9, 2)]), (1, [_req("C", 9, 2)]))),
        _Case("a preempted sequence comes back", 5, 4, 16, cache=True,
              arrivals=_arrivals((0, [_req("A", 7, 3), _req("B", list(range(50, 58)), 3)]))),
        # [3, 4] is cached as a first block (of X2) and [1, 2] as a first block (of X1); in B [3, 4] is the
        # second block, after [1, 2]: with chained hashes it is not a hit
        _Case("a block cached at another position", 10, 2, 64, cache=True,
              arrivals=_arrivals((0, [_req("X1", [1, 2, 5], 1), _req("X2", [3, 4, 5], 1)]),
                                 (1, [_req("B", [1, 2, 3, 4, 9], 1)]))),
        # A's two hashed blocks are freed; B holds the third; C hits both freed blocks but needs 3 free
        # entries (2 cached + 1 fresh) and only 2 are free: C must wait until B finishes
        _Case("hits on freed blocks when the free list is short", 3, 2, 64, cache=True,
              arrivals=_arrivals((0, [_req("A", [1, 2, 3, 4, 5], 1)]), (1, [_req("B", [7], 3)]),
                                 (2, [_req("C", [1, 2, 3, 4, 9], 1)]))),
    ]


@functools.cache
def _random_cases(seed: int, n: int, cache: bool) -> tuple[_Case, ...]:
    rng = random.Random(seed)
    cases: list[_Case] = []
    while len(cases) < n:
        bs = rng.randint(1, 8)
        nb = rng.randint(3, 12)
        budget, mns = rng.randint(1, 3 * bs + 4), rng.randint(1, 5)
        prefix = [rng.randint(0, 3) for _ in range(rng.randint(0, 3 * bs))]
        groups: dict[int, list[_Req]] = {}
        for i in range(rng.randint(1, 6)):
            shared = prefix[:rng.randint(0, len(prefix))] if rng.random() < 0.7 else []
            prompt = shared + [rng.randint(0, 3) for _ in range(rng.randint(1, 2 * bs))]
            mt = rng.randint(1, 2 * bs)
            if -(-(len(prompt) + mt - 1) // bs) > nb:
                continue
            groups.setdefault(rng.choice([0, 0, 1, 2, 3, 5, 8]), []).append(
                _Req(f"r{i}", tuple(prompt), mt, rng.random() < 0.75))
        if not groups:
            continue
        eos = -1
        stoppers = [r for g in groups.values() for r in g if not r.ignore_eos]
        if stoppers and rng.random() < 0.8:
            r = rng.choice(stoppers)
            eos = expected(list(r.prompt), r.max_tokens)[rng.randrange(r.max_tokens)]
        case = _Case(f"random workload {len(cases)} (seed {seed}, caching {'on' if cache else 'off'})",
                     nb, bs, budget, mns, eos, cache, tuple(sorted((k, tuple(v)) for k, v in groups.items())))
        if _reference_finishes(case):
            cases.append(case)
    return tuple(cases)


def _reference_finishes(case: _Case) -> bool:
    """False when the reference finds nothing to schedule at some step (the requests do not fit)."""
    side = _Side(case, _make_ref)
    for _ in range(_MAX_STEPS):
        side.add_due()
        if side.done():
            return True
        try:
            seqs, is_prefill = side.sch.schedule()
        except RuntimeError:
            return False
        if not seqs:
            return False
        side.sch.postprocess(seqs, fake_model(seqs), is_prefill)
        side.steps += 1
    return False


# --------------------------------------------------------------------------------------------------------
# plain values out of whatever the learner's code left behind


def _plain(x):
    if isinstance(x, bool):
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, SequenceStatus):
        return x.name
    return repr(x) if not isinstance(x, str) else x


def _name(s) -> str:
    return str(s.name) if isinstance(s, Sequence) else f"<{_short.repr(s)}>"


def _names(items) -> list[str]:
    return [_name(s) for s in items]


@dataclass
class _Snap:
    waiting: list[str]
    running: list[str]
    free: list
    seqs: dict        # name -> (len, cached, scheduled, block table, status, is_prefill)
    tokens: dict      # name -> generated tokens (only sequences of the step's batch)
    blocks: tuple | None   # (hash, ref_count) per physical block, prefix caching on
    kind: str | None = None          # after schedule(): "prefill" / "decode"
    batch: list | None = None        # after schedule(): [(name, num_scheduled_tokens)]
    finished: list | None = None     # after postprocess(): names it returned


_SEQ_FIELDS = ("length", "num_cached_tokens", "num_scheduled_tokens", "block_table", "status", "is_prefill")


def _seq_state(s: Sequence) -> tuple:
    try:
        table = [_plain(b) for b in s.block_table]
    except TypeError:
        table = [_plain(s.block_table)]
    return (len(s.token_ids), _plain(s.num_cached_tokens), _plain(s.num_scheduled_tokens), table,
            _plain(s.status), _plain(s.is_prefill))


def _snap(side: _Side, batch=None, kind=None, finished=None) -> _Snap:
    sch = side.sch
    bm = sch.block_manager
    names = [] if batch is None else _names(batch)
    blocks = tuple((b.hash, b.ref_count) for b in bm.blocks) if bm.enable_prefix_caching else None
    return _Snap(
        waiting=_names(sch.waiting), running=_names(sch.running), free=[_plain(b) for b in bm.free_block_ids],
        seqs={n: _seq_state(s) for n, s in side.seqs.items()},
        tokens={n: [_plain(t) for t in side.seqs[n].completion_token_ids] for n in names if n in side.seqs},
        blocks=blocks, kind=kind,
        batch=None if batch is None else [(_name(s), _plain(getattr(s, "num_scheduled_tokens", None)))
                                          for s in batch],
        finished=None if finished is None else _names(finished))


def _batch_text(kind, batch) -> str:
    items = " ".join(f"{n}:{t}" for n, t in batch) if batch else "nothing"
    return f"{kind} {items}"


def _queues_text(s: _Snap) -> str:
    return f"waiting [{', '.join(s.waiting)}], running [{', '.join(s.running)}], free blocks {s.free}"


def _seq_text(name: str, st: tuple) -> str:
    length, cached, sched, table, status, is_prefill = st
    return (f"{name}: {_n(length, 'token')}, {cached} cached, {sched} scheduled, blocks {table}, {status}"
            f"{', is_prefill' if is_prefill is True else ''}")


# --------------------------------------------------------------------------------------------------------
# running a scheduler on a case


class _Side:
    """One scheduler driven through a case: arrivals are added before the step they are due (as Engine.run
    does: an idle scheduler takes the next arrivals at once)."""

    def __init__(self, case: _Case, make: Callable[[_Case], Scheduler]):
        self.case = case
        self.sch = make(case)
        self.seqs: dict[str, Sequence] = {}
        self.pending = {k: list(v) for k, v in case.arrivals}
        self.steps = 0

    def add_due(self):
        if not self.pending:
            return
        due = [k for k in self.pending if k <= self.steps]
        if not due and self.sch.is_finished():
            due = [min(self.pending)]
        for k in sorted(due):
            for r in self.pending.pop(k):
                seq = Sequence(list(r.prompt), SamplingParams(max_tokens=r.max_tokens, ignore_eos=r.ignore_eos),
                               name=r.name)
                self.sch.add(seq)
                self.seqs[r.name] = seq

    def done(self) -> bool:
        return not self.pending and self.sch.is_finished()


def _make_ref(case: _Case) -> Scheduler:
    return Scheduler(case.num_blocks, case.block_size, case.budget, case.max_num_seqs, case.eos, case.cache)


_LearnerError = common.LearnerError


def _attempt(fn, what: str):
    try:
        return fn()
    except _ReferenceCalled:
        raise
    except Exception as e:  # noqa: BLE001 - anything the learner's code raises is reported, not re-raised
        raise common.learner_error(what, e) from None


def _unpack_schedule(result, side: _Side):
    if not isinstance(result, tuple) or len(result) != 2:
        raise _LearnerError(f"schedule() returned {_short.repr(result)}; it must return a tuple "
                            "(list of scheduled sequences, is_prefill)")
    seqs, flag = result
    if not isinstance(seqs, list):
        raise _LearnerError(f"schedule() returned {type(seqs).__name__} {_short.repr(seqs)} as its batch; "
                            "return a list of sequences")
    known = {id(s) for s in side.seqs.values()}
    for s in seqs:
        if id(s) not in known:
            raise _LearnerError(f"schedule() returned {_short.repr(s)} in its batch, which is not one of the "
                                "sequences added to the scheduler")
    if not isinstance(flag, bool):
        raise _LearnerError(f"schedule() returned is_prefill={_short.repr(flag)}; it must be True or False")
    return seqs, flag


def _unpack_finished(result):
    if not isinstance(result, list) or any(not isinstance(s, Sequence) for s in result):
        raise _LearnerError(f"postprocess() returned {_short.repr(result)}; it must return the list of "
                            "sequences that finished this step (an empty list when none did)")
    return result


# --------------------------------------------------------------------------------------------------------
# the learner's code must be the learner's: neither servelab's function objects nor calls into them


class _ReferenceCalled(AssertionError):
    pass


# learner function -> what it replaces in servelab.scheduler
_REPLACES = {"schedule": "Scheduler.schedule", "preempt": "Scheduler.preempt", "postprocess": "Scheduler.postprocess",
             "can_allocate": "BlockManager.can_allocate", "needs_new_block": "needs_new_block"}
# learner function -> {code object of the reference it must not call: its name}
_FORBIDDEN = {
    "schedule": common.codes(Scheduler.schedule),
    "preempt": common.codes(Scheduler.preempt),
    "postprocess": common.codes(Scheduler.postprocess),
    "can_allocate": common.codes(BlockManager.can_allocate, BlockManager._cached_prefix),
    "needs_new_block": common.codes(ref.needs_new_block),
}
_WATCH = common.ReferenceWatch(_FORBIDDEN, _ReferenceCalled)
_wrap = _WATCH.wrap


def _reject_reference(fn, key: str) -> None:
    common.reject_reference(fn, key, _FORBIDDEN[key], _short, f"servelab.scheduler.{_REPLACES[key]}")


def _no_reference_calls():
    """Raise if the learner's code calls the reference it is being compared with (super(), an import of
    servelab.scheduler's function, a copy of its code)."""
    return _WATCH.no_calls("servelab.scheduler")


# --------------------------------------------------------------------------------------------------------
# comparing two snapshots, and naming the pitfall behind a difference


def _first_diff(mine: _Snap, want: _Snap, phase: str) -> str | None:
    if phase == "schedule":
        names = [n for n, _ in mine.batch]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            return (f"schedule() returned {_batch_text(mine.kind, mine.batch)}, with {', '.join(twice)} more than "
                    f"once; nano-vllm schedules {_batch_text(want.kind, want.batch)}")
        if mine.kind != want.kind or mine.batch != want.batch:
            return (f"schedule() returned {_batch_text(mine.kind, mine.batch)}; nano-vllm schedules "
                    f"{_batch_text(want.kind, want.batch)}")
    else:
        for name, toks in want.tokens.items():
            got = mine.tokens.get(name)
            if got != toks:
                return f"{name}'s generated tokens are {got}; nano-vllm's are {toks}"
    if mine.waiting != want.waiting:
        return f"waiting is [{', '.join(mine.waiting)}]; nano-vllm's is [{', '.join(want.waiting)}]"
    if mine.running != want.running:
        return f"running is [{', '.join(mine.running)}]; nano-vllm's is [{', '.join(want.running)}]"
    if mine.free != want.free:
        return f"the free list is {mine.free}; nano-vllm's is {want.free}"
    for name, st in want.seqs.items():
        got = mine.seqs.get(name)
        if got != st:
            i = next(i for i, (a, b) in enumerate(zip(got, st)) if a != b)
            return f"{name}.{_SEQ_FIELDS[i]} is {got[i]}; nano-vllm's is {st[i]}"
    if mine.blocks != want.blocks:
        i = next(i for i, (a, b) in enumerate(zip(mine.blocks, want.blocks)) if a != b)
        (mh, mr), (wh, wr) = mine.blocks[i], want.blocks[i]
        if mr != wr:
            return f"physical block {i} has ref_count {mr}; nano-vllm's has {wr}"
        state = lambda h: "no hash" if h == -1 else "a hash"
        return (f"physical block {i} holds {state(mh)}{' (a different one)' if mh != -1 and wh != -1 else ''}; "
                f"nano-vllm's holds {state(wh)}")
    if phase == "postprocess" and mine.finished != want.finished:
        return f"postprocess() returned [{', '.join(mine.finished)}]; nano-vllm's returns [{', '.join(want.finished)}]"
    return None


def _is_suffix(part: list, whole: list) -> bool:
    return not part or whole[-len(part):] == part


def _schedule_pitfall(case: _Case, pre: _Snap, mine: _Snap, want: _Snap) -> str | None:
    names = [n for n, _ in mine.batch]
    if len(set(names)) < len(names):
        return None
    was_running = set(pre.running)
    if mine.kind == "prefill" and any(n in was_running for n in names):
        return "mixed_decode"
    if mine.kind == "decode" and any(n not in was_running for n in names):
        return "mixed_decode"
    if mine.kind == "decode" and want.kind == "prefill":
        return "decode_before_prefill"
    if mine.kind == "prefill":
        if names != pre.waiting[:len(names)]:
            return "skip_ahead"
        for i, (n, t) in enumerate(mine.batch):
            length, cached = mine.seqs[n][0], mine.seqs[n][1]
            if i > 0 and isinstance(t, int) and isinstance(cached, int) and cached + t < length:
                return "chunk_later_prefill"
        total = sum(t for _, t in mine.batch if isinstance(t, int))
        if len(names) > 1 and total > case.budget:
            return "later_prefill_over_budget"
    # preemption: who was preempted, where they went, what they kept
    preempted = [n for n in pre.running if n in mine.waiting or mine.seqs[n][4] == "WAITING"]
    if preempted and not _is_suffix(preempted, pre.running):
        return "preempt_head"
    for n in preempted:
        length, cached, sched, table, status, is_prefill = mine.seqs[n]
        if table or len(mine.free) < len(want.free):
            return "preempt_no_free"
    if preempted:
        old_waiting = [n for n in pre.waiting if n in mine.waiting]
        if any(mine.waiting.index(p) > mine.waiting.index(w) for p in preempted if p in mine.waiting
               for w in old_waiting):
            return "preempt_to_back"
        for n in preempted:
            status, is_prefill = mine.seqs[n][4:6]
            if n not in mine.waiting or n in mine.running or status != "WAITING" or is_prefill is not True:
                return "preempt_state"
    return None


def _postprocess_pitfall(case: _Case, mid: _Snap, mine: _Snap, want: _Snap) -> str | None:
    batch = [n for n, _ in mid.batch]
    for n in batch:
        before, got, exp = mid.seqs[n], mine.seqs[n], want.seqs[n]
        if mid.kind == "prefill" and exp[0] == before[0] and got[0] == before[0] + 1:
            return "mid_chunk_append"
    if mine.blocks != want.blocks and mine.free == want.free:
        return "hash_blocks"
    for n in batch:
        got, exp = mine.seqs[n], want.seqs[n]
        if exp[4] == "FINISHED" and got[4] == "FINISHED":
            if got[3] or len(mine.free) < len(want.free):
                return "finish_no_free"
            if n in mine.running:
                return "finish_not_removed"
        elif (exp[4] == "FINISHED") != (got[4] == "FINISHED") and got[0] == exp[0]:
            return "finish_rule"
    for n in batch:
        got, exp = mine.seqs[n], want.seqs[n]
        if got[1:3] != exp[1:3]:
            return "counters"
    if mine.finished != want.finished and mine.seqs == want.seqs:
        return "postprocess_return"
    return None


# --------------------------------------------------------------------------------------------------------
# the lockstep comparison


def _diverged(who: str, case: _Case, step: int, phase: str, pre: _Snap, body: str, pitfall: str | None,
              history: list[str], mine: _Snap | None = None, want: _Snap | None = None) -> AssertionError:
    # the pitfall, when one explains the difference, comes first: graders show a failure's first line
    lines = [PITFALLS[pitfall]] if pitfall else []
    lines += [f"{who} differs from nano-vllm's at step {step} ({phase}) of the scenario '{case.label}':",
             f"  {case.describe()}",
             f"Before step {step}: {_queues_text(pre)}"]
    lines += [f"    {_seq_text(n, st)}" for n, st in pre.seqs.items() if st[4] != "FINISHED"]
    if mine is not None and want is not None:
        lines += [f"Yours:     {_batch_text(mine.kind, mine.batch)}; after {phase}(): {_queues_text(mine)}",
                  f"nano-vllm: {_batch_text(want.kind, want.batch)}; after {phase}(): {_queues_text(want)}"]
    lines.append(f"First difference: {body}")
    if history:
        lines.append("Steps before (the same on both sides):")
        lines += [f"    {h}" for h in history[-6:]]
    return AssertionError("\n".join(lines))


def _lockstep(case: _Case, make_mine: Callable[[_Case], Scheduler], who: str) -> None:
    """Run the learner's scheduler and the reference side by side; raise at the first difference."""
    mine, want = _Side(case, make_mine), _Side(case, _make_ref)
    history: list[str] = []
    for step in range(_MAX_STEPS):
        want.add_due()
        try:
            _attempt(mine.add_due, "adding a request (Scheduler.add)")
        except _LearnerError as e:
            raise _diverged(who, case, step, "add", _snap(want), str(e), None, history) from None
        if want.done():
            return
        pre = _snap(want)
        try:
            w_seqs, w_prefill = want.sch.schedule()
        except RuntimeError:
            return   # nothing fits: the reference cannot run this workload, so it tests nothing
        if not w_seqs:
            return   # the same, under python -O (the reference's assert is stripped)
        w_mid = _snap(want, w_seqs, "prefill" if w_prefill else "decode")
        try:
            m_seqs, m_prefill = _unpack_schedule(_attempt(mine.sch.schedule, "schedule()"), mine)
        except _LearnerError as e:
            raise _diverged(who, case, step, "schedule", pre, str(e), None, history) from None
        m_mid = _snap(mine, m_seqs, "prefill" if m_prefill else "decode")
        body = _first_diff(m_mid, w_mid, "schedule")
        if body:
            raise _diverged(who, case, step, "schedule", pre, body, _schedule_pitfall(case, pre, m_mid, w_mid),
                            history, m_mid, w_mid)
        w_fin = want.sch.postprocess(w_seqs, fake_model(w_seqs), w_prefill)
        w_after = _snap(want, w_seqs, w_mid.kind, w_fin)
        w_after.batch = w_mid.batch
        try:
            tokens = fake_model(m_seqs)
            call = functools.partial(mine.sch.postprocess, m_seqs, tokens, m_prefill)
            m_fin = _unpack_finished(_attempt(call, "postprocess()"))
        except _LearnerError as e:
            pitfall = "hash_blocks" if "(in BlockManager.hash_blocks)" in str(e) else None
            raise _diverged(who, case, step, "postprocess", pre, str(e), pitfall, history) from None
        m_after = _snap(mine, m_seqs, m_mid.kind, m_fin)
        m_after.batch = m_mid.batch
        body = _first_diff(m_after, w_after, "postprocess")
        if body:
            raise _diverged(who, case, step, "postprocess", pre, body,
                            _postprocess_pitfall(case, w_mid, m_after, w_after), history, m_after, w_after)
        history.append(f"step {step}: {_batch_text(w_mid.kind, w_mid.batch)} -> {_queues_text(w_after)}")
        mine.steps += 1
        want.steps += 1
    raise AssertionError(f"the scenario '{case.label}' ran {_MAX_STEPS} steps without finishing")


def _scheduler_class(who: str, **methods) -> type:
    for key, fn in methods.items():
        _reject_reference(fn, key)
    return type(who, (Scheduler,), {key: _wrap(fn, key) for key, fn in methods.items()})


def _run_cases(cls: type, who: str, cases) -> None:
    make = lambda case: cls(case.num_blocks, case.block_size, case.budget, case.max_num_seqs, case.eos,
                            case.cache)
    for i, case in enumerate(cases):
        with _no_reference_calls() if common.watched(i) else contextlib.nullcontext():
            _lockstep(case, make, who)


def _scheduler_cases(n_random: int) -> list[_Case]:
    """The lesson's cases, the pitfall scenarios (caching off and on), the prefix-cache scenarios, then
    n_random seeded random workloads with caching off and as many with caching on."""
    cases = [_lesson_abc(), *(_lesson_tight(bs) for bs in (4, 16))]
    cases += _pitfall_cases()
    cases += [c.with_cache(True) for c in _pitfall_cases()] + _cache_cases()
    cases += _random_cases(_RANDOM_SEED, n_random, False) + _random_cases(_RANDOM_SEED + 1, n_random, True)
    return cases


def check_preempt(preempt) -> None:
    """Hidden test of the preempt exercise: the reference Scheduler with the learner's preempt."""
    cls = _scheduler_class("YourPreempt", preempt=preempt)
    _run_cases(cls, "Your preempt (with nano-vllm's schedule and postprocess)", _scheduler_cases(60))


def check_schedule(schedule, preempt=None) -> None:
    """Hidden test of the schedule exercise: the reference Scheduler with the learner's schedule (and, when
    given, the learner's preempt)."""
    methods = {"schedule": schedule} | ({"preempt": preempt} if preempt is not None else {})
    cls = _scheduler_class("YourSchedule", **methods)
    _run_cases(cls, "Your schedule (with nano-vllm's preempt and postprocess)", _scheduler_cases(150))


def check_postprocess(postprocess) -> None:
    """Hidden test of the postprocess exercise: the reference Scheduler with the learner's postprocess."""
    cls = _scheduler_class("YourPostprocess", postprocess=postprocess)
    _run_cases(cls, "Your postprocess (with nano-vllm's schedule and preempt)", _scheduler_cases(80))


# --------------------------------------------------------------------------------------------------------
# the lesson's Step 2, on the learner's whole Scheduler


def _lesson_step2_asserts(SchedulerClass) -> None:
    """The lesson's Step 2 asserts, on the learner's class with prefix caching off."""

    def Seq(name, token_ids, max_tokens):
        return Sequence(token_ids, SamplingParams(max_tokens=max_tokens, ignore_eos=True), name=name)

    def check(ok, what):
        if not ok:
            raise AssertionError(f"the lesson's Step 2 assert failed: {what}")

    sch = SchedulerClass(num_blocks=5, block_size=4, max_num_batched_tokens=8, enable_prefix_caching=False)
    seqs_all = [Seq(n, [ord(n) * 100 + j for j in range(L)], max_tokens=4) for n, L in [("A", 6), ("B", 5), ("C", 3)]]
    for s in seqs_all:
        sch.add(s)
    trace = []
    while not sch.is_finished() and len(trace) < 100:
        seqs, is_prefill = sch.schedule()
        trace.append(("P" if is_prefill else "D", [(s.name, int(s.num_scheduled_tokens)) for s in seqs],
                      len(sch.block_manager.free_block_ids)))
        sch.postprocess(seqs, fake_model(seqs), is_prefill)
    check(trace == [("P", [("A", 6)], 3), ("P", [("B", 5), ("C", 3)], 0), ("D", [("A", 1), ("B", 1), ("C", 1)], 0),
                    ("D", [("A", 1), ("B", 1)], 1), ("D", [("A", 1), ("B", 1)], 0), ("P", [("C", 5)], 3),
                    ("D", [("C", 1)], 3)], f"the A/B/C trace is {trace}")
    check(all(s.token_ids[s.num_prompt_tokens:] == expected(s.token_ids[:s.num_prompt_tokens], 4) for s in seqs_all),
          "A, B and C must generate what each generates alone")
    check(len(sch.block_manager.free_block_ids) == 5, "all 5 blocks must be free at the end")
    for bs in [4, 16, 256]:
        prompts = [list(range(i * 10000, i * 10000 + n)) for i, n in enumerate([3 * bs, 1, bs + 1, 2 * bs - 1, bs])]
        sch = SchedulerClass(num_blocks=5, block_size=bs, max_num_batched_tokens=bs + bs // 2,
                             enable_prefix_caching=False)
        seqs_all = [Seq(str(i), p, max_tokens=bs + 2) for i, p in enumerate(prompts)]
        for s in seqs_all:
            sch.add(s)
        n_prefill_steps = steps = 0
        while not sch.is_finished() and steps < 5000:
            seqs, is_prefill = sch.schedule()
            check(not is_prefill or sum(s.num_scheduled_tokens for s in seqs) <= bs + bs // 2,
                  f"a prefill step went over the budget at block size {bs}")
            n_prefill_steps += is_prefill
            steps += 1
            sch.postprocess(seqs, fake_model(seqs), is_prefill)
        check(all(s.token_ids[len(p):] == expected(p, bs + 2) for s, p in zip(seqs_all, prompts)),
              f"tight memory at block size {bs}: every request must generate what it generates alone")
        check(len(sch.block_manager.free_block_ids) == 5 and n_prefill_steps > len(prompts),
              f"tight memory at block size {bs}: all blocks free at the end and more prefill steps than prompts")


def _your_scheduler(SchedulerClass) -> type:
    if not (isinstance(SchedulerClass, type) and issubclass(SchedulerClass, Scheduler)):
        raise AssertionError(f"Scheduler is {_short.repr(SchedulerClass)}; run the cell that builds it from "
                             "your schedule, preempt and postprocess")
    methods = {}
    for key in ("schedule", "preempt", "postprocess"):
        fn = getattr(SchedulerClass, key)
        _reject_reference(fn, key)
        methods[key] = _wrap(fn, key)
    return type("YourScheduler", (SchedulerClass,), methods)


_WHO_SCHEDULER = "Your Scheduler (your schedule, preempt and postprocess)"


def compare_lesson_step2(SchedulerClass) -> None:
    """The learner's whole Scheduler step by step against the reference on the lesson's workloads (prefix
    caching off). Raises AssertionError naming the first step that differs; visible in the lesson's cell, so
    that a failure there names the step and the rule before the lesson's own asserts run."""
    _run_cases(_your_scheduler(SchedulerClass), _WHO_SCHEDULER,
               [_lesson_abc(), *(_lesson_tight(bs) for bs in (4, 16, 256))])


def check_lesson_step2(SchedulerClass) -> None:
    """Hidden test of the assembled Scheduler (the learner's schedule, preempt and postprocess) with prefix
    caching off: step by step against the reference on the lesson's cases, the pitfall scenarios and random
    workloads, then the lesson's own asserts."""
    cases = [_lesson_abc(), *(_lesson_tight(bs) for bs in (4, 16, 256)), *_pitfall_cases(),
             *_random_cases(_RANDOM_SEED + 2, 60, False)]
    _run_cases(_your_scheduler(SchedulerClass), _WHO_SCHEDULER, cases)
    _lesson_step2_asserts(SchedulerClass)


# --------------------------------------------------------------------------------------------------------
# needs_new_block


def _rule_cases():
    for bs in [*range(1, 17), 32, 256]:
        for n in range(1, 3 * bs + 3):
            yield n, bs


def check_needs_new_block(fn) -> None:
    """Hidden test of the decode rule: every length 1 .. 3 * block_size + 2 for block sizes 1-16, 32, 256."""
    _reject_reference(fn, "needs_new_block")
    fn = _wrap(fn, "needs_new_block")
    table = {}
    with _no_reference_calls():
        for n, bs in _rule_cases():
            try:
                got = fn(n, bs)
            except NotImplementedError:
                raise AssertionError(common.not_filled("needs_new_block")) from None
            except Exception as e:  # noqa: BLE001
                raise AssertionError(f"needs_new_block({n}, {bs}) raised {type(e).__name__}: {e}") from None
            if not isinstance(got, bool):
                raise AssertionError(f"needs_new_block({n}, {bs}) returned {_short.repr(got)} "
                                     f"({type(got).__name__}); return True or False")
            table[n, bs] = got
    wrong = [(n, bs) for (n, bs), got in table.items() if got != ref.needs_new_block(n, bs)]
    if wrong:
        n, bs = min(wrong, key=lambda c: (c[1] != 4, c[0] <= c[1]))   # prefer block size 4, past block 0
        got, want = table[n, bs], ref.needs_new_block(n, bs)
        pos = n - 1
        msg = (f"needs_new_block({n}, {bs}) returned {got}; expected {want}. In decode the newest token sits at "
               f"position {pos} (0-based); block {pos // bs} holds positions {pos // bs * bs}.."
               f"{pos // bs * bs + bs - 1}, so this token {'opens' if want else 'does not open'} a block.")
        if all(g == (m % b == 0) for (m, b), g in table.items()):
            msg = PITFALLS["decode_rule_mod0"] + "\n" + msg
        elif all(g == (m % b == 1) for (m, b), g in table.items()):
            msg = PITFALLS["decode_rule_mod1"] + "\n" + msg
        raise AssertionError(msg)


# --------------------------------------------------------------------------------------------------------
# can_allocate: the prefix cache's admission test


def _can_allocate_model(bm: BlockManager, seq: Sequence, last=False, chained=True, freed_cost=True) -> int:
    """nano-vllm's can_allocate, or the result of a known mistake (for naming it)."""
    h, hits, new = -1, 0, seq.num_blocks
    for i in range(seq.num_blocks if last else seq.num_blocks - 1):
        toks = seq.block(i)
        h = bm.compute_hash(toks, h if chained else -1)
        bid = bm.hash_to_block_id.get(h, -1)
        if bid == -1 or bm.blocks[bid].token_ids != toks:
            break
        hits += 1
        if bid in bm.used_block_ids or not freed_cost:
            new -= 1
    return hits if len(bm.free_block_ids) >= new else -1


_CAN_ALLOCATE_PITFALLS = (
    ("can_allocate_last_block", {"last": True}),
    ("unchained_hashes", {"chained": False}),
    ("freed_hits_free", {"freed_cost": False}),
)


def _bm_state(bm: BlockManager):
    return (list(bm.free_block_ids), sorted(bm.used_block_ids), sorted(bm.hash_to_block_id.items()),
            [(b.hash, b.ref_count, list(b.token_ids)) for b in bm.blocks])


def _cache_text(bm: BlockManager, seq: Sequence) -> str:
    """Which of the sequence's blocks the cache holds, block by block (what a correct lookup sees)."""
    lines, h = [], -1
    for i in range(seq.num_blocks):
        toks = seq.block(i)
        if i == seq.num_blocks - 1:
            lines.append(f"    block {i} {toks}: the last block")
            break
        h = bm.compute_hash(toks, h)
        bid = bm.hash_to_block_id.get(h, -1)
        if bid == -1 or bm.blocks[bid].token_ids != toks:
            lines.append(f"    block {i} {toks}: not cached after this prefix (the lookup stops here)")
            break
        where = "in use" if bid in bm.used_block_ids else "freed, still hashed"
        lines.append(f"    block {i} {toks}: cached in physical block {bid} ({where})")
    return "\n".join(lines)


class _CanAllocateContext:
    """The scenario and engine being run, for can_allocate's messages."""

    def __init__(self):
        self.case: _Case | None = None
        self.engine: Engine | None = None


def _checked_can_allocate(fn, ctx: _CanAllocateContext):
    fn = _wrap(fn, "can_allocate")

    def can_allocate(self, seq):
        before = _bm_state(self)
        try:
            got = fn(self, seq)
        except _ReferenceCalled:
            raise
        except NotImplementedError:
            raise AssertionError(common.not_filled("can_allocate")) from None
        except Exception as e:  # noqa: BLE001
            raise AssertionError(f"can_allocate({seq.name}) raised {type(e).__name__}: {e}{_where(ctx)}") from None
        if _bm_state(self) != before:
            raise AssertionError(f"can_allocate({seq.name}) changed the block manager (free list, hashes or "
                                 f"reference counts); it must only look{_where(ctx)}")
        if isinstance(got, bool) or not isinstance(got, numbers.Integral):
            raise AssertionError(f"can_allocate({seq.name}) returned {_short.repr(got)}; return an int (the "
                                 "number of cached blocks, or -1)")
        got, want = int(got), _can_allocate_model(self, seq)
        if got != want:
            msg = [f"can_allocate({seq.name}) returned {got}; nano-vllm's returns {want}{_where(ctx)}",
                   f"  {seq.name} has {len(seq)} tokens in {seq.num_blocks} blocks of {self.block_size}; "
                   f"free list {list(self.free_block_ids)} ({len(self.free_block_ids)} free):",
                   _cache_text(self, seq)]
            for key, kw in _CAN_ALLOCATE_PITFALLS:
                if _can_allocate_model(self, seq, **kw) == got:
                    msg.insert(0, PITFALLS[key])
                    break
            raise AssertionError("\n".join(msg))
        return got

    return can_allocate


def _where(ctx: _CanAllocateContext) -> str:
    if ctx.case is None or ctx.engine is None:
        return ""
    return f", at step {len(ctx.engine.trace)} of the scenario '{ctx.case.label}':\n  {ctx.case.describe()}"


def check_can_allocate(fn) -> None:
    """Hidden test of can_allocate: the learner's method on a BlockManager driven by nano-vllm's Scheduler,
    every call compared with nano-vllm's answer on the same cache state (prefix caching on)."""
    _reject_reference(fn, "can_allocate")
    ctx = _CanAllocateContext()
    cls = type("YourBlockManager", (BlockManager,), {"can_allocate": _checked_can_allocate(fn, ctx)})
    cases = [*_cache_cases(), _lesson_abc().with_cache(True), *_random_cases(_RANDOM_SEED + 3, 150, True)]
    for i, case in enumerate(cases):
        sch = _make_ref(case)
        sch.block_manager = cls(case.num_blocks, case.block_size, True)
        ctx.case, ctx.engine = case, Engine(sch)
        arrivals = {k: [Sequence(list(r.prompt), SamplingParams(max_tokens=r.max_tokens, ignore_eos=r.ignore_eos),
                                 name=r.name) for r in group] for k, group in case.arrivals}
        with _no_reference_calls() if common.watched(i) else contextlib.nullcontext():
            try:
                ctx.engine.run(arrivals=arrivals)
            except AssertionError as e:
                if "do not fit in the KV cache" in str(e):
                    continue   # the reference cannot run this workload either
                raise


# --------------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview"


def _seq(name, toks, max_tokens):
    return Sequence(toks, SamplingParams(max_tokens=max_tokens, ignore_eos=True), name=name)


def _drill_prefilled_abc() -> int:
    sch = Scheduler(num_blocks=5, block_size=4, max_num_batched_tokens=8, enable_prefix_caching=False)
    reqs = [_seq(n, [ord(n) * 100 + j for j in range(L)], 4) for n, L in [("A", 6), ("B", 5), ("C", 3)]]
    return sum(r.num_batched_tokens for r in Engine(sch).run(reqs) if r.is_prefill)


DRILL_SYSTEM_PROMPT = list(range(1000))


def _drill_cached_system_prompt() -> int:
    sch = Scheduler(num_blocks=200, block_size=16, max_num_batched_tokens=4096)
    Engine(sch).run([_seq("first", DRILL_SYSTEM_PROMPT + [7] * 20, 1)])
    new = Sequence(DRILL_SYSTEM_PROMPT + [9] * 50, name="new", block_size=16)
    return sch.block_manager.can_allocate(new) * 16


def _drill_same_step() -> int:
    prompt = list(range(40))
    sch = Scheduler(num_blocks=20, block_size=16, max_num_batched_tokens=4096)
    trace = Engine(sch).run([_seq("R1", prompt, 2), _seq("R2", prompt, 2)], arrivals={1: [_seq("R3", prompt, 2)]})
    return sum(r.num_batched_tokens for r in trace if r.is_prefill)


# name -> (question, expected value computed by the reference, {wrong answer: hint})
DRILLS = {
    "drill_1": ("total number of tokens prefilled in the lesson's A/B/C run (5 blocks of 4, budget 8, prefix "
                "caching off)", _drill_prefilled_abc,
                {14: "C is preempted after it has generated tokens and is prefilled again, generated tokens "
                     "included: count that second prefill too."}),
    "drill_2": ("number of tokens of the new request (1000-token system prompt + 50 own tokens, block size 16) "
                "served from the prefix cache", _drill_cached_system_prompt,
                {1000: "Hits are whole blocks: the block holding tokens 992..1007 mixes system-prompt tokens "
                       "with the request's own, so it is not a hit."}),
    "drill_3": ("total number of prompt tokens prefilled for R1, R2 (same step) and R3 (one step later), "
                "same 40-token prompt, block size 16", _drill_same_step,
                {56: "R1 and R2 are admitted in the same step: R1's blocks are hashed only in postprocess, "
                     "so R2 cannot hit them.",
                 120: "R3 arrives after R1's and R2's blocks were hashed: its first two full blocks hit.",
                 80: "R3 still computes its last (partial) block: hits are whole blocks and never the last."}),
}


def check_drills(answers) -> None:
    """Hidden test of the drills. ``answers``: a mapping with ``drill_1``..``drill_3`` (e.g. ``globals()``)
    or a sequence of the three values in order."""
    common.check_whole_number_drills(answers, DRILLS, _short)


# --------------------------------------------------------------------------------------------------------
# messages for visible asserts

_CHECKS = {
    "needs_new_block": check_needs_new_block,
    "preempt": check_preempt,
    "schedule": check_schedule,
    "postprocess": check_postprocess,
    "lesson_step2": check_lesson_step2,
    "can_allocate": check_can_allocate,
}


def diagnose(exercise: str, obj) -> str:
    """What the hidden check of ``exercise`` says about ``obj`` (the learner's function, or their Scheduler
    class for ``"lesson_step2"``), without raising. Meant as a visible assert's message."""
    return common.diagnose(_CHECKS, exercise, obj, "nano-vllm on every workload of the checks")

