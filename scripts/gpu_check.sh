#!/usr/bin/env bash
# One-shot GPU check of the paged-attention kernels (lib/servelab/kernels), for a session with a CUDA GPU:
#   1. tests/test_kernels.py with compiled kernels: every CPU test, plus the GPU-only ones (bf16 against the
#      float64 reference, a cache past 2**31 elements, run-to-run determinism); tests/test_kernels_bench.py
#      (the bench's smoke run, now on the GPU);
#   2. python -m servelab.kernels.bench --sweep: copy bandwidth, each configuration against SDPA, the goals,
#      and a sweep of tile / warp / stage / split settings around the defaults (so one run also says
#      whether another default would do better); it writes bench/kernels_results.md.
# Both run even if the first fails; the exit status is 1 if either failed, 2 without a GPU.
#
#   scripts/gpu_check.sh            # about 5 minutes on an H200 (estimate: never run yet)
#   BENCH_ARGS= scripts/gpu_check.sh    # the bench without the sweep (BENCH_ARGS replaces --sweep)
#   PYTHON=/path/to/python scripts/gpu_check.sh
#
# Checked without a GPU against an older Triton than the pin (triton 3.6.0 with torch 2.13.0 CPU; GPU images with
# torch 2.11 carry it): every kernel compiles for sm_90 (compile_check), and the kernel tests pass in its interpreter with
# numpy 2.3 (3.6's interpreter itself fails under numpy >= 2.4; compiled kernels, as here, do not use it).
# It needs a Python with CUDA torch and triton, and pytest; not this repo's .venv (CPU torch) nor nbval:
# the repo's pytest addopts (--nbval) are cleared. Logs go to bench/out/; when $OUT is set (a device
# machine in this workplace) the results file and logs are copied there too.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/lib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
LOGS=bench/out
mkdir -p "$LOGS"

"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU: nothing checked')" || exit 2
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null || true
"$PY" -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"

status=0
echo "== kernel tests on the GPU"
timeout 240 "$PY" -m pytest tests/test_kernels.py tests/test_kernels_bench.py -q -p no:cacheprovider -o addopts="" -ra --durations=10 \
  2>&1 | tee "$LOGS/kernels_gpu_tests.log" || status=1
echo "== benchmark"
# shellcheck disable=SC2086  # BENCH_ARGS is a list of words
timeout 300 "$PY" -m servelab.kernels.bench ${BENCH_ARGS---sweep} 2>&1 | tee "$LOGS/kernels_gpu_bench.log" || status=1

if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
  cp bench/kernels_results.md "$LOGS"/kernels_gpu_*.log "$OUT"/ 2>/dev/null || true
fi
exit $status
