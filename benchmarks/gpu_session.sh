#!/usr/bin/env bash
# The GPU checks of one lent GPU machine, in one device call (benchmarks/README.md, "GPU"):
#
#   bash benchmarks/gpu_session.sh                         on the GPU machine
#   GPU_SESSION_DRY_RUN=1 bash benchmarks/gpu_session.sh   (or --cpu) anywhere: the same steps
#       on CPU stand-ins, tiny, nothing recorded (CI runs it: tests/test_gpu_session.py)
#
# Steps, in this order, each under its own time limit (its budget): gpu_packing (trial
# processes reused, passed explicitly), fusion_cuda, bubbles, gpu_tests. A step that fails
# or runs out of time does not stop the next one. Each writes $OUT/<step>.log and
# $OUT/<step>.json (the benchmark's JSON line; for the tests, pytest's summary), and
# $OUT/session.json lists the plan and each step's rc, seconds and budget
# (benchmarks/_gpu_session.py). $OUT: the device tool's output folder, or ./gpu-out.
#
# Packages the machine lacks travel as wheels in .whl/ (git-ignored: pass carry [".whl"] to the
# device call); without .whl/ the machine's own packages are used. Either way the modules the
# steps import are checked first and the missing ones named in session.json.
set -u
DRY=${GPU_SESSION_DRY_RUN:-0}
[ "${1:-}" = "--cpu" ] && DRY=1
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/nvidia/bin

# ---- the plan: budgets in seconds, the sum at most SESSION_BUDGET (9 of the 15 lent minutes;
# the rest is the machine's start-up, the wheels and the transfers). A step gets SIGINT
# GRACE s before its budget ends (gpu_packing then records the rounds it finished; pytest's
# summary is written as it goes) and SIGKILL at the budget.
# Expected times on the H200 for the sizes below, from RESULTS.md's GPU sections:
SESSION_BUDGET=540
GRACE=20
# gpu_packing: 3 alternating rounds x 9 trials (one ASHA bracket, 1-9 epochs) of fifo, auto,
#   waterfill and Optuna n_jobs=1, after the uncounted first auto run. Modelled, not measured
#   with reuse (epochs 0.13-0.65 s; a launch 6.5 s without reuse, 0.5 s with it as
#   gpu_packing_whatif assumes): about 20 s cluster and imports, 35 s the first run, 50-55 s a
#   round (fifo 19, auto 14, waterfill 8, Optuna 13), so about 215 s. The full default
#   (27 trials) would take about 500 s.
T_PACK=${T_PACK:-240}
PACK_ROUNDS=${PACK_ROUNDS:-3} PACK_TRIALS=${PACK_TRIALS:-9}
# fusion_cuda: --blocks 5 (the whole benchmark ran inside a 60 s limit); about 25 s.
T_FUSION=${T_FUSION:-40}
# bubbles: 2 repetitions (alone then guests, guests then alone: a balanced A/B), 20
#   iterations. About 90 s a repetition, most of it process starts (2 stages, 2 guests, 2
#   solo guests; torch, CUDA, MPS), 0.2 s an iteration; so about 180 s. The third
#   repetition runs in the next call.
T_BUB=${T_BUB:-190}
BUB_REPS=${BUB_REPS:-2} BUB_ITERATIONS=${BUB_ITERATIONS:-20}
# gpu_tests: what is left. 7 of the 8 tests took 189 s (45-50 s each for the two that start
#   a LocalCUDACluster and the bubble fill test, 5-19 s the others), so about 230 s. This
#   call runs what fits in 70 s, first those GPU_TESTS_FIRST names (parts of node ids: the
#   tune()-into-a-CUDA-host test, about 40 s); $OUT/gpu_tests.json lists the others as
#   not_run, for the next call (GPU_TESTS=<their ids>).
T_TESTS=${T_TESTS:-70}
GPU_TESTS=${GPU_TESTS:-tests/gpu}
GPU_TESTS_FIRST=${GPU_TESTS_FIRST-test_tune_places_gpu_trials_into_a_cuda_hosts_bubbles}
ORDER="gpu_packing fusion_cuda bubbles gpu_tests"
STEPS=${STEPS:-$ORDER}  # a subset to run (in ORDER's order), e.g. STEPS="bubbles gpu_tests"

# a step's time limit is its budget times LIMIT_FACTOR: 1 on the device; a dry run checks
# the script's plumbing on CPU stand-ins, whose time on a loaded machine says nothing of the
# GPU's, so it runs under 4 budgets (the plan and each step still name the budget)
LIMIT_FACTOR=1
if [ "$DRY" != 0 ]; then  # CPU stand-ins, sizes that only exercise the code; nothing recorded
  LIMIT_FACTOR=${GPU_SESSION_DRY_LIMIT_FACTOR:-4}
  export NBTUNE_BENCH_NO_RECORD=1
  PACK_ROUNDS=1 PACK_TRIALS=2
  PACK_ENV=(NBTUNE_BENCH_MAX_EPOCHS=3) PACK_ARGS=(--cpu)
  FUSION_ARGS=(--device cpu --members 2 --rounds 1 --blocks 1 --threads 1)
  BUB_ARGS=(--device cpu --reps 1 --iterations 40 --width 128 --depth 4 --batch 32
            --guest-width 32 --guest-batch 16)
