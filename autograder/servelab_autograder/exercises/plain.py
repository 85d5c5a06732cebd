"""Plain data: what crosses from the learner's kernel to the grader. JSON, and nothing that runs.

:func:`encode` turns what a learner's code returned into JSON-able values; :func:`decode` turns those back
into Python values on the trusted side. Lists, ``None``, bools, ints, finite floats and strings stand for
themselves; everything else is a tagged object ``{"$": tag, ...}``:

| tag | for | decoded as |
|---|---|---|
| ``tuple`` | tuples (named ones too) | ``tuple`` |
| ``dict`` | dicts (keys of any plain kind) | ``dict`` |
| ``float`` | ``nan``, ``inf``, ``-inf`` | ``float`` |
| ``number`` | numpy scalars, int and float subclasses | the numpy scalar, or ``int``/``float`` |
| ``array`` | numpy arrays and torch tensors (CPU copy) | ``numpy.ndarray`` |
| ``object`` | anything else: only its type's name and a short repr cross | :class:`Opaque` |

An object whose ``__eq__`` always says yes therefore arrives as an :class:`Opaque` and equals nothing. Sizes
are capped both ways (:data:`MAX_ITEMS`, :data:`MAX_DEPTH`, :data:`MAX_ARRAY_BYTES`): past them a value is
an ``object`` that says why.
"""

from __future__ import annotations

import base64
import math
import numbers

MAX_DEPTH = 20
MAX_ITEMS = 200_000          # list items and dict entries in one value, all levels together
MAX_ARRAY_BYTES = 64 << 20
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
          "float32", "float64", "complex64", "complex128")


_SELF = (int, str, bool, type(None))   # values that stand for themselves


class Opaque:
    """A value the learner's code returned that has no plain form: its type's name and a short repr."""

    __slots__ = ("type", "repr")

    def __init__(self, type_name: str, text: str):
        self.type, self.repr = type_name, text

    def __repr__(self) -> str:
        return self.repr

    def __eq__(self, other) -> bool:
        return False

    __hash__ = object.__hash__


def _short(x) -> str:
    try:
        text = repr(x)
    except Exception as e:  # noqa: BLE001 - a hostile __repr__
        text = f"<{type(x).__name__}: repr raised {type(e).__name__}>"
    return text if len(text) <= 200 else text[:197] + "..."


def _qualname(x) -> str:
    t = type(x)
    return f"{t.__module__}.{t.__qualname__}" if t.__module__ not in ("builtins", None) else t.__qualname__


def encode(x, _depth: int = 0, _budget: list | None = None):
    """``x`` as JSON-able plain data (see the module's table)."""
    budget = _budget if _budget is not None else [MAX_ITEMS]
    if _depth > MAX_DEPTH:
        return {"$": "object", "type": _qualname(x), "repr": f"nested more than {MAX_DEPTH} levels deep"}
    t = type(x)
    if x is None or t is bool or t is int or t is str:
        return x
    if t is float:
        return x if math.isfinite(x) else {"$": "float", "v": repr(x)}
    if t is list or t is tuple or isinstance(x, list | tuple):
        budget[0] -= len(x)
        if budget[0] < 0:
            return {"$": "object", "type": _qualname(x), "repr": f"more than {MAX_ITEMS} items"}
        if t is list and all(type(v) in _SELF for v in x):   # the common case, made fast: token ids
            return list(x)
        items = [encode(v, _depth + 1, budget) for v in x]
        return items if isinstance(x, list) else {"$": "tuple", "v": items}
    if isinstance(x, dict):
        budget[0] -= len(x)
        if budget[0] < 0:
            return {"$": "object", "type": _qualname(x), "repr": f"more than {MAX_ITEMS} items"}
        return {"$": "dict", "v": [[encode(k, _depth + 1, budget), encode(v, _depth + 1, budget)]
                                   for k, v in x.items()]}
    array = _as_numpy(x)
    if array is not None:
        return array
    if isinstance(x, numbers.Number) and hasattr(x, "dtype") and str(getattr(x, "dtype", "")) in DTYPES:
        value = x.item()
        return {"$": "number", "dtype": str(x.dtype), "v": encode(value, _depth + 1, budget)}
    if isinstance(x, bool | numbers.Integral):
        return {"$": "number", "dtype": "int", "v": int(x)}
    if isinstance(x, numbers.Real):
        return {"$": "number", "dtype": "float", "v": encode(float(x), _depth + 1, budget)}
    return {"$": "object", "type": _qualname(x), "repr": _short(x)}


