"""Does a kernel that runs in Triton's interpreter also compile for a GPU?

The interpreter runs a kernel's Python with numpy: it accepts programs a GPU compile rejects. A loop-carried
value that changes type (``l = tl.zeros([16], dtype=tl.float16)`` then ``l = l * alpha + ...`` with an fp32
``alpha``) is promoted silently on the CPU; the compiler refuses it. A string where a number goes
(``tl.full([16], "-inf", ...)``) converts under numpy; the compiler refuses it. So a kernel checked only in the
interpreter can pass every test on the CPU and fail on its first GPU launch.

:func:`frontend_error` runs Triton's frontend (the kernel's source to Triton IR, for sm_90) on the arguments of
one launch, in a child process with ``TRITON_INTERPRET=0`` (in this process ``triton.language``'s own helpers
were made for the interpreter). No GPU is needed, and nothing runs: it only type-checks and lowers the kernel.

    python lib/servelab/kernels/frontend.py < request.json     # the child: prints {"error": ...}
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import types

_TYPES = {"torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.float64": "fp64",
          "torch.int32": "i32", "torch.int64": "i64", "torch.int16": "i16", "torch.int8": "i8",
          "torch.uint8": "u8", "torch.bool": "i1"}
_CACHE: dict[str, str | None] = {}
TIMEOUT_S = 120


def _is_constexpr(annotation) -> bool:
    return "constexpr" in (annotation if isinstance(annotation, str) else getattr(annotation, "__name__", ""))


def _kernel_fn(obj):
    """The Python function under a @triton.jit object (interpreted or not), or None."""
    fn = getattr(obj, "fn", None)
    return fn if inspect.isfunction(fn) else None


def _sources(fn, seen: dict) -> bool:
    """Collect ``fn``'s source and those of the @triton.jit helpers it calls, and the plain constants it reads,
    into ``seen``; False when it reads a global this check cannot carry to the child (then no verdict)."""
    if fn.__name__ in seen["sources"]:
        return True
    seen["sources"][fn.__name__] = textwrap.dedent(inspect.getsource(fn))
    for name in fn.__code__.co_names:
        if name not in fn.__globals__:
            continue
        value = fn.__globals__[name]
        if isinstance(value, types.ModuleType):
            if value.__name__ not in ("triton", "triton.language", "math"):
                return False
            seen["modules"][name] = value.__name__
        elif _kernel_fn(value) is not None:
            if not _sources(_kernel_fn(value), seen):
                return False
        elif value is None or isinstance(value, bool | int | float | str):
            seen["constants"][name] = value
    return True


def _argument_type(value) -> str | None:
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    dtype = getattr(value, "dtype", None)
    if dtype is not None and hasattr(value, "data_ptr"):
        return "*" + _TYPES[str(dtype)] if str(dtype) in _TYPES else None
    return None


def request(kernel, args: tuple, kwargs: dict) -> dict | None:
    """What the child needs to compile ``kernel[grid](*args, **kwargs)``, or None when it cannot be carried."""
    fn = _kernel_fn(kernel)
    if fn is None:
        return None
    seen = {"sources": {}, "modules": {}, "constants": {}}
    try:
        if not _sources(fn, seen):
            return None
    except (OSError, TypeError):
        return None
    params = inspect.signature(fn).parameters
    bound = dict(zip(params, args))
    bound.update(kwargs)
    signature, constexprs = {}, {}
    for name, p in params.items():
        value = bound.get(name, p.default)
        if _is_constexpr(p.annotation):
            if not (value is None or isinstance(value, bool | int | float | str)):
                return None
            signature[name], constexprs[name] = "constexpr", value
        else:
            kind = _argument_type(value)
            if kind is None:
                return None
            signature[name] = kind
    return {"name": fn.__name__, **seen, "signature": signature, "constexprs": constexprs}


def frontend_error(kernel, args: tuple, kwargs: dict) -> str | None:
    """Why ``kernel`` launched with these arguments would not compile for sm_90 (Triton's message, with the line
    and column), or None when it compiles or when the check cannot be made here."""
    req = request(kernel, args, kwargs)
    if req is None:
        return None
    text = json.dumps(req, sort_keys=True)
    # one compile per kernel source and argument types: the sizes (constexprs) rarely change whether it compiles,
    # and each compile is a child process
    key = hashlib.sha256(json.dumps([req["sources"], req["signature"]], sort_keys=True).encode()).hexdigest()
    if key not in _CACHE:
        env = {**os.environ, "TRITON_INTERPRET": "0"}
        try:
            done = subprocess.run([sys.executable, __file__], input=text,
                                  capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
            _CACHE[key] = json.loads(done.stdout.strip().splitlines()[-1])["error"] if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError, KeyError):
            _CACHE[key] = None
    return _CACHE[key]


def _short(error: Exception) -> str:
    """Triton's CompilationError as "`the line`: the reason" (it quotes the source, which the learner has)."""
    lines = str(error).splitlines()
    caret = next((i for i, ln in enumerate(lines) if ln.strip() == "^"), None)
    code = lines[caret - 1].strip() if caret else ""
    cause = [ln.strip() for ln in str(error.__cause__ or "").splitlines() if ln.strip()]
    reason = cause or [ln.strip() for ln in lines[(caret or 0) + 1:] if ln.strip()] or [type(error).__name__]
    text = reason[0] if len(reason) == 1 else f"{reason[0]} ... {reason[-1]}"
    return f"`{code}`: {text}" if code else text


def _compile(req: dict) -> str | None:
    import triton
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend

    head = ["import triton", "import triton.language as tl"]
    head += [f"import {module} as {name}" for name, module in req["modules"].items()]
    head += [f"{name} = {value!r}" for name, value in req["constants"].items()]
    body = "\n\n".join(f"@triton.jit\n{src}" if not src.lstrip().startswith("@") else src
                       for src in reversed(list(req["sources"].values())))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "learner_kernel.py")
        with open(path, "w") as f:
            f.write("\n".join(head) + "\n\n\n" + body + "\n")
        spec = importlib.util.spec_from_file_location("learner_kernel", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        kernel = getattr(module, req["name"])
        target = GPUTarget("cuda", 90, 32)
        backend = make_backend(target)
        options = backend.parse_options({})
        context = ir.context()
        ir.load_dialects(context)
        backend.load_dialects(context)
        source = ASTSource(kernel, req["signature"], req["constexprs"])
        try:
            source.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                           context)
        except triton.CompilationError as e:
            return _short(e)
    return None


@contextlib.contextmanager
def _quiet():
    with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
        yield


def main() -> None:
    req = json.loads(sys.stdin.read())
    import warnings

    warnings.simplefilter("ignore")
    with _quiet():
        error = _compile(req)
    print(json.dumps({"error": error}))


if __name__ == "__main__":
    main()
