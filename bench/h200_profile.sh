#!/usr/bin/env bash
# The profiler core on the H200: run on the GPU host from the repository root.
#   bash bench/h200_profile.sh runs N  -> N independent `attnprof profile` processes (the first with cold
#                                         compile caches), each followed by a do_bench process
#   bash bench/h200_profile.sh ncu     -> one `--counters ncu` run
#   bash bench/h200_profile.sh all N   -> both
# Raw outputs (result documents, do_bench medians, wall times, traces) are packed into
# $OUT/h200-<mode>.tar.gz after every step, so a run cut short by a time limit keeps what it measured.
# BUDGET_S (default 540) stops starting new runs that would not finish in time.
set -u
MODE=${1:-runs}; N=${2:-5}
SUITE=${SUITE:-examples/llama7b.toml}
DEVICE=${DEVICE:-cuda}
DEST=${OUT:-out/h200}; RAW=/tmp/attnprof-h200/raw; mkdir -p "$DEST" "$RAW"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/attnprof-inductor TRITON_CACHE_DIR=/tmp/attnprof-triton
PY=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-540}
START=$(date +%s)
now() { date +%s.%N; }
elapsed() { $PY -c "print(round($2 - $1, 2))"; }
pack() { (cd "$RAW/.." && tar czf "$DEST/h200-$MODE.tar.gz" raw); }
$PY -c "import torch, triton, platform; print({'torch': torch.__version__, 'cuda': torch.version.cuda, 'cudnn': torch.backends.cudnn.version(), 'triton': triton.__version__, 'python': platform.python_version()})" > "$RAW/versions.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$RAW/nvidia-smi-start.csv" 2>&1
if [ "$MODE" = runs ] || [ "$MODE" = all ]; then
  rm -rf "$TORCHINDUCTOR_CACHE_DIR" "$TRITON_CACHE_DIR"
  last=0
  for i in $(seq 1 "$N"); do
    spent=$(( $(date +%s) - START ))
    if [ $i -gt 1 ] && [ $(( spent + last )) -gt "$BUDGET_S" ]; then echo "stopping before run $i: budget"; break; fi
    s0=$(date +%s); t0=$(now)
    $PY -m attnprof.core profile "$SUITE" --device "$DEVICE" --quiet --out "$RAW/run$i.json" \
        --trace-dir "$RAW/traces$i" --cache-dir /tmp/attnprof-cache 2> "$RAW/run$i.log"
    rc=$?; t1=$(now)
    echo "{\"run\": $i, \"rc\": $rc, \"wall_s\": $(elapsed $t0 $t1), \"at\": \"$(date -u +%FT%TZ)\"}" >> "$RAW/walls.jsonl"
    echo "run $i rc=$rc wall=$(elapsed $t0 $t1)s"; tail -3 "$RAW/run$i.log"
    $PY bench/dobench_cases.py "$SUITE" --out "$RAW/dobench$i.json" > "$RAW/dobench$i.log" 2>&1
    echo "do_bench $i rc=$? wall=$(elapsed $t1 $(now))s"
    last=$(( $(date +%s) - s0 ))
    pack
  done
fi
if [ "$MODE" = ncu ] || [ "$MODE" = all ]; then
  t0=$(now)
  $PY -m attnprof.core profile "$SUITE" --device "$DEVICE" --counters ncu --quiet --out "$RAW/ncu.json" \
      --trace-dir "$RAW/traces-ncu" --cache-dir /tmp/attnprof-cache 2> "$RAW/ncu.log"
  rc=$?; t1=$(now)
  echo "{\"run\": \"ncu\", \"rc\": $rc, \"wall_s\": $(elapsed $t0 $t1), \"at\": \"$(date -u +%FT%TZ)\"}" >> "$RAW/walls.jsonl"
  echo "ncu rc=$rc wall=$(elapsed $t0 $t1)s"; tail -5 "$RAW/ncu.log"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$RAW/nvidia-smi-end.csv" 2>&1
pack
