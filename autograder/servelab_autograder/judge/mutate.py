"""The mutation operators: every small wrong program made from one solution cell, one change at a time (a
comparison or an arithmetic operator swapped, a constant moved by one, a rounding function swapped, a copy or a
conversion removed, an int returned as a float or the reverse, a return or a branch removed, a loop or a search
capped, a condition's operands or order swapped). Each :class:`Mutant` has a stable id; :mod:`mutants` grades them."""

from __future__ import annotations

import ast
import copy
import difflib
import hashlib
import numbers
from collections.abc import Callable, Iterator
from dataclasses import dataclass

CAPS = (32, 1024)             # a loop or a search cut after this many iterations


# ------------------------------------------------------------------------------------------------
# operators: each yields (label, replacement) for a node; a replacement is a node, a list of statements
# (spliced in place of a statement) or None (the statement removed)


def _num(node) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


CMP_SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
ARITH_SWAP = {ast.Add: (ast.Sub,), ast.Sub: (ast.Add,), ast.Mult: (ast.Div,), ast.Div: (ast.FloorDiv, ast.Mult),
              ast.FloorDiv: (ast.Div,), ast.Mod: (ast.FloorDiv,), ast.Pow: (ast.Mult,)}
ROUNDERS = ("int", "round", "math.ceil", "math.floor")
COPY_CALLS = ("dict", "list", "set", "tuple", "copy.copy", "copy.deepcopy")
COPY_METHODS = ("copy", "clone", "detach")
CONVERT_METHODS = ("to", "float", "half", "double", "long", "int", "cpu", "cuda", "contiguous", "item", "tolist")
DTYPE_SWAP = {"int32": "int64", "int64": "int32", "long": "int32", "float32": "float16", "float16": "float32",
              "bfloat16": "float32", "float64": "float32", "int8": "int32"}


