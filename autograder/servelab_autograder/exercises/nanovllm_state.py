"""nano-vllm's scheduler (``servelab.schedulers.scheduler``) as plain data, for chapters 02 and 10.

:func:`snapshot` is a scheduler's whole state: its settings, every sequence (:func:`seq_state`), both queues and
the block manager (:func:`bm_state`), read defensively: whatever the learner's code left in a field becomes plain
data (:func:`plain_value`; a string stands for anything else). :func:`build` puts a scheduler and its sequences
back in a state. :func:`first_difference` is the first difference between two states in the learner's terms, and
:func:`state_text` / :func:`queues_text` show one in a message.
"""

from __future__ import annotations

import numbers

from servelab.schedulers.scheduler import BlockManager, SamplingParams, Scheduler, Sequence, SequenceStatus
from servelab_autograder.exercises import common

SHORT = common.short_repr(16, 80)   # how a learner's value is shown in chapters 02 and 10


# ------------------------------------------------------------------------------------------------
# state as plain data


def plain_value(x):
    """A value the learner's code left in a field, as plain data (a string standing for anything else)."""
    if type(x) is int or isinstance(x, bool | str) or x is None:
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, SequenceStatus):
        return x.name
    return f"<{type(x).__name__}: {SHORT.repr(x)}>"


def plain_list(xs) -> list:
    try:
        if isinstance(xs, list) and all(type(x) is int for x in xs):
            return list(xs)
        return [plain_value(x) for x in xs]
    except TypeError:
        return [plain_value(xs)]


def _sorted(xs) -> list:
    try:
        return sorted(xs)
    except TypeError:
        return sorted(xs, key=repr)


def name_of(s) -> str:
    return str(s.name) if isinstance(s, Sequence) else f"<{SHORT.repr(s)}>"


def seq_state(s: Sequence, tokens: bool = True) -> dict:
    kept = {"tokens": plain_list(s.token_ids)} if tokens else {"len": plain_value(len(s.token_ids))}
    return {**kept, "prompt": plain_value(s.num_prompt_tokens),
            "cached": plain_value(s.num_cached_tokens), "scheduled": plain_value(s.num_scheduled_tokens),
            "blocks": plain_list(s.block_table), "status": plain_value(s.status),
            "is_prefill": plain_value(s.is_prefill),
            "max_tokens": plain_value(s.max_tokens), "ignore_eos": plain_value(s.ignore_eos)}


def bm_state(bm: BlockManager) -> dict:
    caching = bool(bm.enable_prefix_caching)
    return {"caching": caching, "block_size": plain_value(bm.block_size),
            # without prefix caching no block is ever hashed: only reference counts matter
            "blocks": [[plain_value(b.ref_count), plain_value(b.hash), plain_list(b.token_ids)] if caching
                       else [plain_value(b.ref_count)] for b in bm.blocks],
            "hashes": (_sorted([plain_value(h), plain_value(i)] for h, i in bm.hash_to_block_id.items()) if caching
                       else []),
            "free": plain_list(bm.free_block_ids), "used": _sorted(plain_list(bm.used_block_ids))}


def snapshot(sch: Scheduler, seqs: dict, tokens: bool = True) -> dict:
    """The scheduler's whole state: its settings, every sequence, both queues, the block manager (``tokens``:
    False for a whole run's trace, which holds one per step: lengths instead of token lists)."""
    return {"config": {"num_blocks": len(sch.block_manager.blocks), "block_size": plain_value(sch.block_size),
                       "max_num_batched_tokens": plain_value(sch.max_num_batched_tokens),
                       "max_num_seqs": plain_value(sch.max_num_seqs), "eos": plain_value(sch.eos),
                       "enable_prefix_caching": bool(sch.block_manager.enable_prefix_caching)},
            "seqs": {n: seq_state(s, tokens) for n, s in seqs.items()},
            "waiting": [name_of(s) for s in sch.waiting], "running": [name_of(s) for s in sch.running],
            "bm": bm_state(sch.block_manager)}


def set_seq(s: Sequence, st: dict) -> None:
    s.token_ids[:] = st["tokens"]
    s.num_prompt_tokens, s.num_cached_tokens = st["prompt"], st["cached"]
    s.num_scheduled_tokens, s.is_prefill = st["scheduled"], st["is_prefill"]
    s.block_table[:] = st["blocks"]
    s.status = SequenceStatus[st["status"]]
    s.max_tokens, s.ignore_eos = st["max_tokens"], st["ignore_eos"]


def new_seq(name: str, st: dict) -> Sequence:
    s = Sequence(st["tokens"][:st["prompt"]], SamplingParams(max_tokens=st["max_tokens"], ignore_eos=st["ignore_eos"]),
                 name=name, block_size=None)
    set_seq(s, st)
    return s


def set_bm(bm: BlockManager, st: dict) -> None:
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
    set_bm(bm, st)
    return bm


def build(state: dict, cls=Scheduler) -> tuple[Scheduler, dict]:
    """A scheduler (of class ``cls``) and its sequences, by name, in ``state`` (which it leaves as it was)."""
    sch = cls(**state["config"])
    set_bm(sch.block_manager, state["bm"])
    seqs = {n: new_seq(n, st) for n, st in state["seqs"].items()}
    for s in seqs.values():
        s.block_size = sch.block_size
    sch.waiting.extend(seqs[n] for n in state["waiting"])
    sch.running.extend(seqs[n] for n in state["running"])
    return sch, seqs



# ------------------------------------------------------------------------------------------------
# a state as a message shows it


def plural(k, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


def queues_text(state: dict) -> str:
    return (f"waiting [{', '.join(state['waiting'])}], running [{', '.join(state['running'])}], "
            f"free blocks {state['bm']['free']}")


def _seq_text(name: str, st: dict) -> str:
    return (f"{name}: {plural(len(st['tokens']), 'token')}, {st['cached']} cached, {st['scheduled']} scheduled, "
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
                    return (f"{name}.{_FIELDS.get(field, field)} is {SHORT.repr(value)}; nano-vllm's is "
                            f"{SHORT.repr(st[field])}")
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


__all__ = ["SHORT", "bm_state", "build", "first_difference", "name_of", "new_bm", "new_seq", "plain_list",
           "plain_value", "plural", "queues_text", "seq_state", "set_bm", "set_seq", "snapshot", "state_text"]
