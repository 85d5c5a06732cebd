"""Chapter 02's exercises as the visible tests and the grader both see them: nano-vllm's scheduler, piece by piece.

Every exercise is a method of a stateful object, so each is **driven**: a case is a scheduler's state as plain data
(:func:`snapshot`), taken from a run of nano-vllm's scheduler (the reference) at the moment it calls that method;
the driver (``drive_*``) builds a scheduler in that state, calls the learner's method once, and returns what it
returned and the state it left, as plain data. The grader runs the same driver with the reference and compares.

While ``schedule`` runs it calls ``preempt`` and ``block_manager.can_allocate``, two other exercises whose
references the grading sandbox does not have. The driver answers those calls from a **replay** of the reference
run: each recorded call, keyed by the state it was made in, with its result and the state it left. A correct
``schedule`` makes the same calls in the same states and gets the same answers; a wrong one reaches a state the
reference never did and the replay says so (``diverged``). Nothing here can preempt or look up the cache on an
input of its own, so nothing here is a reference to copy.

:data:`SPECS` holds each exercise (its driver, how a result is read and shown); :func:`diagnose` is a visible
assert's message; :func:`compare_scheduler` runs the learner's whole Scheduler on the chapter's workloads.
The hidden cases and the verdicts are the grader's (``servelab_autograder.judge.checks.ch02``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import numbers

from servelab.engine.driver import expected, fake_model
from servelab.schedulers import scheduler as ref
from servelab.schedulers.scheduler import BlockManager, SamplingParams, Scheduler, Sequence, SequenceStatus
from servelab_autograder.exercises import common, spec
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch02_nanovllm_scheduler"
MAX_STEPS = 2000          # more steps than any case needs
_short = common.short_repr(16, 80)


# ------------------------------------------------------------------------------------------------
# state as plain data


def _plain(x):
    """A value the learner's code left in a field, as plain data (a string standing for anything else)."""
    if type(x) is int or isinstance(x, bool | str) or x is None:
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, SequenceStatus):
        return x.name
    return f"<{type(x).__name__}: {_short.repr(x)}>"


def _plain_list(xs) -> list:
    try:
        if isinstance(xs, list) and all(type(x) is int for x in xs):
            return list(xs)
        return [_plain(x) for x in xs]
    except TypeError:
        return [_plain(xs)]


def _sorted(xs) -> list:
    try:
        return sorted(xs)
    except TypeError:
        return sorted(xs, key=repr)


def _name(s) -> str:
    return str(s.name) if isinstance(s, Sequence) else f"<{_short.repr(s)}>"


def seq_state(s: Sequence, tokens: bool = True) -> dict:
    kept = {"tokens": _plain_list(s.token_ids)} if tokens else {"len": _plain(len(s.token_ids))}
    return {**kept, "prompt": _plain(s.num_prompt_tokens),
            "cached": _plain(s.num_cached_tokens), "scheduled": _plain(s.num_scheduled_tokens),
            "blocks": _plain_list(s.block_table), "status": _plain(s.status), "is_prefill": _plain(s.is_prefill),
            "max_tokens": _plain(s.max_tokens), "ignore_eos": _plain(s.ignore_eos)}


def bm_state(bm: BlockManager) -> dict:
    caching = bool(bm.enable_prefix_caching)
    return {"caching": caching, "block_size": _plain(bm.block_size),
            # without prefix caching no block is ever hashed: only reference counts matter
            "blocks": [[_plain(b.ref_count), _plain(b.hash), _plain_list(b.token_ids)] if caching
                       else [_plain(b.ref_count)] for b in bm.blocks],
            "hashes": _sorted([_plain(h), _plain(i)] for h, i in bm.hash_to_block_id.items()) if caching else [],
            "free": _plain_list(bm.free_block_ids), "used": _sorted(_plain_list(bm.used_block_ids))}


def snapshot(sch: Scheduler, seqs: dict, tokens: bool = True) -> dict:
    """The scheduler's whole state: its settings, every sequence, both queues, the block manager (``tokens``:
    False for a whole run's trace, which holds one per step: lengths instead of token lists)."""
    return {"config": {"num_blocks": len(sch.block_manager.blocks), "block_size": _plain(sch.block_size),
                       "max_num_batched_tokens": _plain(sch.max_num_batched_tokens),
                       "max_num_seqs": _plain(sch.max_num_seqs), "eos": _plain(sch.eos),
                       "enable_prefix_caching": bool(sch.block_manager.enable_prefix_caching)},
            "seqs": {n: seq_state(s, tokens) for n, s in seqs.items()},
            "waiting": [_name(s) for s in sch.waiting], "running": [_name(s) for s in sch.running],
            "bm": bm_state(sch.block_manager)}


