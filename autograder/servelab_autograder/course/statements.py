"""What the similarity report and its planted copies need to know about a function's statements: which names a
statement assigns, which two statements may be swapped, and every block nested in a body."""

from __future__ import annotations

import ast

ASSIGNMENTS = (ast.Assign, ast.AnnAssign, ast.AugAssign)


def names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def stores(node: ast.AST) -> set[str]:
    """The names ``node`` assigns."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    args = fn.args
    return {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg] if a}


def depends(a: ast.stmt, b: ast.stmt) -> bool:
    """Whether swapping the statements ``a`` and ``b`` could change what they compute: one assigns a name the
    other uses or assigns."""
    return bool(stores(a) & names(b) or stores(b) & names(a))


def each_block(stmts: list[ast.stmt], fn) -> None:
    """Replace every block nested in ``stmts`` (an if's, a loop's, a try's bodies) by ``fn(block)``."""
    for stmt in stmts:
        for name in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, name, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                setattr(stmt, name, fn(inner))