def _as_numpy(x):
    """A tagged array for a numpy array or a torch tensor, else None (without importing either)."""
    mod = type(x).__module__ or ""
    if mod.startswith("torch") and hasattr(x, "detach"):
        try:
            x = x.detach().cpu()
            kind = "tensor"
            if str(x.dtype) == "torch.bfloat16":
                x = x.float()
            x = x.numpy()
        except Exception as e:  # noqa: BLE001
            return {"$": "object", "type": _qualname(x), "repr": f"a tensor that could not be read: {e}"}
    elif mod == "numpy" and type(x).__name__ == "ndarray":
        kind = "ndarray"
    else:
        return None
    if str(x.dtype) not in DTYPES:
        return {"$": "object", "type": _qualname(x), "repr": f"an array of dtype {x.dtype}"}
    if x.nbytes > MAX_ARRAY_BYTES:
        return {"$": "object", "type": _qualname(x), "repr": f"an array of {x.nbytes} bytes"}
    import numpy as np

    data = np.ascontiguousarray(x).tobytes()
    return {"$": "array", "kind": kind, "dtype": str(x.dtype), "shape": list(x.shape),
            "b64": base64.b64encode(data).decode("ascii")}


class Malformed(ValueError):
    """What arrived is not plain data as :func:`encode` makes it."""


def decode(x, _depth: int = 0):
    """Plain data back into Python values (trusted side). Raises :class:`Malformed` for anything else."""
    if _depth > MAX_DEPTH + 2:
        raise Malformed("nested too deep")
    if x is None or isinstance(x, bool | int | str):
        return x
    if isinstance(x, float):
        return x
    if isinstance(x, list):
        if all(type(v) in _SELF for v in x):
            return list(x)
        return [decode(v, _depth + 1) for v in x]
    if not isinstance(x, dict) or not isinstance(x.get("$"), str):
        raise Malformed(f"unexpected {type(x).__name__}")
    tag = x["$"]
    if tag == "tuple":
        return tuple(decode(v, _depth + 1) for v in _list(x.get("v")))
    if tag == "dict":
        out = {}
        for pair in _list(x.get("v")):
            if not isinstance(pair, list) or len(pair) != 2:
                raise Malformed("a dict entry is not a pair")
            key = decode(pair[0], _depth + 1)
            try:
                out[key] = decode(pair[1], _depth + 1)
            except TypeError:
                raise Malformed("a dict key is not hashable") from None
        return out
    if tag == "float":
        if x.get("v") not in ("nan", "inf", "-inf"):
            raise Malformed("a float that is not nan or inf")
        return float(x["v"])
    if tag == "number":
        value = decode(x.get("v"), _depth + 1)
        dtype = x.get("dtype")
        if dtype == "int" and isinstance(value, int) and not isinstance(value, bool):
            return value
        if dtype == "float" and isinstance(value, float):
            return value
        if dtype in DTYPES and isinstance(value, int | float | bool):
            import numpy as np

            return np.dtype(dtype).type(value)
        raise Malformed(f"a number of dtype {dtype!r}")
    if tag == "array":
        import numpy as np

        dtype, shape = x.get("dtype"), x.get("shape")
        if dtype not in DTYPES or not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise Malformed("an array with a bad dtype or shape")
        try:
            data = base64.b64decode(str(x.get("b64", "")), validate=True)
        except ValueError:
            raise Malformed("an array whose data is not base64") from None
        if len(data) > MAX_ARRAY_BYTES or len(data) != math.prod(shape) * np.dtype(dtype).itemsize:
            raise Malformed("an array whose data does not fit its shape")
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    if tag == "object":
        return Opaque(str(x.get("type", "?"))[:200], str(x.get("repr", ""))[:400])
    raise Malformed(f"unknown tag {tag!r}")


def _list(v) -> list:
    if not isinstance(v, list):
        raise Malformed("expected a list")
    return v
