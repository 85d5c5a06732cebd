"""The radix tree as the grader compares and shows it, for chapters 04 and 05: by path, not by node object.

:func:`view` turns a state (``radix_state.snapshot``) into one row per node, sorted by path (its edge, KV
indices, lock_ref, the rank of its last access time, membership of evictable_leaves), the size counters and
what is broken (parent pointers, child keys, empty edges), so neither node ids nor the order of a children dict
matter. :func:`tree_difference` is the first difference between two views in the learner's terms;
:func:`tree_text` and :func:`rows_text` draw a state or a view as a tree for a message.
"""

from __future__ import annotations

from servelab_autograder.exercises.radix_state import CHILDREN, KEY, LOCK, PARENT, TIME, VALUE, show


def _order_key(path) -> list:
    """A sort key for paths that may hold what a broken tree put there (strings among the ints)."""
    return [(0, t) if isinstance(t, int) else (1, str(t)) for t in path]


def expected_child_key(page_size: int, edge) -> object:
    return edge[0] if page_size == 1 else tuple(edge[:page_size])


def view(state: dict) -> dict:
    """``state`` as compared: one row per node but the root, sorted by path, [path, edge, KV indices, lock_ref,
    rank of last_access_time, in evictable_leaves]; the sizes (evictable, protected, total); what is broken."""
    rows, ps = state["nodes"], state["page_size"]
    problems = [state["broken"]] if state.get("broken") else []
    if rows[0][KEY] != [] or rows[0][LOCK] != 1:
        problems.append("the root must keep an empty key and lock_ref 1")
    paths, under = {0: []}, {}
    for i, row in enumerate(rows):
        for ck, j in row[CHILDREN]:
            if j in paths:
                continue
            under[j] = i
            paths[j] = paths[i] + list(rows[j][KEY])
            edge = rows[j][KEY]
            if not edge:
                problems.append(f"the node under {show(paths[i])} has an empty edge (a split at 0 tokens?)")
            elif ck != expected_child_key(ps, edge):
                problems.append(f"the child {show(paths[j])} hangs under the child key {ck!r}; it should be "
                                f"{expected_child_key(ps, edge)!r}")
            if rows[j][PARENT] != i:
                problems.append(f"the node {show(paths[j])} has a parent pointer that is not the node it hangs under")
    if -1 in state["leaves"]:
        problems.append(f"evictable_leaves holds {state['leaves'].count(-1)} node(s) no longer in the tree")
    leaves = set(state["leaves"])
    times = [rows[i][TIME] for i in paths if i]
    try:
        rank = {t: r for r, t in enumerate(sorted(set(times)))}
    except TypeError:
        problems.append("last_access_time must be a number (use self._tick())")
        rank = {}
    out = sorted(([paths[i], rows[i][KEY], rows[i][VALUE], rows[i][LOCK], rank.get(rows[i][TIME]), i in leaves]
                  for i in paths if i), key=lambda r: _order_key(r[0]))
    total = sum(len(rows[i][VALUE]) for i in paths)
    return {"sizes": [*state["sizes"], total], "rows": out, "problems": problems}


_ROW_FIELDS = ("path", "edge", "KV indices", "lock_ref", "last access order", "membership of evictable_leaves")


def _order(rows) -> str:
    """The nodes by last access time, least recent first ("=": the same time)."""
    rows = sorted(rows, key=lambda r: (r[4] if isinstance(r[4], int) else -1, _order_key(r[0])))
    text = show(rows[0][1]) if rows else ""
    for a, b in zip(rows, rows[1:]):
        text += f" {'=' if a[4] == b[4] else '<'} {show(b[1])}"
    return text


def tree_difference(got: dict, want: dict) -> str | None:
    """The first difference between two views, in the learner's terms."""
    if got["sizes"] != want["sizes"]:
        names = ("evictable_size()", "protected_size()", "total_size()")
        i = next(i for i, (a, b) in enumerate(zip(got["sizes"], want["sizes"])) if a != b)
        return (f"{names[i]} is {got['sizes'][i]}; the reference's is {want['sizes'][i]} (evictable, protected, "
                f"total: yours {tuple(got['sizes'])}, the reference's {tuple(want['sizes'])})")
    if got["problems"] != want["problems"]:
        return (got["problems"] or ["the tree is broken"])[0]
    mine, theirs = {tuple(r[0]): r for r in got["rows"]}, {tuple(r[0]): r for r in want["rows"]}
    for path in sorted(set(mine) | set(theirs), key=_order_key):
        if path not in mine:
            return (f"the reference's tree has a node ending at {show(path)} (edge {show(theirs[path][1])}); "
                    "yours has none")
        if path not in theirs:
            return (f"your tree has a node ending at {show(path)} (edge {show(mine[path][1])}); the reference's "
                    "has none")
        a, b = mine[path], theirs[path]
        if a != b:
            i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            if i == 4:
                return (f"the order of the nodes' last access times differs: yours {_order(got['rows'])}; the "
                        f"reference's {_order(want['rows'])} (least recent first)")
            return f"the node ending at {show(path)} has {_ROW_FIELDS[i]} {a[i]}; the reference's has {b[i]}"
    return None


def tree_text(state: dict, limit: int = 30) -> str:
    """The tree, pretty_print style (reference states: well formed), at most ``limit`` nodes."""
    rows, lines = state["nodes"], []
    stack = [(0, 0)]
    while stack and len(lines) < limit:
        i, depth = stack.pop()
        row = rows[i]
        text = "root" if i == 0 else f"{show(row[KEY])} kv={show(row[VALUE])}"
        lines.append(f"{'  ' * depth}{text} r={row[LOCK]} t={row[TIME]}")
        stack.extend((j, depth + 1) for _, j in reversed(row[CHILDREN]))
    if stack:
        lines.append("  ...")
    return "\n".join(lines)


def rows_text(rows: list, limit: int = 30) -> str:
    """A view's rows as a tree (the root first), at most ``limit`` nodes."""
    lines = ["root"]
    for path, edge, value, lock, rank, _ in rows[:limit]:
        depth = sum(1 for r in rows if len(r[0]) < len(path) and list(path[:len(r[0])]) == list(r[0]))
        lines.append(f"{'  ' * (depth + 1)}{show(edge)} kv={show(value)} r={lock} (access order {rank})")
    if len(rows) > limit:
        lines.append("  ...")
    return "\n".join(lines)


__all__ = ["expected_child_key", "rows_text", "tree_difference", "tree_text", "view"]
