"""One planned kernel launch: the kernel, its grid, its arguments and its compile options.

Each entry point plans its launches (``plan_paged_decode`` and friends), then runs them. Keeping the plan
separate lets ``compile_check`` compile exactly what a call would launch, for sm_90, on a machine without
a GPU.

The numeric choices every kernel makes alike live here too: padded tile sizes (``tl.arange`` and ``tl.dot``
need powers of two, and Hopper's tensor cores need a reduction dimension of at least 16), and whether bf16
is upcast after loading (Triton's interpreter computes garbage in bf16 arithmetic, so it only ever sees fp32).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import triton
from triton.runtime.interpreter import InterpretedFunction

# 1/ln(2): the kernels compute softmax with exp2, so scores are scaled by scale * LOG2E.
LOG2E = 1.4426950408889634


@dataclass
class Launch:
    """``kernel[grid](*args, **constexprs, **options)``, kept to run it or to compile it.

    ``options`` holds Triton's launch options (``num_warps``, ``num_stages``), which the interpreter ignores.
    """

    kernel: Any
    grid: tuple[int, ...]
    args: tuple
    constexprs: dict[str, Any]
    options: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return kernel_name(self.kernel)

    def run(self) -> None:
        device = next((a.device for a in self.args if isinstance(a, torch.Tensor)), None)
        if device is not None and device.type != "cuda" and not interpreted(self.kernel):
            raise ValueError(
                f"{self.name}: tensors are on {device}, but the kernels were compiled for a GPU. On a machine "
                "without CUDA, import servelab.kernels before triton decorates anything (it then sets "
                "TRITON_INTERPRET=1), or set TRITON_INTERPRET=1 yourself.")
        if 0 in self.grid:
            return
        self.kernel[self.grid](*self.args, **self.constexprs, **self.options)


def run_all(launches: list[Launch]) -> None:
    for launch in launches:
        launch.run()


def interpreted(kernel) -> bool:
    """Whether ``kernel`` was decorated for Triton's interpreter (so it runs on CPU tensors)."""
    return isinstance(kernel, InterpretedFunction)


def kernel_name(kernel) -> str:
    return getattr(kernel, "__name__", None) or kernel.fn.__name__


def padded(n: int, minimum: int = 16) -> int:
    """The tile size that holds ``n``: a power of two, at least ``minimum`` (sm_90's tl.dot needs 16 for 16-bit).

    >>> padded(64), padded(80), padded(5), padded(5, minimum=1)
    (64, 128, 16, 8)
    """
    return max(minimum, triton.next_power_of_2(n))


def dtype_constexprs(kernel, dtype: torch.dtype) -> dict[str, Any]:
    """``UPCAST`` and ``DOT_PRECISION`` for a kernel on ``dtype``.

    - UPCAST: bf16 in the interpreter is converted to fp32 right after each load, because the interpreter's
      bf16 arithmetic is wrong (it does numpy arithmetic on the raw 16-bit patterns). Compiled kernels keep
      bf16 operands for the tensor cores.
    - DOT_PRECISION: fp32 operands use "ieee" so that fp32 results match an fp32 reference; Triton's default
      for fp32 on NVIDIA GPUs is TF32 (10-bit mantissa). It only matters for fp32 operands.
    """
    upcast = interpreted(kernel) and dtype == torch.bfloat16
    return {"UPCAST": upcast, "DOT_PRECISION": "ieee" if dtype == torch.float32 or upcast else "tf32"}
