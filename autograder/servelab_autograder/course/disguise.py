"""Planted copies for calibrating the similarity report: a function copied with its local names renamed and its
independent statements reordered, the disguise a learner who copies tries first.

`disguise(source)` renames every local variable of every function (never a parameter, a global or an attribute,
so the copy still runs and still grades) and swaps each pair of adjacent statements where neither reads or writes
what the other writes; the copy computes what the original does.
"""

from __future__ import annotations

import ast
import builtins

_BUILTINS = set(dir(builtins))


def _stores(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _independent(a: ast.stmt, b: ast.stmt) -> bool:
    simple = (ast.Assign, ast.AnnAssign, ast.AugAssign)
    if not (isinstance(a, simple) and isinstance(b, simple)):
        return False
    wa, wb = _stores(a), _stores(b)
    return not (wa & (wb | _loads(b)) or wb & _loads(a)) and bool(wa) and bool(wb)


def _reorder(body: list[ast.stmt]) -> list[ast.stmt]:
    out, i = [], 0
    while i < len(body):
        if i + 1 < len(body) and _independent(body[i], body[i + 1]):
            out += [body[i + 1], body[i]]
            i += 2
        else:
            out.append(body[i])
            i += 1
    for stmt in out:
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                setattr(stmt, field, _reorder(inner))
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
    params = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
    params |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}
    declared = {n for node in ast.walk(fn) if isinstance(node, ast.Global | ast.Nonlocal) for n in node.names}
    inner = {a.arg for node in ast.walk(fn) if isinstance(node, ast.Lambda) for a in node.args.args}
    local = (_stores(fn) | inner) - params - declared - _BUILTINS
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
