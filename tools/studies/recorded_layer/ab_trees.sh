#!/usr/bin/env bash
# Two trees of aot_tune side by side on fla-core's recorded workloads, on one GPU host: each
# workload recorded once (with this tree), then tuned cold by each tree in turn, alternated, each
# run in a fresh copy of the recorded project with an empty Triton cache and the page cache dropped.
#   [RUNS=2] bash tools/studies/recorded_layer/ab_trees.sh OUT OLD_TREE [WORKLOAD...]
# OLD_TREE: a copy of the other tree (e.g. `git archive REV aot_tune rules | tar -x -C .ab/old`,
# carried); RUNS: runs of each tree; WORKLOAD: rows, delta_rule (default both).
# Prints each run's summary lines (end to end, bench stage, bench device time: its timed share
# and batches); the whole logs go to OUT. Wheels for what the host lacks (doit, fla-core) are
# read from .whl/, as gpu_run.sh reads them.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../../.." && pwd)
out=$1
old=$(cd "$2" && pwd)
shift 2
runs=${RUNS:-2}
workloads=${*:-rows delta_rule}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 AOT_TUNE_HISTORY=off
[ -d /tmp/site/fla ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$repo"/.whl/*.whl
seconds_since() { python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$1"; }
for workload in $workloads; do
  mkdir -p "/tmp/ab-$workload" && cd "/tmp/ab-$workload"
  began=$(date +%s.%N)
  PYTHONPATH=/tmp/site:$repo TRITON_CACHE_DIR=/tmp/ab-tc-record-$workload python3 -m aot_tune record -- \
    python3 "$repo/tools/studies/recorded_layer/${workload}_step.py" --steps 1 > "$out/$workload-record.log" 2>&1
  echo "== $workload recorded (exit $?) in $(seconds_since "$began") s"
  for run in $(seq "$runs"); do
    for tree in new old; do
      [ $tree = new ] && path=$repo || path=$old
      rm -rf /tmp/ab-project && mkdir /tmp/ab-project
      cp -r "/tmp/ab-$workload/tuning.yaml" "/tmp/ab-$workload/recordings" /tmp/ab-project/ && cd /tmp/ab-project
      sync && echo 3 > /proc/sys/vm/drop_caches
      log="$out/$workload-$tree-$run.log"
      began=$(date +%s.%N)
      PYTHONPATH=/tmp/site:$path TRITON_CACHE_DIR="/tmp/ab-tc-$workload-$tree-$run" python3 -m aot_tune tune > "$log" 2>&1
      echo "== $workload $tree run $run (exit $?): $(seconds_since "$began") s"
      grep -E "^(end to end|bench stage|bench device time)" "$log" | cut -c1-700
    done
  done
done
