"""Paged-attention kernels in Triton: write K/V into a paged cache, decode, split-KV decode, chunked prefill.

The KV cache layout is vLLM's and nano-vllm's: K and V are separate tensors of shape
``[num_blocks, block_size, num_kv_heads, head_dim]``; a sequence owns the blocks listed in its row of an
int32 ``block_tables[num_seqs, max_blocks]`` and its token ``t`` lives in block ``block_tables[s, t // block_size]``
at offset ``t % block_size``.

Importing this package first decides how the kernels run. Triton picks compiled or interpreted execution
when ``@triton.jit`` decorates a function, so the choice has to be made before any kernel module is imported:
- ``TRITON_INTERPRET`` already in the environment: it is left alone (``0`` forces compilation, which the sm_90
  compile check needs on a machine without a GPU);
- otherwise, no CUDA device: ``TRITON_INTERPRET=1``, and every kernel runs on CPU tensors in Triton's interpreter.

``TRITON_DEFAULT_FP_FUSION`` is set to ``1`` unless already set: compiled kernels keep fusing a*b+c into FMA
(the default of the Triton versions this was checked with, 3.6 and 3.9), and Triton 3.9 stops warning that
the default will change.

>>> import servelab.kernels as K
>>> K.INTERPRETED in (True, False)
True
"""

from __future__ import annotations

import os


def _arrange_interpreter() -> None:
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    if "TRITON_INTERPRET" in os.environ:
        return
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


_arrange_interpreter()

from servelab.kernels.decode import paged_decode, paged_decode_kernel  # noqa: E402  (after the choice)
from servelab.kernels.launch import interpreted  # noqa: E402
from servelab.kernels.prefill import prefill_attention  # noqa: E402
from servelab.kernels.split_kv import choose_num_splits, decode_attention, split_kv_decode  # noqa: E402
from servelab.kernels.store import store_kvcache  # noqa: E402

# True when the kernels were decorated for Triton's interpreter (CPU tensors), False when compiled.
INTERPRETED: bool = interpreted(paged_decode_kernel)

__all__ = [
    "INTERPRETED",
    "choose_num_splits",
    "decode_attention",
    "paged_decode",
    "prefill_attention",
    "split_kv_decode",
    "store_kvcache",
]
