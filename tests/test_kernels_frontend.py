"""servelab.kernels.frontend: a kernel the interpreter runs, checked against Triton's compiler for sm_90 (no GPU).

The interpreter promotes a loop-carried fp16 value to fp32 and reads a string as a float; the compiler refuses
both. Chapter 06's grading runs this check before it launches a learner's kernel."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import servelab.kernels  # noqa: F401  (first: it chooses the interpreter on a machine without CUDA)
from servelab.kernels.frontend import frontend_error


@triton.jit
def running_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc = acc + tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


@triton.jit
def running_sum_fp16_acc(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float16)          # fp16 + fp32 loads: fp32 after the first round
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc = acc + tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


@triton.jit
def fill_minus_inf_string(out_ptr, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.full([BLOCK], "-inf", dtype=tl.float32))


def _args():
    return (torch.ones(40), torch.zeros(16), 40), {"BLOCK": 16}


def test_a_kernel_that_compiles_has_no_error():
    args, kwargs = _args()
    assert frontend_error(running_sum, args, kwargs) is None


def test_a_loop_carried_fp16_accumulator_is_refused_with_the_compilers_reason():
    args, kwargs = _args()
    error = frontend_error(running_sum_fp16_acc, args, kwargs)
    assert error is not None and "Loop-carried variable acc" in error and "fp16" in error, error


def test_a_string_where_a_float_goes_is_refused_and_the_line_is_quoted():
    error = frontend_error(fill_minus_inf_string, (torch.zeros(16),), {"BLOCK": 16})
    assert error is not None and '"-inf"' in error, error


def test_the_interpreter_itself_runs_both_wrong_kernels():
    """What the check is for: on the CPU both wrong kernels run and the fp16 one even gives the right sums."""
    x, out = torch.ones(40), torch.zeros(16)
    running_sum_fp16_acc[(1,)](x, out, 40, BLOCK=16)
    assert out.tolist() == [3.0] * 8 + [2.0] * 8
