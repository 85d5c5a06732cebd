"""Launching a learner's Triton kernel for chapter 06's drivers, and watching what it touches.

A kernel is checked before it runs (:func:`check_kernel`: a ``@triton.jit`` kernel of the learner's own, not the
library's, nor one that calls the library's tile loops) and launched quietly (:func:`launch`: nbgrader counts
stderr as a failure), after a check that it would compile for a GPU too (``servelab.kernels.frontend``). In
Triton's interpreter a :class:`Watch` drops and counts every load and store outside the case's tensors and records
the loads of the buffers it watches; :func:`margined` puts an output between rows of NaN, so a store outside it
is handed back with it.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings

import numpy as np
import torch

import servelab.kernels  # noqa: F401  (first: it chooses the interpreter before anything is decorated)
from servelab.kernels import frontend
from servelab.kernels.launch import interpreted
from servelab_autograder.exercises import spec

SHORT = spec.SHORT
MARGIN = 16                                        # NaN rows before and after every out (BLOCK_H is 16)
# the library's tile loops: a kernel that calls one has not written its own
_LIBRARY_LOOPS = {"attend_tiles", "paged_decode_kernel", "split_kv_decode_kernel", "merge_splits_kernel",
                  "split_partials_kernel", "store_kvcache_kernel", "prefill_attention_kernel"}


class Watch:
    """While a launch runs in Triton's interpreter, every load and store outside the ``buffers`` is dropped (a
    load gets ``other``) and counted in :attr:`stray`; loads of the ``watched`` buffers are kept in
    :attr:`reads` as (program, buffer, element indices). Off for a compiled kernel."""

    def __init__(self, on: bool, buffers: dict, watched: tuple[str, ...] = ()):
        self.on = on
        self.regions = [(name, t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), t.element_size())
                        for name, t in buffers.items()]
        self.watched = watched
        self.reads: list[tuple[tuple[int, int], str, np.ndarray]] = []
        self.stray = 0

    def _keep(self, ptrs, mask, program, load: bool) -> np.ndarray:
        addrs = np.asarray(ptrs.data, dtype=np.uint64)
        want = np.broadcast_to(np.asarray(mask.data, dtype=bool), addrs.shape)
        keep = np.zeros(addrs.shape, dtype=bool)
        for name, lo, hi, size in self.regions:
            inside = want & (addrs >= lo) & (addrs < hi)
            keep |= inside
            if load and name in self.watched and inside.any():
                self.reads.append((program, name, ((addrs[inside] - lo) // size).astype(np.int64)))
        self.stray += int((want & ~keep).sum())
        return keep

    @contextlib.contextmanager
    def active(self):
        if not self.on:
            yield
            return
        from triton.runtime import interpreter as interp

        builder, handle = interp.interpreter_builder, interp.TensorHandle
        load, store = builder.create_masked_load, builder.create_masked_store

        def watched_load(ptrs, mask, other, cache_policy, is_volatile):
            keep = self._keep(ptrs, mask, tuple(builder.grid_idx[:2]), True)
            return load(ptrs, handle(keep, mask.dtype), other, cache_policy, is_volatile)

        def watched_store(ptrs, value, mask, cache_policy):
            return store(ptrs, value, handle(self._keep(ptrs, mask, None, False), mask.dtype), cache_policy)

        builder.create_masked_load, builder.create_masked_store = watched_load, watched_store
        try:
            yield
        finally:
            del builder.create_masked_load, builder.create_masked_store


def check_kernel(kernel, name: str) -> None:
    fn = getattr(kernel, "fn", None)
    if not callable(fn) or not hasattr(kernel, "__getitem__"):
        raise TypeError(f"{name} is {SHORT.repr(kernel)}, not a @triton.jit kernel: decorate the function with "
                        "@triton.jit")
    if (getattr(fn, "__module__", "") or "").startswith("servelab."):
        raise TypeError(f"{name} is {fn.__module__}.{fn.__name__}, a kernel of the library: write your own")
    code = getattr(fn, "__code__", None)
    borrowed = sorted(set(code.co_names if code is not None else ()) & _LIBRARY_LOOPS)
    if borrowed:
        raise TypeError(f"your {name} calls {borrowed[0]} from servelab.kernels: write the loop yourself")


def device_of(kernel) -> str:
    """Where a kernel's tensors live: the CPU in the interpreter, the GPU for a compiled kernel."""
    return "cpu" if interpreted(kernel) else "cuda"


def _compiles_for_gpu(kernel, launcher, *args, **kwargs) -> None:
    """Raise when an interpreted ``kernel`` would not compile for a GPU with the arguments ``launcher`` gives it
    (``servelab.kernels.frontend``: the interpreter promotes a loop-carried fp16 to fp32 and reads "-inf" as a
    float; the compiler refuses both). The launcher runs with the kernel's launch captured, not run."""
    if not interpreted(kernel):
        return
    from triton.runtime.interpreter import InterpretedFunction

    launches, original = [], InterpretedFunction.__getitem__

    def capture(self, grid):
        if self is not kernel:
            return original(self, grid)
        return lambda *a, **kw: launches.append((a, kw))

    InterpretedFunction.__getitem__ = capture
    try:
        launcher(kernel, *args, **kwargs)
    finally:
        InterpretedFunction.__getitem__ = original
    for a, kw in launches[:1]:
        error = frontend.frontend_error(kernel, a, kw)
        if error:
            raise TypeError(f"{kernel.fn.__name__} runs in Triton's interpreter but would not compile for a GPU "
                            f"(Triton's compiler, sm_90): {error}")


def launch(kernel, watch: Watch, launcher, *args, **kwargs) -> None:
    """``launcher(kernel, *args)``, quiet (nbgrader counts stderr as a failure); what the kernel raised, not the
    interpreter's wrapper around it. First, that the kernel would compile for a GPU."""
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()), watch.active():
            warnings.simplefilter("ignore")
            _compiles_for_gpu(kernel, launcher, *args, **kwargs)
            launcher(kernel, *args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the learner's own exception, unwrapped, goes on up
        while type(e).__name__ == "InterpreterError" and e.__cause__ is not None:
            e = e.__cause__
        raise e from None


def margined(shape, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(buffer, out): out [*shape] is the middle of a NaN buffer of MARGIN rows more on each side."""
    rows = math.prod(shape[:-1])
    buf = torch.full((MARGIN + rows + MARGIN, shape[-1]), float("nan"), dtype=dtype, device=device)
    return buf, buf[MARGIN:MARGIN + rows].view(*shape)


__all__ = ["MARGIN", "Watch", "check_kernel", "device_of", "launch", "margined"]