def _set_seq(s: Sequence, st: dict) -> None:
    s.token_ids[:] = st["tokens"]
    s.num_prompt_tokens, s.num_cached_tokens = st["prompt"], st["cached"]
    s.num_scheduled_tokens, s.is_prefill = st["scheduled"], st["is_prefill"]
    s.block_table[:] = st["blocks"]
    s.status = SequenceStatus[st["status"]]
    s.max_tokens, s.ignore_eos = st["max_tokens"], st["ignore_eos"]


def new_seq(name: str, st: dict) -> Sequence:
    s = Sequence(st["tokens"][:st["prompt"]], SamplingParams(max_tokens=st["max_tokens"], ignore_eos=st["ignore_eos"]),
                 name=name, block_size=None)
    _set_seq(s, st)
    return s


def _set_bm(bm: BlockManager, st: dict) -> None:
    for b, row in zip(bm.blocks, st["blocks"]):
        b.ref_count = row[0]
        if st["caching"]:
            b.hash, b.token_ids = row[1], list(row[2])
    bm.hash_to_block_id.clear()
    bm.hash_to_block_id.update({h: i for h, i in st["hashes"]})
    bm.free_block_ids.clear()
    bm.free_block_ids.extend(st["free"])
    bm.used_block_ids.clear()
    bm.used_block_ids.update(st["used"])


def new_bm(st: dict, num_blocks: int | None = None, cls=BlockManager) -> BlockManager:
    bm = cls(num_blocks=num_blocks or len(st["blocks"]), block_size=st["block_size"],
             enable_prefix_caching=st["caching"])
    _set_bm(bm, st)
    return bm


def build(state: dict, cls=Scheduler) -> tuple[Scheduler, dict]:
    """A scheduler (of class ``cls``) and its sequences, by name, in ``state`` (which it leaves as it was)."""
    sch = cls(**state["config"])
    _set_bm(sch.block_manager, state["bm"])
    seqs = {n: new_seq(n, st) for n, st in state["seqs"].items()}
    for s in seqs.values():
        s.block_size = sch.block_size
    sch.waiting.extend(seqs[n] for n in state["waiting"])
    sch.running.extend(seqs[n] for n in state["running"])
    return sch, seqs


# ------------------------------------------------------------------------------------------------
# replaying the reference's calls of the other exercises


def _key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def preempt_key(sch: Scheduler, seq: Sequence) -> str:
    """What a preempt call depends on: the sequence, the queues and the blocks (not the rest of the batch)."""
    return _key(_name(seq), seq_state(seq), [_name(s) for s in sch.waiting], [_name(s) for s in sch.running],
                bm_state(sch.block_manager))


def can_allocate_key(bm: BlockManager, seq: Sequence) -> str:
    return _key(_plain_list(seq.token_ids), bm_state(bm))


class Diverged(Exception):
    """The learner's code reached a state in which the reference never made this call."""


def _replay_preempt(sch: Scheduler, seqs: dict, table: dict):
    def preempt(seq):
        entry = table.get(preempt_key(sch, seq))
        if entry is None:
            raise Diverged(f"preempt({_name(seq)})")
        after = entry["after"]
        _set_seq(seq, after["seq"])
        _set_bm(sch.block_manager, after["bm"])
        for queue, names in ((sch.waiting, after["waiting"]), (sch.running, after["running"])):
            queue.clear()
            queue.extend(seqs[n] for n in names)
    return preempt


def _replay_can_allocate(bm: BlockManager, table: dict):
    def can_allocate(seq):
        entry = table.get(can_allocate_key(bm, seq))
        if entry is None:
            raise Diverged(f"can_allocate({_name(seq)})")
        return entry["result"]
    return can_allocate


def _with_replay(sch: Scheduler, seqs: dict, replay: dict, preempt: bool = True) -> None:
    if preempt:
        sch.preempt = _replay_preempt(sch, seqs, replay["preempt"])
    sch.block_manager.can_allocate = _replay_can_allocate(sch.block_manager, replay["can_allocate"])


# ------------------------------------------------------------------------------------------------
# drivers: one call of the learner's method on a state, the result and the state after as plain data