def _dotted(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _name_expr(dotted: str):
    return ast.parse(dotted, mode="eval").body


def op_compare(node, ctx):
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            new = copy.deepcopy(node)
            new.ops[i] = CMP_SWAP[type(op)]()
            yield "compare", new
        if len(node.ops) == 1 and isinstance(node.ops[0], ast.Lt | ast.LtE | ast.Gt | ast.GtE):
            yield "operands", ast.Compare(copy.deepcopy(node.comparators[0]), node.ops,
                                          [copy.deepcopy(node.left)])


def op_arith(node, ctx):
    if isinstance(node, ast.BinOp | ast.AugAssign):
        for new_op in ARITH_SWAP.get(type(node.op), ()):
            new = copy.deepcopy(node)
            new.op = new_op()
            yield "arith", new


def op_constant(node, ctx):
    if _num(node) and not isinstance(node.value, bool):
        for d in (1, -1):
            yield "constant", ast.Constant(node.value + d)


def op_boolean(node, ctx):
    if isinstance(node, ast.BoolOp):
        new = copy.deepcopy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield "boolean", new
        if len(node.values) == 2:   # the order of checks: a guard that runs second no longer guards
            yield "order", ast.BoolOp(node.op, [copy.deepcopy(node.values[1]), copy.deepcopy(node.values[0])])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "negation", copy.deepcopy(node.operand)


def op_calls(node, ctx):
    if not isinstance(node, ast.Call):
        return
    name = _dotted(node.func)
    if name in ROUNDERS and len(node.args) == 1 and not node.keywords:
        for other in ROUNDERS:
            if other != name:
                yield "rounding", ast.Call(_name_expr(other), copy.deepcopy(node.args), [])
        yield "numtype", copy.deepcopy(node.args[0])          # the int made a float (or left as it was)
    if name == "float" and len(node.args) == 1:
        yield "numtype", copy.deepcopy(node.args[0])
    if name in ("max", "min"):
        new = copy.deepcopy(node)
        new.func = ast.Name("min" if name == "max" else "max", ast.Load())
        yield "minmax", new
    if name in COPY_CALLS and len(node.args) == 1 and not node.keywords:
        yield "copy", copy.deepcopy(node.args[0])
    if isinstance(node.func, ast.Attribute):
        attr = node.func.attr
        if attr in COPY_METHODS and not node.args:
            yield "copy", copy.deepcopy(node.func.value)
        if attr in CONVERT_METHODS and name not in ("math.floor",):
            yield "convert", copy.deepcopy(node.func.value)
    for i, kw in enumerate(node.keywords):
        if kw.arg in ("dtype", "device"):
            new = copy.deepcopy(node)
            del new.keywords[i]
            yield "convert", new
    if name == "range" and node.args:
        stop = 0 if len(node.args) == 1 else 1
        for cap in CAPS:
            if _num(node.args[stop]) and node.args[stop].value <= cap:
                continue
            new = copy.deepcopy(node)
            new.args[stop] = ast.Call(ast.Name("min", ast.Load()), [copy.deepcopy(node.args[stop]),
                                                                    ast.Constant(cap)], [])
            yield "bound", new


def op_dtype(node, ctx):
    if isinstance(node, ast.Attribute) and node.attr in DTYPE_SWAP and _dotted(node.value) in ("torch", "np", "tl"):
        yield "convert", ast.Attribute(copy.deepcopy(node.value), DTYPE_SWAP[node.attr], ast.Load())


def _float_int(value, kinds: set) -> Iterator[tuple[str, ast.AST]]:
    if value is None:
        return
    for conv, kind in (("float", "int"), ("int", "float")):
        if kind in kinds:
            yield "numtype", ast.Call(ast.Name(conv, ast.Load()), [copy.deepcopy(value)], [])


def _kind(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, numbers.Integral):
        return "int"
    if isinstance(value, numbers.Real):
        return "float"
    return type(value).__name__


def instrument(cell: str, source: str) -> str:
    """``source`` with each return's value passed through ``__mutant_seen__(cell, site, value)``, which records
    the kinds of number it returns (per element of a returned tuple)."""
    tree = ast.parse(source)
    for k, (node, *_) in enumerate(list(_walk(tree))):
        if isinstance(node, ast.Return) and node.value is not None:
            node.value = ast.Call(ast.Name("__mutant_seen__", ast.Load()),
                                  [ast.Constant(cell), ast.Constant(k), node.value], [])
    return ast.unparse(ast.fix_missing_locations(tree))


class Seen:
    """What each return of the solution handed back while the chapter graded it: (cell, site) -> {element
    (None: the whole value) -> kinds}."""

    def __init__(self):
        self.kinds: dict = {}

    def __call__(self, cell, site, value):
        entry = self.kinds.setdefault((cell, site), {})
        entry.setdefault(None, set()).add(_kind(value))
        if isinstance(value, tuple):
            for i, v in enumerate(value):
                entry.setdefault(i, set()).add(_kind(v))
        return value


def op_return(node, ctx):
    """A return removed; a number it returns made the other kind (an int as a float, a float as an int): only
    where the solution was seen returning that kind there (``ctx["seen"]``: position -> type names), since
    float() of a float changes nothing."""
    if isinstance(node, ast.Return):
        yield "return", None
        seen = (ctx or {}).get("seen") or {}
        if isinstance(node.value, ast.Tuple):
            for i, elt in enumerate(node.value.elts):
                for label, conv in _float_int(elt, seen.get(i, set())):
                    new = copy.deepcopy(node)
                    new.value.elts[i] = conv
                    yield label, new
        else:
            for label, conv in _float_int(node.value, seen.get(None, set())):
                yield label, ast.Return(conv)
    if isinstance(node, ast.Break | ast.Continue):
        yield "branch", None


def op_branch(node, ctx):
    if isinstance(node, ast.If):
        if node.orelse:
            yield "branch", copy.deepcopy(node.orelse)        # the if's body removed: always the else
            new = copy.deepcopy(node)
            new.orelse = []
            yield "branch", new                               # the else removed
            if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):   # if/elif: order of checks
                inner = node.orelse[0]
                yield "order", ast.If(copy.deepcopy(inner.test), copy.deepcopy(inner.body),
                                      [ast.If(copy.deepcopy(node.test), copy.deepcopy(node.body),
                                              copy.deepcopy(inner.orelse))])
        else:
            yield "branch", None
    if isinstance(node, ast.IfExp):
        yield "branch", copy.deepcopy(node.body)
        yield "branch", copy.deepcopy(node.orelse)
    if isinstance(node, ast.While):
        for cap in CAPS:
            counter = f"_mutant_i{cap}"
            yield "bound", ast.For(ast.Name(counter, ast.Store()),
                                   ast.Call(ast.Name("range", ast.Load()), [ast.Constant(cap)], []),
                                   [ast.If(ast.UnaryOp(ast.Not(), copy.deepcopy(node.test)), [ast.Break()], []),
                                    *copy.deepcopy(node.body)], copy.deepcopy(node.orelse))


