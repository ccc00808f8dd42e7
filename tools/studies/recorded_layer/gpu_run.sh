#!/usr/bin/env bash
# The recorded-layer study on a GPU host: fla-core's chunked delta rule (one training step,
# B=1, T=4096, 16 heads of 128, bf16) recorded, tuned in one `aot_tune tune`, and its first and
# steady-state steps timed with the tables and with the library's own run-time autotuning.
#   bash tools/studies/recorded_layer/gpu_run.sh OUT_DIR [record|tune|tables|library]...
# WORKLOAD=rows takes fla-core's row kernels instead (rows_step.py: RMSNorm, LayerNorm and
# SwiGLU, forward and backward; record and tune only).
# Wheels for what the host lacks (doit, fla-core) are read from .whl/; the project is
# /tmp/<workload>.
set -uo pipefail
TIMEFORMAT="wall %R s"
repo=$(cd "$(dirname "$0")/../../.." && pwd)
out=$1; shift
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$repo
[ -d /tmp/site/fla ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site "$repo"/.whl/*.whl
workload=${WORKLOAD:-delta_rule}
step="python3 $repo/tools/studies/recorded_layer/${workload}_step.py"
mkdir -p /tmp/$workload && cd /tmp/$workload
for stage in "$@"; do
  echo "== $stage $(date -u +%T)"
  case $stage in
    record)  # a cold Triton cache: the launches compile the library's first configs
      time (TRITON_CACHE_DIR=/tmp/tc_record python3 -m aot_tune record -- $step --steps 3 2>&1 | tail -40 \
        | tee "$out/$workload-record.log")
      cp tuning.yaml "$out/$workload-tuning.yaml" ;;
    tune)
      time (python3 -m aot_tune tune 2>&1 | tail -60 | tee "$out/$workload-tune.log"); cp .aot_tune/runs.json "$out/$workload-runs.json"
      python3 "$repo/tools/studies/recorded_layer/picked_compiles.py" . | tee "$out/$workload-picked.log"
      tar czf "$out/$workload-generated.tgz" generated recordings tuning.yaml ;;
    restore)  # the project a run on another host recorded and tuned (.layer/<workload>-generated.tgz, from the tune stage)
      tar xzf "$repo/.layer/$workload-generated.tgz" ;;
    profile)  # the first step with the tables and a warm Triton cache, profiled
      TRITON_CACHE_DIR=/tmp/tc_profile $step --tables generated --steps 3 >/dev/null 2>&1
      TRITON_CACHE_DIR=/tmp/tc_profile $step --tables generated --steps 3 --profile 45 2>&1 | tee "$out/profile.log" ;;
    retune)  # the same tune again from the recording alone, in a fresh folder, each line timed
      rm -rf /tmp/$workload-2 && mkdir -p /tmp/$workload-2 && cp -r tuning.yaml recordings /tmp/$workload-2/
      (cd /tmp/$workload-2 && python3 -m aot_tune tune 2>&1 | python3 -u -c \
        "import sys,time; t=time.time(); [print(f'{time.time()-t:7.2f} {l}', end='') for l in sys.stdin]" \
        | grep -v ' \.  ' | tee "$out/$workload-retune.log"; cp .aot_tune/runs.json "$out/$workload-retune-runs.json")
      ;;
    tables)  # first step with the tables: a cold Triton cache, then a warm one
      TRITON_CACHE_DIR=/tmp/tc_tables $step --tables generated 2>&1 | tail -3 | tee "$out/tables_cold.log"
      TRITON_CACHE_DIR=/tmp/tc_tables $step --tables generated 2>&1 | tail -3 | tee "$out/tables_warm.log" ;;
    library)  # the library autotuning at run time (a cold cache), then its picks against the tables'
      TRITON_CACHE_DIR=/tmp/tc_library $step --compare generated --steps 30 2>&1 | tail -3 | tee "$out/library.log" ;;
  esac
done
