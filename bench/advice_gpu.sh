#!/usr/bin/env bash
# Issue "advice you can act on", measured on a GPU host in one command (the device tool's ten minutes), from the
# repository root:
#   bash bench/advice_gpu.sh
# 1. why SDPA refused a backend, the profiler's answer against PyTorch asked directly (bench/sdpa_reasons_gpu.py);
# 2. the advice suite (bench/advice/suite.toml): each user call beside the same call with the advice applied by hand;
# 3. the counter cache: the example suite profiled with --counters none, then --counters cached twice (the first
#    replays every heavy kernel under ncu and fills the cache, the second reads it), each run's wall time.
# Everything lands in $OUT/advice-<gpu>; `python -m bench.advice_report DIR...` writes bench/reports/advice.md.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD}
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
SLUG=$(echo "$GPU" | grep -oE '[A-Z]{1,2}[0-9]{2,4}' | head -1 | tr 'A-Z' 'a-z')
DEST=${OUT:-out}/advice-${SLUG:-gpu}; mkdir -p "$DEST/counters" "$DEST/sdpa"
{ echo "gpu: $GPU"; date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$DEST/host.txt"
timeout 90 python3 -m bench.sdpa_reasons_gpu --out "$DEST/sdpa" 2>&1 | tail -15
SUITE=${SUITE:-examples/llama7b.toml}
CACHE=$(mktemp -d)
timeout 200 python3 -m attnprof.core profile bench/advice/suite.toml --out "$DEST/advice.json" --cache-dir "$CACHE" \
  --quiet > "$DEST/advice.log" 2>&1; echo "advice suite exit $?"
for run in none cached-first cached-again; do
  mode=${run%%-*}; t0=$(date +%s.%N)
  timeout 240 python3 -m attnprof.core profile "$SUITE" --counters "$mode" --out "$DEST/counters/$run.json" \
    --cache-dir "$CACHE" --quiet > "$DEST/counters/$run.log" 2>&1
  rc=$?
  echo "$run $(python3 -c "import time; print(round(time.time() - $t0, 2))") $rc" | tee -a "$DEST/counters/walls.txt"
done
echo "done: $DEST"
