#!/usr/bin/env bash
# The one GPU run of the kernels (lib/servelab/kernels) and the engine (scripts/gpu_engine.py), made to count.
# A lent GPU machine gives about 15 minutes in all, its start included: one attempt. This run fits in 6 minutes
# (GPU_CHECK_BUDGET, 360 s), keeps whatever it measured when a step is cut short, and prints its budget:
#
#   step           limit  skipped with less left  what it leaves in the results file
#   preflight       20 s  -                       - (the log): a line per check; exit 2 when a GPU thing, a C
#                                                 compiler, Python.h, torch, triton or servelab is missing
#   kernel table   150 s  60 s                    the main table (no sweep), each row the moment it is measured
#   engine          80 s  45 s                    its own section, a row per batch size (1, 16, 64) as measured
#   GPU tests       90 s  45 s                    pytest -m gpu tests/test_kernels.py: its summary and failures
#   sweep         the rest, less 10 s; 40 s       tile / warp / stage / split settings row by row, then the
#                                                 winners and a tuning.TUNED_DECODE entry to commit by hand
#   then a section with the preflight's findings and each step's result and seconds.
#
# Each step runs under `timeout` at min(its limit, what is left); the kernel table, the engine and the sweep
# also start no new configuration 25-30 s before that (--budget), so they end on their own with a note.
# First run on an H200 (2026-12-04, bench/kernels_results.md): preflight 9 s, table 35 s, engine 15 s, tests 14 s, the
# sweep what remains (about 2 minutes for all of its 28 settings).
#
#   scripts/gpu_check.sh            # on a GPU machine: writes bench/kernels_results.md
#   scripts/gpu_check.sh --smoke    # anywhere, in about 30 s: the same steps on tiny shapes (without a GPU in
#                                   # Triton's interpreter), into bench/out/kernels_smoke.md (tests/test_gpu_check.py)
#   PYTHON=python3.12 GPU_CHECK_BUDGET=300 GPU_CHECK_RESULTS=/tmp/r.md scripts/gpu_check.sh
#
# It uses the machine's own python3 with its torch and triton (this repo's .venv cannot travel to a GPU
# machine): PYTHONPATH=lib:autograder, nothing installed; the repo's pytest addopts (--nbval) are cleared.
# Logs go to bench/out/ (GPU_CHECK_LOGS); when $OUT is set (a device machine in this workplace) the results
# file and logs are copied there after every step, so a run killed from outside still returns them.
# Exit status: 0 all passed; 1 a step failed or timed out, or pytest / numpy was missing (its step skipped);
# 2 the preflight found a GPU run impossible (then nothing is measured and the results file is left alone).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SMOKE=()
[ "${1:-}" = "--smoke" ] && SMOKE=(--smoke)
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET:-360}
LOGS=${GPU_CHECK_LOGS:-bench/out}
export PYTHONPATH="$PWD/lib:$PWD/autograder${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ ${#SMOKE[@]} -eq 0 ]; then
  RESULTS=${GPU_CHECK_RESULTS:-bench/kernels_results.md}
  unset TRITON_INTERPRET  # compiled kernels
else
  RESULTS=${GPU_CHECK_RESULTS:-$LOGS/kernels_smoke.md}
fi
mkdir -p "$LOGS" "$(dirname "$RESULTS")"
status=0
LAST_RC=0
STEPS=()

save() {
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    cp "$RESULTS" "$LOGS"/gpu_check_*.log "$OUT"/ 2>/dev/null || true
  fi
}