def _batch(result, seqs: dict) -> tuple[list | None, str | None]:
    known = {id(s) for s in seqs.values()}
    if not isinstance(result, list):
        return None, f"returned {type(result).__name__} {_short.repr(result)} as its batch; return a list of sequences"
    if any(id(s) not in known for s in result):
        return None, "returned something that is not one of the scheduler's sequences in its batch"
    return [[s.name, _plain(s.num_scheduled_tokens)] for s in result], None


def drive_preempt(fn, where: str, state: dict, name: str) -> dict:
    sch, seqs = build(state)
    fn(sch, seqs[name])
    return {"state": snapshot(sch, seqs)}


def drive_schedule(fn, where: str, state: dict, replay: dict) -> dict:
    sch, seqs = build(state)
    _with_replay(sch, seqs, replay)
    try:
        result = fn(sch)
    except Diverged as d:
        return {"diverged": str(d), "state": snapshot(sch, seqs)}
    out: dict = {"state": snapshot(sch, seqs)}
    if not isinstance(result, tuple) or len(result) != 2:
        out["problem"] = f"returned {_short.repr(result)}; it must return a tuple (list of sequences, is_prefill)"
        return out
    out["batch"], problem = _batch(result[0], seqs)
    if problem:
        out["problem"] = problem
    elif not isinstance(result[1], bool):
        out["problem"] = f"returned is_prefill={_short.repr(result[1])}; it must be True or False"
    out["is_prefill"] = _plain(result[1])
    return out


def drive_postprocess(fn, where: str, state: dict, batch: list, token_ids: list, is_prefill: bool) -> dict:
    sch, seqs = build(state)
    finished = fn(sch, [seqs[n] for n in batch], list(token_ids), is_prefill)
    out: dict = {"state": snapshot(sch, seqs)}
    if not isinstance(finished, list) or any(not isinstance(s, Sequence) for s in finished):
        out["problem"] = (f"returned {_short.repr(finished)}; it must return the list of sequences that finished "
                          "this step (an empty list when none did)")
    else:
        out["finished"] = [s.name for s in finished]
    return out


def drive_can_allocate(fn, where: str, bm: dict, tokens: list) -> dict:
    manager = new_bm(bm)
    seq = Sequence(list(tokens), name="S", block_size=bm["block_size"])
    got = fn(manager, seq)
    out: dict = {"state": bm_state(manager)}
    if isinstance(got, bool) or not isinstance(got, numbers.Integral):
        out["problem"] = f"returned {_short.repr(got)}; return an int (the number of cached blocks, or -1)"
    else:
        out["result"] = int(got)
    return out


def _arrivals(scenario: dict) -> dict[int, list]:
    return {step: [list(r) for r in reqs] for step, reqs in scenario["arrivals"]}


def _add_due(sch: Scheduler, seqs: dict, pending: dict, steps: int) -> None:
    """Add the requests due before this step (as Engine.run does: an idle scheduler takes the next ones at once)."""
    due = [k for k in pending if k <= steps]
    if not due and pending and sch.is_finished():
        due = [min(pending)]
    for k in sorted(due):
        for name, prompt, max_tokens, ignore_eos in pending.pop(k):
            seq = Sequence(list(prompt), SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos), name=name)
            sch.add(seq)
            seqs[name] = seq


def drive_scheduler(cls, where: str, scenario: dict, replay: dict) -> dict:
    """The learner's whole Scheduler class through a scenario: the state after every schedule() and every
    postprocess(); the block manager's can_allocate is the reference run's replay."""
    config = scenario["config"]
    sch = cls(**config)
    seqs: dict = {}
    _with_replay(sch, seqs, replay, preempt=False)
    pending, trace = _arrivals(scenario), []

    def end(**more) -> dict:
        generated = {n: _plain_list(s.token_ids[s.num_prompt_tokens:]) for n, s in seqs.items()}
        return {"trace": trace, "generated": generated, **more}

    for steps in range(MAX_STEPS):
        _add_due(sch, seqs, pending, steps)
        if not pending and sch.is_finished():
            return end()
        try:
            result = sch.schedule()
        except Diverged as d:
            return end(diverged=str(d))
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001 - part of the run: nano-vllm's would not raise here
            return end(problem=f"schedule() raised {type(e).__name__}: {e}")
        if not isinstance(result, tuple) or len(result) != 2:
            return end(problem=f"schedule() returned {_short.repr(result)}; it must return a tuple (list of "
                               "sequences, is_prefill)")
        batch, problem = _batch(result[0], seqs)
        if problem:
            return end(problem=f"schedule() {problem}")
        picked, is_prefill = result
        trace.append({"step": steps, "batch": batch, "is_prefill": _plain(is_prefill),
                      "state": snapshot(sch, seqs, tokens=False)})
        try:
            finished = sch.postprocess(picked, fake_model(picked), is_prefill)
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001
            return end(problem=f"postprocess() raised {type(e).__name__}: {e}")
        trace.append({"step": steps, "finished": [_name(s) for s in finished] if isinstance(finished, list)
                      else _short.repr(finished), "state": snapshot(sch, seqs, tokens=False)})
    return end(problem=f"the scenario ran {MAX_STEPS} steps without finishing")