OPERATORS: tuple[Callable, ...] = (op_compare, op_arith, op_constant, op_boolean, op_calls, op_dtype, op_return,
                                   op_branch)


# ------------------------------------------------------------------------------------------------
# sites: every node of a cell that an operator may change


def _skipped(node) -> bool:
    """Code whose change no grading can see or that is not the program: docstrings, messages, prints, asserts,
    annotations."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return True
    if isinstance(node, ast.Raise | ast.Assert | ast.JoinedStr):
        return True
    return isinstance(node, ast.Call) and _dotted(node.func) == "print"


def _walk(tree) -> Iterator[tuple[ast.AST, ast.AST, str, int | None]]:
    """(node, parent, field, index) of every node not under a skipped one, in a fixed order."""
    stack = [(tree, None, "", None)]
    while stack:
        node, parent, fld, idx = stack.pop(0)
        if parent is not None:
            yield node, parent, fld, idx
        for name, value in ast.iter_fields(node):
            if name in ("annotation", "returns", "decorator_list", "type_comment"):
                continue
            if isinstance(value, list):
                for i, child in enumerate(value):
                    if isinstance(child, ast.AST) and not _skipped(child):
                        stack.append((child, node, name, i))
            elif isinstance(value, ast.AST) and not _skipped(value):
                stack.append((value, node, name, None))


def _replace(parent, fld, idx, new) -> None:
    if idx is None:
        setattr(parent, fld, new)
        return
    seq = getattr(parent, fld)
    if isinstance(new, list) or new is None:
        seq[idx:idx + 1] = new or []
        if not seq:
            seq.append(ast.Pass())
    else:
        seq[idx] = new


@dataclass(frozen=True)
class Mutant:
    id: str
    exercise: str          # the solution cell's grade id
    operator: str
    source: str            # the mutated cell, unparsed
    line: str              # the changed line(s): "old -> new"


def mutate(cell: str, source: str, seen: Seen | None = None) -> list[Mutant]:
    """Every mutant of one solution cell's ``source``, each once (by id), in a fixed order (``seen``: what the
    solution's returns handed back while graded, for the int/float operator)."""
    original = ast.unparse(ast.parse(source))
    out: dict[str, Mutant] = {}
    n_sites = sum(1 for _ in _walk(ast.parse(source)))
    for k in range(n_sites):
        node = next(n for i, (n, *_) in enumerate(_walk(ast.parse(source))) if i == k)
        ctx = {"seen": (seen.kinds if seen else {}).get((cell, k), {})}
        for op in OPERATORS:
            for j, (label, _) in enumerate(list(op(node, ctx))):
                tree = ast.parse(source)
                site, parent, fld, idx = next(s for i, s in enumerate(_walk(tree)) if i == k)
                _, new = list(op(site, ctx))[j]
                _replace(parent, fld, idx, new)
                try:
                    text = ast.unparse(ast.fix_missing_locations(tree))
                    compile(text, cell, "exec")
                except (SyntaxError, ValueError, TypeError, RecursionError):
                    continue
                if text == original:
                    continue
                mid = hashlib.sha256(f"{cell}\0{label}\0{text}".encode()).hexdigest()[:10]
                out.setdefault(mid, Mutant(mid, cell, label, text, changed_line(original, text)))
    return list(out.values())


def changed_line(original: str, mutated: str) -> str:
    """The lines the mutant changes, as ``old -> new`` (stripped; several joined with `` | ``)."""
    old, new = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, original.splitlines(), mutated.splitlines(),
                                                       autojunk=False).get_opcodes():
        if tag != "equal":
            old += [s.strip() for s in original.splitlines()[i1:i2]]
            new += [s.strip() for s in mutated.splitlines()[j1:j2]]
    text = f"{' | '.join(old) or '(nothing)'} -> {' | '.join(new) or '(removed)'}"
    return text if len(text) <= 400 else text[:397] + "..."
