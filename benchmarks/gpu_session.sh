#!/usr/bin/env bash
# The GPU checks of one lent GPU machine, in one call (see benchmarks/README.md, "GPU").
# Wheels for what the machine lacks travel in .whl/ (dask, distributed, dask-cuda, ...).
# Writes logs to $OUT (the device tool's output folder) or ./gpu-out.
set -u
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/nvidia/bin
# each benchmark's record (benchmarks/_results.py) lands in $OUT, which comes back; append
# it to benchmarks/results.jsonl there. A tree copied without .git records no commit: pass
# NBTUNE_BENCH_COMMIT=$(git rev-parse HEAD) to the call.
export NBTUNE_BENCH_RESULTS=${NBTUNE_BENCH_RESULTS:-$OUT/results.jsonl}
{ nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode --format=csv
  echo "mps control: $(command -v nvidia-cuda-mps-control || echo none)"; nproc; python3 -V
} 2>&1 | tee "$OUT/env.log"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD
python3 -c "import torch, dask_cuda, distributed, sqlalchemy, nbtune; print('torch', torch.__version__, 'dask_cuda', dask_cuda.__version__, 'cuda', torch.cuda.is_available())"
STEPS=${STEPS:-"bubbles gpu_tests fusion_cuda gpu_packing"}  # which of the steps below to run
step() { local t=$1 name=$2; shift 2; [[ " $STEPS " == *" $name "* ]] || return 0
  echo "== $name"; local s=$SECONDS
  timeout "$t" "$@" > "$OUT/$name.log" 2>&1; echo "== $name rc=$? in $((SECONDS-s)) s"; tail -n 6 "$OUT/$name.log"; }
step ${T_BUB:-330} bubbles python3 benchmarks/bubble_squeeze.py --device cuda --reps ${BUB_REPS:-3} --iterations 30
step ${T_TESTS:-150} gpu_tests python3 -m pytest tests/gpu -q -p no:cacheprovider -rs --durations=8
step ${T_FUSION:-60} fusion_cuda python3 benchmarks/fusion_throughput.py --device cuda --blocks 5
step ${T_PACK:-300} gpu_packing python3 benchmarks/gpu_packing.py
