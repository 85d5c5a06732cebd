"""Planted copies for calibrating the similarity report: a function copied with its local names renamed and its
independent statements reordered, the disguise a learner who copies tries first.

`disguise(source)` renames every local variable of every function (never a parameter, a global or an attribute,
so the copy still runs and still grades) and swaps each pair of adjacent statements where neither reads or writes
what the other writes; the copy computes what the original does.
"""

from __future__ import annotations

import ast
import builtins

from servelab_autograder.course.statements import ASSIGNMENTS, depends, each_block, parameters, stores

_BUILTINS = set(dir(builtins))


def _independent(a: ast.stmt, b: ast.stmt) -> bool:
    """Two assignments of names that neither of the other reads nor assigns: swapping them changes nothing."""
    return isinstance(a, ASSIGNMENTS) and isinstance(b, ASSIGNMENTS) and not depends(a, b) \
        and bool(stores(a)) and bool(stores(b))


def _reorder(body: list[ast.stmt]) -> list[ast.stmt]:
    out, i = [], 0
    while i < len(body):
        if i + 1 < len(body) and _independent(body[i], body[i + 1]):
            out += [body[i + 1], body[i]]
            i += 2
        else:
            out.append(body[i])
            i += 1
    each_block(out, _reorder)
    return out


class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]):
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:  # a lambda's or comprehension's own parameter
        node.arg = self.names.get(node.arg, node.arg)
        return node


def _disguise_function(fn: ast.FunctionDef) -> None:
    params = parameters(fn)
    declared = {n for node in ast.walk(fn) if isinstance(node, ast.Global | ast.Nonlocal) for n in node.names}
    inner = {a.arg for node in ast.walk(fn) if isinstance(node, ast.Lambda) for a in node.args.args}
    local = (stores(fn) | inner) - params - declared - _BUILTINS
    names = {name: f"v{i}_{name[::-1].strip('_') or 'x'}" for i, name in enumerate(sorted(local))}
    fn.body = _reorder(fn.body)
    for stmt in fn.body:
        _Rename(names).visit(stmt)


def disguise(source: str) -> str:
    """``source`` with each function's locals renamed and independent neighbours swapped (docstrings dropped)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                node.body = body[1:] or [ast.Pass()]
            _disguise_function(node)
    return ast.unparse(tree) + "\n"