else
  # each benchmark's record lands in $OUT, which comes back: append it to
  # benchmarks/results.jsonl there. A tree copied without .git records no commit: pass
  # NBTUNE_BENCH_COMMIT=$(git rev-parse HEAD) to the call.
  export NBTUNE_BENCH_RESULTS=${NBTUNE_BENCH_RESULTS:-$OUT/results.jsonl}
  PACK_ENV=() PACK_ARGS=()
  FUSION_ARGS=(--device cuda --blocks 5)
  BUB_ARGS=(--device cuda --reps "$BUB_REPS" --iterations "$BUB_ITERATIONS")
fi

budget_of() {
  case $1 in gpu_packing) echo "$T_PACK" ;; fusion_cuda) echo "$T_FUSION" ;;
    bubbles) echo "$T_BUB" ;; gpu_tests) echo "$T_TESTS" ;; *) echo 0 ;; esac
}
PLAN=() TOTAL=0
for s in $STEPS; do
  [[ " $ORDER " == *" $s "* ]] || { echo "unknown step '$s' (steps: $ORDER)"; exit 2; }
done
for s in $ORDER; do
  [[ " $STEPS " == *" $s "* ]] || continue
  b=$(budget_of "$s")
  (( b > GRACE )) || { echo "budget of $s: $b s, not more than the $GRACE s grace"; exit 2; }
  PLAN+=("$s=$b"); TOTAL=$((TOTAL + b))
done
if (( TOTAL > SESSION_BUDGET )); then
  echo "the steps' budgets sum to $TOTAL s, more than the session's $SESSION_BUDGET s: nothing run"
  exit 2
fi
for s in $ORDER; do rm -f "$OUT/$s.json" "$OUT/$s.log"; done

# ---- the machine
{ if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode --format=csv
  else echo "no nvidia-smi"; fi
  echo "mps control: $(command -v nvidia-cuda-mps-control || echo none)"; nproc; "$PY" -V
} 2>&1 | tee "$OUT/env.log"
if [ "$DRY" = 0 ] && compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >>"$OUT/env.log" 2>&1 || echo "wheel install failed (env.log)"
  export PYTHONPATH=/tmp/site:$PWD
else
  [ "$DRY" = 0 ] && echo "no wheels in .whl/: the machine's own packages"
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
# the modules the steps import, found or not (without importing them: seconds, not minutes)
MODULES="torch numpy pandas scipy sklearn cloudpickle psutil sqlalchemy distributed optuna
         pytest hypothesis nbtune"
[ "$DRY" = 0 ] && MODULES="$MODULES pynvml dask_cuda"
# shellcheck disable=SC2086  # one argument per module
GPU_SESSION_MISSING=$("$PY" -c 'import importlib.util as u, sys
print(" ".join(m for m in sys.argv[1:] if u.find_spec(m) is None))' $MODULES)
export GPU_SESSION_MISSING
[ -n "$GPU_SESSION_MISSING" ] && echo "missing: $GPU_SESSION_MISSING" | tee -a "$OUT/env.log"
[ "$DRY" = 0 ] && "$PY" -c "import torch
print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" 2>&1 | tee -a "$OUT/env.log"
"$PY" benchmarks/_gpu_session.py plan "$OUT" "$DRY" "$SESSION_BUDGET" "${PLAN[@]}" || exit 2

mps_leftovers() {  # quit an MPS daemon a stopped step left (nbtune starts each in a dir of its own)
  [ "$DRY" = 0 ] && command -v nvidia-cuda-mps-control >/dev/null || return 0
  local p
  for p in "${TMPDIR:-/tmp}"/nbtune-mps-*/pipe; do
    [ -d "$p" ] || continue
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$p timeout 15 nvidia-cuda-mps-control >/dev/null 2>&1 &&
      echo "   (quit an MPS daemon left at $p)"
    rm -rf "$(dirname "$p")"
  done
}

run_step() {  # name command...: under the step's limit; its rc, seconds and JSON into $OUT
  local name=$1 budget limit rc start; shift
  [[ " $STEPS " == *" $name "* ]] || return 0
  budget=$(budget_of "$name")
  limit=$((budget * LIMIT_FACTOR))
  echo "== $name (budget $budget s, limit $limit s)"
  start=$EPOCHREALTIME
  timeout -s INT -k "$GRACE" "$((limit - GRACE))" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "== $name rc=$rc"
  tail -n 4 "$OUT/$name.log" | cut -c1-400
  mps_leftovers
  "$PY" benchmarks/_gpu_session.py step "$OUT" "$name" "$budget" "$rc" "$start" "$EPOCHREALTIME" \
    "$limit"
}

run_step gpu_packing env NBTUNE_BENCH_ROUNDS="$PACK_ROUNDS" NBTUNE_BENCH_TRIALS="$PACK_TRIALS" \
  "${PACK_ENV[@]}" "$PY" benchmarks/gpu_packing.py --reuse "${PACK_ARGS[@]}"
run_step fusion_cuda "$PY" benchmarks/fusion_throughput.py "${FUSION_ARGS[@]}"
run_step bubbles "$PY" benchmarks/bubble_squeeze.py "${BUB_ARGS[@]}"
# shellcheck disable=SC2086  # GPU_TESTS: one or more paths or node ids
run_step gpu_tests env NBTUNE_PYTEST_JSON="$OUT/gpu_tests.json" \
  NBTUNE_PYTEST_FIRST="$GPU_TESTS_FIRST" "$PY" -m pytest $GPU_TESTS -q -p no:cacheprovider \
  -p benchmarks._pytest_json -rs --durations=8

echo "== session ($OUT/session.json)"
"$PY" benchmarks/_gpu_session.py check "$OUT"
