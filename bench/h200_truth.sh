#!/usr/bin/env bash
# Measurement truth on the H200: run on the GPU host from the repository root, the pydantic wheels in .whl/.
#   bash bench/h200_truth.sh runs N   -> N independent processes of `bench/h200_truth.py run` over the example suite
#                                        and the validation set (profile + do_bench with both flushes, same process)
#   bash bench/h200_truth.sh ncu      -> Nsight Compute over one iteration of every case (bench/h200_truth.py
#                                        ncu-driver): default cache control (flushed before each replay), clocks as
#                                        found, the bound and duration metrics; then cache control none with the
#                                        duration alone (one pass: the kernel as it runs after its predecessors)
#   bash bench/h200_truth.sh replay   -> ncu's application replay (no save and restore of memory between passes)
#                                        over one iteration of every case, duration, SM and DRAM clocks, both cache controls
# ROUNDS=R runs the suites with R timing rounds (copies of the suite files, min_samples raised to 3 per round).
# Everything is packed into $OUT/truth-<mode>.tar.gz after every step (run 1's traces into truth-traces.tar.gz). BUDGET_S stops starting runs that would not fit.
set -u
MODE=${1:-runs}; N=${2:-5}
SUITES=${SUITES:-"examples/llama7b.toml bench/validation/suite.toml"}
DEST=${OUT:-out/h200}; RAW=/tmp/attnprof-truth/raw; mkdir -p "$DEST" "$RAW"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/attnprof-inductor TRITON_CACHE_DIR=/tmp/attnprof-triton
BUDGET_S=${BUDGET_S:-540}
if [ -n "${ROUNDS:-}" ]; then
  mkdir -p /tmp/attnprof-rounds; copies=""
  for s in $SUITES; do
    least=$(( 3 * ROUNDS > 50 ? 3 * ROUNDS : 50 ))
    sed -E "s/^rounds = [0-9]+/rounds = $ROUNDS/; s/^min_samples = [0-9]+/min_samples = $least/" "$s" > "/tmp/attnprof-rounds/$(basename "$s")"
    copies="$copies /tmp/attnprof-rounds/$(basename "$s")"
  done
  SUITES=$copies; echo "rounds $ROUNDS:$(grep -h -E '^(rounds|min_samples) =' $SUITES | tr '\n' ' ')" | tee "$RAW/rounds.txt"
fi
START=$(date +%s); last=0
pack() { (cd "$RAW/.." && tar czf "$DEST/truth-$MODE.tar.gz" raw); }
python3 -c "import torch, triton, platform; print({'torch': torch.__version__, 'cuda': torch.version.cuda, 'cudnn': torch.backends.cudnn.version(), 'triton': triton.__version__, 'python': platform.python_version()})" > "$RAW/versions.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$RAW/nvidia-smi-$MODE-start.csv" 2>&1
if [ "$MODE" = runs ]; then
  for i in $(seq 1 "$N"); do
    spent=$(( $(date +%s) - START ))
    if [ $i -gt 1 ] && [ $(( spent + last )) -gt "$BUDGET_S" ]; then echo "stopping before run $i: budget"; break; fi
    s0=$(date +%s)
    python3 -m bench.h200_truth run $SUITES --out "$RAW/run$i" > "$RAW/run$i.log" 2>&1
    rc=$?; last=$(( $(date +%s) - s0 ))
    echo "{\"run\": $i, \"rc\": $rc, \"wall_s\": $last, \"at\": \"$(date -u +%FT%TZ)\"}" >> "$RAW/walls.jsonl"
    echo "run $i rc=$rc wall=${last}s"; grep -E "^profiled|Error" "$RAW/run$i.log" | tail -4
    if [ $i -eq 1 ]; then (cd "$RAW" && tar czf "$DEST/truth-traces.tar.gz" run1/traces-*); fi
    rm -rf "$RAW/run$i"/traces-*
    pack
  done
fi
if [ "$MODE" = replay ]; then
  NCU=${NCU:-/usr/local/cuda/bin/ncu}
  for cache in all none; do
    t0=$(date +%s)
    $NCU --replay-mode application --profile-from-start off --clock-control none --cache-control $cache \
        --target-processes all --kernel-name-base demangled \
        --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__cycles_elapsed.avg.per_second --csv \
        --print-units base python3 -m bench.h200_truth ncu-driver $SUITES --map "$RAW/ncu-app-$cache-map.json" \
        > "$RAW/ncu-app-$cache.csv" 2> "$RAW/ncu-app-$cache.log"
    echo "ncu application replay (cache control $cache) rc=$? wall=$(( $(date +%s) - t0 ))s rows=$(wc -l < "$RAW/ncu-app-$cache.csv")"
    tail -2 "$RAW/ncu-app-$cache.log"; pack
  done
fi
if [ "$MODE" = ncu ]; then
  NCU=${NCU:-/usr/local/cuda/bin/ncu}
  $NCU --version > "$RAW/ncu-version.txt" 2>&1
  M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.avg.per_second
  t0=$(date +%s)
  $NCU --profile-from-start off --clock-control none --target-processes all --kernel-name-base demangled \
      --metrics "$M" --csv --print-units base python3 -m bench.h200_truth ncu-driver $SUITES --map "$RAW/ncu-map.json" \
      > "$RAW/ncu.csv" 2> "$RAW/ncu.log"
  echo "ncu (cache control all) rc=$? wall=$(( $(date +%s) - t0 ))s rows=$(wc -l < "$RAW/ncu.csv")"; tail -3 "$RAW/ncu.log"
  pack
  t0=$(date +%s)
  $NCU --profile-from-start off --clock-control none --cache-control none --target-processes all \
      --kernel-name-base demangled --metrics gpu__time_duration.sum --csv --print-units base \
      python3 -m bench.h200_truth ncu-driver $SUITES --map "$RAW/ncu-none-map.json" > "$RAW/ncu-none.csv" 2> "$RAW/ncu-none.log"
  echo "ncu (cache control none) rc=$? wall=$(( $(date +%s) - t0 ))s rows=$(wc -l < "$RAW/ncu-none.csv")"; tail -3 "$RAW/ncu-none.log"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$RAW/nvidia-smi-$MODE-end.csv" 2>&1
pack