# ------------------------------------------------------------------------------------------------
# the reference's runs: where the cases come from (the learner's lab and the grader; never the sandbox)


def scenario(label: str, num_blocks: int, block_size: int, budget: int, arrivals, max_num_seqs: int = 8,
             eos: int = -1, cache: bool = False) -> dict:
    """``arrivals``: [(step, [(name, prompt, max_tokens, ignore_eos), ...]), ...]."""
    return {"label": label, "config": {"num_blocks": num_blocks, "block_size": block_size,
                                       "max_num_batched_tokens": budget, "max_num_seqs": max_num_seqs, "eos": eos,
                                       "enable_prefix_caching": cache},
            "arrivals": [[step, [[n, list(p), m, ie] for n, p, m, ie in reqs]] for step, reqs in arrivals]}


def with_cache(sc: dict, cache: bool) -> dict:
    out = copy.deepcopy(sc)
    out["config"]["enable_prefix_caching"] = cache
    out["label"] += f", prefix caching {'on' if cache else 'off'}"
    return out


_RECORDS: dict = {}


def record(sc: dict) -> dict | None:
    """A run of the reference through scenario ``sc``: every call of each exercise with the state it was made in
    (the cases), and the replay each schedule() call needs. None when the requests do not fit. Made once."""
    key = json.dumps(sc, sort_keys=True)
    if key not in _RECORDS:
        _RECORDS[key] = _record(sc)
    return _RECORDS[key]


def _record(sc: dict) -> dict | None:
    sch = Scheduler(**sc["config"])
    seqs: dict = {}
    calls = {"schedule": [], "preempt": [], "postprocess": [], "can_allocate": []}
    replay: dict = {}
    where = ""
    real_preempt, real_can_allocate = sch.preempt, sch.block_manager.can_allocate

    def preempt(seq):
        key, before = preempt_key(sch, seq), snapshot(sch, seqs)
        calls["preempt"].append((f"{where}, preempting {seq.name}", before, seq.name))
        real_preempt(seq)
        replay["preempt"][key] = {"after": {"seq": seq_state(seq), "bm": bm_state(sch.block_manager),
                                            "waiting": [s.name for s in sch.waiting],
                                            "running": [s.name for s in sch.running]}}

    def can_allocate(seq):
        result = real_can_allocate(seq)
        replay["can_allocate"][can_allocate_key(sch.block_manager, seq)] = {"result": result}
        if sch.block_manager.enable_prefix_caching:
            calls["can_allocate"].append((f"{where}, admitting {seq.name}", bm_state(sch.block_manager),
                                          list(seq.token_ids)))
        return result

    sch.preempt, sch.block_manager.can_allocate = preempt, can_allocate
    pending = _arrivals(sc)
    whole = {"preempt": {}, "can_allocate": {}}
    for steps in range(MAX_STEPS):
        _add_due(sch, seqs, pending, steps)
        if not pending and sch.is_finished():
            return {**calls, "run": (sc["label"], sc, whole)}
        where = f"step {steps} of '{sc['label']}'"
        before, replay = snapshot(sch, seqs), {"preempt": {}, "can_allocate": {}}
        try:
            picked, is_prefill = sch.schedule()
        except RuntimeError:
            return None
        calls["schedule"].append((where, before, replay))
        whole["can_allocate"].update(replay["can_allocate"])
        tokens = fake_model(picked)
        calls["postprocess"].append((where, snapshot(sch, seqs), [s.name for s in picked], tokens, is_prefill))
        sch.postprocess(picked, tokens, is_prefill)
    return None


# ------------------------------------------------------------------------------------------------
# the chapter's workloads (the visible checks; the grader adds its own)