# step NAME LIMIT NEED FUNCTION [MODULE]: run FUNCTION with LIMIT=min(LIMIT, seconds left); skip it when fewer
# than NEED seconds are left, or when MODULE is not importable. Prints and records the budget either way.
step() {
  local name=$1 cap=$2 need=$3 fn=$4 module=${5:-} left=$((BUDGET - SECONDS)) start=$SECONDS rc verdict
  if [ "$left" -lt "$need" ]; then
    verdict="skipped: ${left} s left of ${BUDGET} s, it needs ${need} s"
  elif [ -n "$module" ] && ! "$PY" -c "import $module" 2>/dev/null; then
    verdict="skipped: no $module in $PY"
  fi
  if [ -n "${verdict:-}" ]; then
    echo "== $name: $verdict"
    STEPS+=("| $name | $verdict | 0 |")
    return
  fi
  LIMIT=$((cap < left ? cap : left))
  echo "== $name: up to ${LIMIT} s [${SECONDS} s elapsed, ${left} s left of ${BUDGET} s]"
  "$fn" 2>&1 | tee "$LOGS/gpu_check_$fn.log"
  rc=${PIPESTATUS[0]}
  LAST_RC=$rc
  case $rc in
    0) verdict=ok ;;
    124|137) verdict="stopped at its ${LIMIT} s limit" ;;
    *) verdict="failed (exit $rc)" ;;
  esac
  [ "$rc" -eq 0 ] || status=1
  echo "-- $name: $verdict in $((SECONDS - start)) s [${SECONDS} s elapsed, $((BUDGET - SECONDS)) s left]"
  STEPS+=("| $name | $verdict | $((SECONDS - start)) |")
  save
}

preflight() { timeout -k 5 "$LIMIT" "$PY" scripts/gpu_preflight.py "${SMOKE[@]}"; }

kernel_table() {
  timeout -k 5 "$LIMIT" "$PY" scripts/bench_kernels.py "${SMOKE[@]}" --out "$RESULTS" --budget $((LIMIT - 30))
}

engine() {
  local steps=()
  [ ${#SMOKE[@]} -eq 0 ] || steps=(--steps 1)
  timeout -k 5 "$LIMIT" "$PY" scripts/gpu_engine.py "${SMOKE[@]}" "${steps[@]}" --write --out "$RESULTS" \
    --budget $((LIMIT - 30))
}

gpu_tests() {
  local rc
  timeout -k 5 "$LIMIT" "$PY" -m pytest tests/test_kernels.py -m gpu -q -p no:cacheprovider -p no:nbval \
    -o addopts="" -ra --durations=5 2>&1 | tee "$LOGS/gpu_tests.out"
  rc=${PIPESTATUS[0]}
  {
    printf '\n## GPU tests (`pytest -m gpu tests/test_kernels.py`)\n\n'
    grep -E '^(FAILED|ERROR) ' "$LOGS/gpu_tests.out" | sed 's/^/- /'
    case $rc in
      124|137) echo "- stopped at its ${LIMIT} s limit" ;;
      *) echo "- $(tail -n 1 "$LOGS/gpu_tests.out" | sed 's/^[= ]*//; s/[= ]*$//')" ;;
    esac
  } >>"$RESULTS"
  return "$rc"
}

sweep() {
  timeout -k 5 "$LIMIT" "$PY" scripts/bench_kernels.py "${SMOKE[@]}" --sweep-only --out "$RESULTS" \
    --budget $((LIMIT - 25))
}

main() {
  echo "== budget: ${BUDGET} s; results: $RESULTS; python: $PY"
  step preflight 20 0 preflight
  if [ "$LAST_RC" -ne 0 ] && [ "$LAST_RC" -ne 1 ]; then  # 1: only optional things missing, their steps skip
    echo "preflight: a GPU run cannot work here (see above); nothing measured, $RESULTS left alone"
    save
    exit 2
  fi
  step "kernel table" 150 60 kernel_table
  step engine 80 45 engine numpy
  step "GPU tests" 90 45 gpu_tests pytest
  step sweep $((BUDGET - SECONDS - 10)) 40 sweep

  {
    printf '\n## The run (`scripts/gpu_check.sh%s`): %s s of a %s s budget\n\n' "${SMOKE[*]:+ --smoke}" "$SECONDS" "$BUDGET"
    sed -n 's/^preflight \(ok\|absent\|MISSING\) *\(.*\)/- \1: \2/p' "$LOGS/gpu_check_preflight.log"
    printf '\n| step | result | s |\n|---|---|---:|\n'
    printf '%s\n' "${STEPS[@]}"
  } >>"$RESULTS"
  echo "== done in ${SECONDS} s of ${BUDGET} s; results in $RESULTS"
  save
  exit $status
}

# sourced (tests/test_gpu_check.py tries `step` alone): define only
[ "${BASH_SOURCE[0]}" != "$0" ] || main
