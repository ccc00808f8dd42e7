#!/usr/bin/env bash
# The four-GPU measurements on one host of 4 GPUs, stage by stage, each stage's output under OUT:
#   bash tools/bench/four_gpus.sh OUT [scaling|fanout|dask|oracle|budgeted|tests]...
# scaling:  this repository's tuning.yaml tuned cold on 1, 2 and 4 GPUs (the bench stage with the
#           device workers started while the compiles run): tools.bench.bench_scaling --cold
# fanout:   the compile pool over tuning.yaml's GEMM space with 16 and 64 workers
# dask:     the bench stage on 4 GPUs through the local pool, a Dask cluster, and a Dask cluster
#           that loses a worker mid-run: tools.bench.bench_distributed --kill-after
# oracle:   the paper's whole benchmark, exhaustive, in one command on every GPU of the host
# budgeted: the same, budgeted (surrogate, 50 configs a shape), judged by that oracle
# tests:    the GPU tests, on the first GPU
# Wheels for what the host lacks (doit, dask, distributed and their needs) are read from .whl/;
# the repository itself is installed in place (editable) where doit does not see it yet.
set -uo pipefail
TIMEFORMAT="wall %R s"
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=$1; shift
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$repo
[ -d /tmp/site/doit ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$repo"/.whl/*.whl
# `doit tune` finds aot_tune's commands through its installed entry points: install it in place
python3 -c "import importlib.metadata as m, sys; sys.exit(not m.entry_points(group='doit.LOADER', name='aot_tune'))" 2>/dev/null \
  || python3 -m pip install -q --no-deps --no-build-isolation -e "$repo" >/dev/null
cd "$repo"
search='{strategy: surrogate, budget: {configs: 50}}'
for stage in "$@"; do
  echo "== $stage $(date -u +%T)"
  case $stage in
    scaling)
      time python3 -m tools.bench.bench_scaling --cold --gpus 1 2 4 --save "$out/scaling.json" 2>&1 \
        | tee "$out/scaling.log" ;;
    fanout)
      for jobs in 16 64; do
        time python3 -m tools.bench.bench_compile --space manifest --fanout-only --jobs $jobs \
          --save "$out/fanout-$jobs.json" 2>&1 | tail -15 | tee "$out/fanout-$jobs.log"
      done ;;
    dask)
      time python3 -m tools.bench.bench_distributed --gpus 4 --executors local dask --kill-after 5 --budget-s 300 2>&1 \
        | tee "$out/dask.log" ;;
    oracle)
      rm -rf /tmp/wb4/oracle
      time python3 -m tools.studies.whole_benchmark oracle --m 256 512 1024 4096 --project /tmp/wb4/oracle \
        --out "$out/wb" 2>&1 | tail -40 | tee "$out/oracle.log" ;;
    budgeted)
      rm -rf /tmp/wb4/run
      time python3 -m tools.studies.whole_benchmark budgeted --search "$search" --project /tmp/wb4/run \
        --oracle "$out"/wb/oracle-*.tuning.pb --out "$out/wb" 2>&1 | tail -40 | tee "$out/budgeted.log" ;;
    tests)
      time CUDA_VISIBLE_DEVICES=0 python3 -m pytest -q -m gpu tests/gpu -x 2>&1 | tail -15 | tee "$out/gpu-tests.log" ;;
  esac
done