def abc_run() -> dict:
    """The shape table's run: A, B, C with 6, 5 and 3 prompt tokens, 4 tokens each, 5 blocks of 4, budget 8."""
    reqs = [(n, [ord(n) * 100 + j for j in range(L)], 4, True) for n, L in [("A", 6), ("B", 5), ("C", 3)]]
    return scenario("the A/B/C shape table", 5, 4, 8, [(0, reqs)])


def tight_memory_run(bs: int) -> dict:
    """Five prompts of 3bs, 1, bs + 1, 2bs - 1 and bs tokens, each generating bs + 2, in 5 blocks of bs."""
    prompts = [list(range(i * 10000, i * 10000 + n)) for i, n in enumerate([3 * bs, 1, bs + 1, 2 * bs - 1, bs])]
    return scenario(f"the tight-memory loop at block size {bs}", 5, bs, bs + bs // 2,
                    [(0, [(str(i), p, bs + 2, True) for i, p in enumerate(prompts)])])


def pitfall_scenarios() -> list[dict]:
    """One small scenario per scheduler pitfall (prefix caching off)."""
    four = [(n, [ord(n) * 10 + j for j in range(4)], 3, True) for n in "ABCD"]
    eos_prompt = [5, 6, 7]
    return [
        # B does not fit in what A leaves of the budget: it must wait, neither cut nor run whole
        scenario("a second prefill that does not fit in the budget", 8, 4, 8,
                 [(0, [("A", list(range(6)), 2, True), ("B", [9] * 5, 2, True)])]),
        # A is decoding when B arrives: the step must be B's prefill alone
        scenario("a request arriving while another decodes", 8, 4, 8,
                 [(0, [("A", list(range(3)), 3, True)]), (1, [("B", [7, 8, 9], 2, True)])]),
        # 10 tokens, budget 6: a mid-chunk step, then the rest of the prompt
        scenario("a prompt longer than the budget (mid-chunk step)", 4, 4, 6, [(0, [("A", list(range(10)), 2, True)])]),
        # running [A, B, C, D], no free block, every one needs a block: D, then C must be preempted; E (2 blocks)
        # waits the whole time, so the preempted ones must go in front of it
        scenario("memory runs out with four sequences decoding", 4, 4, 16,
                 [(0, four), (1, [("E", [1, 2, 3, 4, 5], 1, True)])]),
        # A stops at eos after 2 tokens; B ignores eos
        scenario("a request that stops at eos", 6, 4, 8,
                 [(0, [("A", eos_prompt, 3, False), ("B", eos_prompt, 3, True)])], eos=expected(eos_prompt, 3)[1]),
        # B, the head of waiting, needs 3 blocks and 2 are free; C behind it would fit but must not jump ahead
        scenario("the head of waiting does not fit yet", 5, 4, 16,
                 [(0, [("A", list(range(9)), 4, True)]),
                  (1, [("B", list(range(9)), 3, True), ("C", [0, 1], 1, True)])]),
        # block size 1: every token opens a block
        scenario("block size 1", 12, 1, 4, [(0, [("A", [1, 2, 3], 3, True), ("B", [4, 5], 2, True)])]),
    ]


def cache_scenarios() -> list[dict]:
    """Prefix-cache scenarios (caching on): the chapter's three phenomena and one per can_allocate pitfall."""
    system = list(range(100, 110))
    return [
        scenario("a shared 10-token system prompt", 10, 4, 64,
                 [(0, [("A", system + [1, 2], 1, True)]), (1, [("B", system + [7, 8, 9], 2, True)])], cache=True),
        scenario("the same 8-token prompt twice (the last block is full)", 10, 4, 64,
                 [(0, [("A", list(range(8)), 1, True)]), (1, [("B", list(range(8)), 1, True)])], cache=True),
        scenario("two requests with the same prompt in the same step", 10, 4, 64,
                 [(0, [("A", list(range(9)), 2, True), ("B", list(range(9)), 2, True)]),
                  (1, [("C", list(range(9)), 2, True)])], cache=True),
        scenario("a preempted sequence comes back", 5, 4, 16,
                 [(0, [("A", list(range(7)), 3, True), ("B", list(range(50, 58)), 3, True)])], cache=True),
        # [3, 4] is cached as a first block (of X2) and [1, 2] as a first block (of X1); in B [3, 4] is the second
        # block, after [1, 2]: with chained hashes it is not a hit
        scenario("a block cached at another position", 10, 2, 64,
                 [(0, [("X1", [1, 2, 5], 1, True), ("X2", [3, 4, 5], 1, True)]),
                  (1, [("B", [1, 2, 3, 4, 9], 1, True)])],
                 cache=True),
        # A's two hashed blocks are freed; B holds the third; C hits both freed blocks but needs 3 free entries
        # (2 cached + 1 fresh) and only 2 are free: C must wait until B finishes
        scenario("hits on freed blocks when the free list is short", 3, 2, 64,
                 [(0, [("A", [1, 2, 3, 4, 5], 1, True)]), (1, [("B", [7], 3, True)]),
                  (2, [("C", [1, 2, 3, 4, 9], 1, True)])],
                 cache=True),
    ]


def visible_scenarios() -> list[dict]:
    """The chapter's workloads, one per pitfall and the prefix cache's: the visible checks' cases."""
    pitfalls = pitfall_scenarios()
    return [abc_run(), tight_memory_run(4), tight_memory_run(16), *pitfalls,
            *(with_cache(sc, True) for sc in pitfalls), with_cache(abc_run(), True), *cache_scenarios()]


def cases_of(exercise: str, scenarios) -> list[tuple]:
    """The cases of ``exercise`` (a method name, or "Scheduler" for the whole class) from reference runs."""
    out = []
    for sc in scenarios:
        rec = record(sc)
        if rec is None:
            continue
        if exercise == "Scheduler":
            label, sc, replay = rec["run"]
            out.append((label, sc, replay))
        else:
            out += [tuple(c) for c in rec[exercise]]
    return out


def rule_cases(block_sizes=(4, *range(1, 4), *range(5, 17), 32, 256)) -> list[tuple[int, int]]:
    return [(n, bs) for bs in block_sizes for n in range(1, 3 * bs + 3)]


# ------------------------------------------------------------------------------------------------
# reading and showing results


def _n(k, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


def _batch_text(batch, is_prefill) -> str:
    kind = "prefill" if is_prefill is True else "decode" if is_prefill is False else f"is_prefill={is_prefill}"
    return f"{kind} {' '.join(f'{n}:{t}' for n, t in batch) if batch else 'nothing'}"


def queues_text(state: dict) -> str:
    return (f"waiting [{', '.join(state['waiting'])}], running [{', '.join(state['running'])}], "
            f"free blocks {state['bm']['free']}")


def _seq_text(name: str, st: dict) -> str:
    return (f"{name}: {_n(len(st['tokens']), 'token')}, {st['cached']} cached, {st['scheduled']} scheduled, "
            f"blocks {st['blocks']}, {st['status']}{', is_prefill' if st['is_prefill'] is True else ''}")


def state_text(state: dict) -> str:
    lines = [queues_text(state)] + [f"    {_seq_text(n, st)}" for n, st in state["seqs"].items()
                                    if st["status"] != "FINISHED"]
    return "\n".join(lines)


def first_difference(got: dict, want: dict) -> str | None:
    """The first difference between two states (``snapshot`` or ``bm_state``), in the learner's terms."""
    if "seqs" in want:
        for part in ("waiting", "running"):
            if got[part] != want[part]:
                return f"{part} is [{', '.join(got[part])}]; nano-vllm's is [{', '.join(want[part])}]"
        if got["config"] != want["config"]:
            return f"the scheduler's settings changed: {got['config']}; they were {want['config']}"
        for name, st in want["seqs"].items():
            mine = got["seqs"].get(name)
            for field in st:
                if mine is None or mine.get(field) != st[field]:
                    value = None if mine is None else mine.get(field)
                    return (f"{name}.{_FIELDS.get(field, field)} is {_short.repr(value)}; nano-vllm's is "
                            f"{_short.repr(st[field])}")
        got, want = got["bm"], want["bm"]
    if got["free"] != want["free"]:
        return f"the free list is {got['free']}; nano-vllm's is {want['free']}"
    if got["used"] != want["used"]:
        return f"the blocks in use are {got['used']}; nano-vllm's are {want['used']}"
    for i, (a, b) in enumerate(zip(got["blocks"], want["blocks"])):
        if a[0] != b[0]:
            return f"physical block {i} has ref_count {a[0]}; nano-vllm's has {b[0]}"
        if a != b:
            return f"physical block {i}'s hash or tokens differ from nano-vllm's ({'set' if a[1] != -1 else 'unset'})"
    if got["hashes"] != want["hashes"]:
        return "the cache's hash -> block map differs from nano-vllm's"
    return None


_FIELDS = {"tokens": "token_ids", "len": "len(token_ids)", "prompt": "num_prompt_tokens", "cached": "num_cached_tokens",
           "scheduled": "num_scheduled_tokens", "blocks": "block_table", "status": "status"}


def _norm(keys: tuple[str, ...]):
    def norm(raw, args):
        if not isinstance(raw, dict) or "state" not in raw:
            raise Shape(f"the driver returned {_short.repr(raw)}")
        if "problem" in raw:
            raise Shape(str(raw["problem"]))
        return {k: raw[k] for k in ("diverged", "state", *keys) if k in raw}
    return norm


def _where(args) -> str:
    return str(args[0])


def _show_schedule(v: dict) -> str:
    if "diverged" in v:
        return f"(it called {v['diverged']} in a state nano-vllm's schedule never calls it in)"
    return _batch_text(v["batch"], v["is_prefill"])


def _note(args, got, want) -> str:
    if "diverged" in got:
        return f"\nBefore the call: {state_text(args[1]) if 'seqs' in args[1] else ''}".rstrip()
    body = None
    if "batch" in want and (got.get("batch"), got.get("is_prefill")) != (want["batch"], want["is_prefill"]):
        body = f"the batch is {_show_schedule(got)}; nano-vllm's is {_show_schedule(want)}"
    for k in ("finished", "result"):
        if k in want and got.get(k) != want[k]:
            body = f"it returned {got.get(k)}; nano-vllm's returns {want[k]}"
    body = body or first_difference(got["state"], want["state"])
    before = args[1] if isinstance(args[1], dict) and "seqs" in args[1] else None
    lines = [f"\nFirst difference: {body}"]
    if before is not None:
        lines.append(f"Before the call: {state_text(before)}")
        lines.append(f"After it, yours: {queues_text(got['state'])}; nano-vllm's: {queues_text(want['state'])}")
    return "\n".join(lines)


def _rule_note(args, got, want) -> str:
    n, bs = args
    pos = n - 1
    return (f" In decode the newest token sits at position {pos} (0-based); block {pos // bs} holds positions "
            f"{pos // bs * bs}..{pos // bs * bs + bs - 1}, so this token {'opens' if want else 'does not open'} "
            f"a block.")


def _bool(raw, args):
    if not isinstance(raw, bool):
        raise Shape(f"it is a {type(raw).__name__}; return True or False")
    return raw


def _can_allocate_call(args) -> str:
    where, bm, tokens = args
    return (f"can_allocate(S) at {where}: S has {_n(len(tokens), 'token')} {_short.repr(tokens)} in blocks of "
            f"{bm['block_size']}, free list {bm['free']}")


def _can_allocate_note(args, got, want) -> str:
    where, bm, tokens = args
    if "result" in got and got["state"] == want["state"]:
        return "\n" + cache_text(bm, tokens)
    return _note(args, got, want)


def cache_text(bm: dict, tokens: list) -> str:
    """Which of the sequence's blocks the cache holds, block by block (what a correct lookup sees)."""
    manager = new_bm(bm)
    seq = Sequence(list(tokens), name="S", block_size=bm["block_size"])
    lines, h = [], -1
    for i in range(seq.num_blocks):
        toks = seq.block(i)
        if i == seq.num_blocks - 1:
            lines.append(f"    block {i} {toks}: the last block")
            break
        h = manager.compute_hash(toks, h)
        bid = manager.hash_to_block_id.get(h, -1)
        if bid == -1:
            lines.append(f"    block {i} {toks}: its chained hash is not in the cache (the lookup stops here)")
            break
        if manager.blocks[bid].token_ids != toks:
            lines.append(f"    block {i} {toks}: its chained hash maps to physical block {bid}, which holds "
                         f"{manager.blocks[bid].token_ids} (a hash collision: not a hit; the lookup stops here)")
            break
        where = "in use" if bid in manager.used_block_ids else "freed, still hashed"
        lines.append(f"    block {i} {toks}: cached in physical block {bid} ({where})")
    return "\n".join(lines)


def _scheduler_norm(raw, args):
    if not isinstance(raw, dict) or "trace" not in raw:
        raise Shape(f"the driver returned {_short.repr(raw)}")
    return raw


def _show_run(v: dict) -> str:
    return f"a run of {len(v['trace']) // 2} steps"


def _scheduler_note(args, got, want) -> str:
    for mine, theirs in zip(got["trace"], want["trace"]):
        if mine != theirs:
            phase = "schedule()" if "batch" in theirs else "postprocess()"
            batch = (mine.get("batch"), mine.get("is_prefill"))
            if "batch" in theirs and batch != (theirs["batch"], theirs["is_prefill"]):
                body = f"{phase} returned {_batch_text(mine.get('batch'), mine.get('is_prefill'))}; nano-vllm's " \
                       f"schedules {_batch_text(theirs['batch'], theirs['is_prefill'])}"
            elif "finished" in theirs and mine.get("finished") != theirs["finished"]:
                body = f"{phase} returned {mine.get('finished')}; nano-vllm's returns {theirs['finished']}"
            else:
                body = f"after {phase}: {first_difference(mine['state'], theirs['state'])}"
            return (f"\nYour Scheduler differs from nano-vllm's at step {theirs['step']}: {body}\n"
                    f"  yours:     {queues_text(mine['state'])}\n  nano-vllm: {queues_text(theirs['state'])}")
    for k in ("problem", "diverged"):
        if k in got:
            return f"\nAfter {len(got['trace']) // 2} steps that match: {got[k]}"
    if len(got["trace"]) != len(want["trace"]):
        return f"\nYour run takes {len(got['trace']) // 2} steps; nano-vllm's takes {len(want['trace']) // 2}."
    for name, tokens in want["generated"].items():
        if got["generated"].get(name) != tokens:
            return f"\n{name} generated {_short.repr(got['generated'].get(name))}; nano-vllm's {_short.repr(tokens)}"
    return ""


def _at(args) -> str:
    return f" at {args[0]}"


SPECS = {s.name: s for s in [
    Spec("needs_new_block", ("seq_len", "block_size"), ref.needs_new_block, _bool, note=_rule_note),
    Spec("preempt", ("where", "state", "name"), Scheduler.preempt, _norm(()), lambda v: "the state above",
         driver=f"{__name__}:drive_preempt", note=_note,
         call=lambda a: f"preempt({a[2]}){_at(a)} (the caller took {a[2]} off running)"),
    Spec("schedule", ("where", "state", "replay"), Scheduler.schedule, _norm(("batch", "is_prefill")),
         _show_schedule, driver=f"{__name__}:drive_schedule", note=_note, call=lambda a: f"schedule(){_at(a)}"),
    Spec("postprocess", ("where", "state", "batch", "token_ids", "is_prefill"), Scheduler.postprocess,
         _norm(("finished",)), lambda v: f"finished {v.get('finished')}", driver=f"{__name__}:drive_postprocess",
         note=_note, call=lambda a: f"postprocess([{', '.join(a[2])}], {a[3]}, is_prefill={a[4]}){_at(a)}"),
    Spec("can_allocate", ("where", "bm", "tokens"), BlockManager.can_allocate, _norm(("result",)),
         lambda v: str(v.get("result")), driver=f"{__name__}:drive_can_allocate", note=_can_allocate_note,
         call=_can_allocate_call),
    Spec("Scheduler", ("where", "scenario", "replay"), Scheduler, _scheduler_norm, _show_run,
         driver=f"{__name__}:drive_scheduler", note=_scheduler_note,
         call=lambda a: f"your Scheduler on the scenario '{a[0]}'"),
]}

def scheduler_scenarios() -> list[dict]:
    """The whole Scheduler's workloads (prefix caching off)."""
    return [abc_run(), *(tight_memory_run(bs) for bs in (4, 16, 256)), *pitfall_scenarios()]


VISIBLE = {"needs_new_block": lambda: rule_cases((4, 1, 2, 3, 256)),
           "Scheduler": lambda: cases_of("Scheduler", scheduler_scenarios())}


def visible_cases(name: str) -> list[tuple]:
    return VISIBLE[name]() if name in VISIBLE else cases_of(name, visible_scenarios())


def diagnose(exercise: str, fn) -> str:
    """What is wrong with the learner's ``fn`` (their method, or their Scheduler class for ``"Scheduler"``) on
    the chapter's workloads, in their terms, for a visible assert's message. Never raises."""
    return spec.diagnose_cases(SPECS, ASSIGNMENT, fn, exercise, lambda: visible_cases(exercise), exercise,
                               "nano-vllm's")


def compare_scheduler(scheduler_class) -> None:
    """The learner's whole Scheduler step by step against nano-vllm's on the chapter's workloads (prefix caching
    off); raises AssertionError naming the first step that differs."""
    msg = diagnose("Scheduler", scheduler_class)
    if not msg.startswith("Scheduler agrees"):
        raise AssertionError(msg)


__all__ = ["ASSIGNMENT", "SPECS", "compare_scheduler", "diagnose", "record", "scenario", "snapshot"]
