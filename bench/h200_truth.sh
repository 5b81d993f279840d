#!/usr/bin/env bash
# Measurement truth on the H200: run on the GPU host from the repository root, the pydantic wheels in .whl/.
#   bash bench/h200_truth.sh runs N   -> N independent processes of `bench/h200_truth.py run` over the example suite
#                                        and the validation set (profile + do_bench with both flushes, same process)
#   bash bench/h200_truth.sh ncu      -> Nsight Compute over one iteration of every case (bench/h200_truth.py
#                                        ncu-driver): default cache control (flushed before each replay), clocks as
#                                        found, the bound and duration metrics; then cache control none with the
#                                        duration alone (one pass: the kernel as it runs after its predecessors)
#   bash bench/h200_truth.sh clock     -> the SM clock of every kernel without ncu (bench/h200_clock.py: clock probes
#                                        between and beside the kernels, NVML alongside), then ncu's clock and duration
#                                        in one pass, with its default cache control and with none
#   bash bench/h200_truth.sh cost      -> what ncu adds to a launch of kernels that differ in warps, shared memory and
#                                        tensor cores (bench/h200_ncu_cost.py), by Kineto and by ncu with both cache controls
#   bash bench/h200_truth.sh isolation -> every kernel traced in ncu's conditions without ncu (bench/h200_isolation.py:
#                                        a flush, an idle gap, or both before each operator), the cause of the gaps
#   bash bench/h200_truth.sh spread N -> N processes of bench/h200_spread.py (SPREAD_ARGS added) back to back: each
#                                        kernel's duration and the SM clock over all of it (a probe spanning the
#                                        step), NVML at each block's edges
#   bash bench/h200_truth.sh replay   -> ncu's application replay (no save and restore of memory between passes)
#                                        over one iteration of every case, duration, SM and DRAM clocks, both cache controls
#   bash bench/h200_truth.sh settle N -> N rounds of three processes (rotating order) of bench/h200_settle.py over the
#                                        validation set: after a 10 s matmul load, profiled at once, after the wait
#                                        until the temperature stops falling, and after 60 s idle; bench/nvml_log.py
#                                        records the GPU's state every 0.1 s throughout (peaks cached first)
#   bash bench/h200_truth.sh workspace -> bench/h200_workspace.py: rounds of one workload against rounds of rebuilt
#                                        ones, with the allocations of each rebuilt one (WORKSPACE_ARGS: --case GLOB ...)
#   bash bench/h200_truth.sh redraw N -> N pairs of processes of bench/h200_redraw.py over the validation set, alternating:
#                                        each round's tensors fresh from the driver (the allocator's cache emptied
#                                        before each build) and from the blocks the allocator holds (peaks cached first);
#                                        REDRAW_VARIANTS="persist reuse" pairs other variants (any number, in turn,
#                                        each iteration starting one later; LABEL=VARIANT@lo or @hi pins a variant's
#                                        process to the host's first or last two CPUs; VARIANT:R gives it R rounds),
#                                        REDRAW_ARGS='--case GLOB ...' picks cases, REDRAW_SUITES='A.toml B.toml' the suites
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
    python3 bench/h200_truth.py run $SUITES --out "$RAW/run$i" > "$RAW/run$i.log" 2>&1
    rc=$?; last=$(( $(date +%s) - s0 ))
    echo "{\"run\": $i, \"rc\": $rc, \"wall_s\": $last, \"at\": \"$(date -u +%FT%TZ)\"}" >> "$RAW/walls.jsonl"
    echo "run $i rc=$rc wall=${last}s"; grep -E "^profiled|Error" "$RAW/run$i.log" | tail -4
    if [ $i -eq 1 ]; then (cd "$RAW" && tar czf "$DEST/truth-traces.tar.gz" run1/traces-*); fi
    rm -rf "$RAW/run$i"/traces-*
    pack
  done
fi
if [ "$MODE" = isolation ]; then
  t0=$(date +%s)
  python3 bench/h200_isolation.py $SUITES --out "$RAW/isolation.json" --gap-ms "${GAP_MS:-1}" > "$RAW/isolation.log" 2>&1
  echo "isolation rc=$? wall=$(( $(date +%s) - t0 ))s"; grep -c "not covered\|Error" "$RAW/isolation.log"; tail -3 "$RAW/isolation.log"
fi
if [ "$MODE" = clock ]; then
  t0=$(date +%s)
  python3 bench/h200_clock.py $SUITES --out "$RAW/clock.json" > "$RAW/clock.log" 2>&1
  echo "clock rc=$? wall=$(( $(date +%s) - t0 ))s"; grep -c "Error" "$RAW/clock.log"; tail -3 "$RAW/clock.log"
  pack
  NCU=${NCU:-/usr/local/cuda/bin/ncu}
  for cache in all none; do
    t0=$(date +%s)
    $NCU --profile-from-start off --clock-control none --cache-control $cache --target-processes all \
        --kernel-name-base demangled --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second --csv \
        --print-units base python3 bench/h200_truth.py ncu-driver $SUITES --map "$RAW/ncu-clock-$cache-map.json" \
        > "$RAW/ncu-clock-$cache.csv" 2> "$RAW/ncu-clock-$cache.log"
    echo "ncu clock (cache control $cache) rc=$? wall=$(( $(date +%s) - t0 ))s rows=$(wc -l < "$RAW/ncu-clock-$cache.csv")"
    tail -2 "$RAW/ncu-clock-$cache.log"; pack
  done
fi
if [ "$MODE" = spread ]; then
  mkdir -p "$RAW/spread"
  for i in $(seq 1 "$N"); do
    spent=$(( $(date +%s) - START ))
    if [ $i -gt 1 ] && [ $(( spent + last )) -gt "$BUDGET_S" ]; then echo "stopping before process $i: budget"; break; fi
    s0=$(date +%s)
    python3 bench/h200_spread.py $SUITES ${SPREAD_ARGS:-} --out "$RAW/spread/p$i.json" > "$RAW/spread/p$i.log" 2>&1
    rc=$?; last=$(( $(date +%s) - s0 ))
    echo "spread process $i rc=$rc wall=${last}s at $(date -u +%FT%TZ)" | tee -a "$RAW/spread/walls.txt"
    grep -c "Error" "$RAW/spread/p$i.log"; pack
  done
fi
if [ "$MODE" = settle ]; then
  mkdir -p "$RAW/settle"
  python3 bench/nvml_log.py --out "$RAW/settle/nvml-$(date +%s).csv" & logger=$!
  python3 -c "from pathlib import Path; from attnprof.core.measure.runner import calibrate; print(calibrate('cuda', Path('/tmp/attnprof-cache')))" > "$RAW/settle/calibrate.log" 2>&1
  conditions=(hot settled cold)
  for i in $(seq 1 "$N"); do
    spent=$(( $(date +%s) - START ))
    if [ $i -gt 1 ] && [ $(( spent + last )) -gt "$BUDGET_S" ]; then echo "stopping before round $i: budget"; break; fi
    s0=$(date +%s)
    for j in 0 1 2; do
      c=${conditions[$(( (i + j) % 3 ))]}
      python3 bench/h200_settle.py bench/validation/suite.toml --condition "$c" --out "$RAW/settle" >> "$RAW/settle/log.txt" 2>&1
      echo "round $i $c rc=$? at $(date -u +%FT%TZ)" | tee -a "$RAW/settle/walls.txt"
    done
    last=$(( $(date +%s) - s0 )); pack
  done
  kill $logger; wait $logger
  tail -n 20 "$RAW/settle/log.txt" | grep -E "profiled|Error" | tail -6
fi
if [ "$MODE" = workspace ]; then
  set -f; t0=$(date +%s)
  python3 bench/h200_workspace.py $SUITES ${WORKSPACE_ARGS:---case hd256* --case bwd* --case naive-bwd} --out "$RAW/workspace.json" > "$RAW/workspace.log" 2>&1
  echo "workspace rc=$? wall=$(( $(date +%s) - t0 ))s"; tail -5 "$RAW/workspace.log"
fi
if [ "$MODE" = redraw ]; then
  mkdir -p "$RAW/redraw"
  python3 -c "from pathlib import Path; from attnprof.core.measure.runner import calibrate; print(calibrate('cuda', Path('/tmp/attnprof-cache')))" > "$RAW/redraw/calibrate.log" 2>&1
  for i in $(seq 1 "$N"); do
    spent=$(( $(date +%s) - START ))
    if [ $i -gt 1 ] && [ $(( spent + last )) -gt "$BUDGET_S" ]; then echo "stopping before pair $i: budget"; break; fi
    s0=$(date +%s)
    read -r -a variants <<< "${REDRAW_VARIANTS:-redraw reuse}"
    for k in "${!variants[@]}"; do
      v=${variants[$(( (i - 1 + k) % ${#variants[@]} ))]}  # iteration i starts i - 1 variants later
      label=${v%%=*}; label=${label%%[:@]*}; variant=${v#*=}; pin=""; rounds=""
      case "$variant" in
        *@lo*) pin="taskset -c 0,1"; variant=${variant/@lo/} ;;
        *@hi*) n=$(nproc); pin="taskset -c $(( n - 2 )),$(( n - 1 ))"; variant=${variant/@hi/} ;;
      esac
      case "$variant" in *:*) rounds="--rounds ${variant#*:}"; variant=${variant%%:*} ;; esac
      set -f  # REDRAW_ARGS holds case patterns (bwd*): split into words, never matched against files here
      $pin python3 bench/h200_redraw.py ${REDRAW_SUITES:-bench/validation/suite.toml} --variant "$variant" --label "$label" \
          $rounds ${REDRAW_ARGS:-} --out "$RAW/redraw" >> "$RAW/redraw/log.txt" 2>&1
      rc=$?; set +f
      echo "pair $i $label rc=$rc at $(date -u +%FT%TZ)" | tee -a "$RAW/redraw/walls.txt"
    done
    last=$(( $(date +%s) - s0 )); pack
  done
  grep -E "profiled|Error" "$RAW/redraw/log.txt" | tail -4
fi
if [ "$MODE" = replay ]; then
  NCU=${NCU:-/usr/local/cuda/bin/ncu}
  for cache in all none; do
    t0=$(date +%s)
    $NCU --replay-mode application --profile-from-start off --clock-control none --cache-control $cache \
        --target-processes all --kernel-name-base demangled \
        --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__cycles_elapsed.avg.per_second --csv \
        --print-units base python3 bench/h200_truth.py ncu-driver $SUITES --map "$RAW/ncu-app-$cache-map.json" \
        > "$RAW/ncu-app-$cache.csv" 2> "$RAW/ncu-app-$cache.log"
    echo "ncu application replay (cache control $cache) rc=$? wall=$(( $(date +%s) - t0 ))s rows=$(wc -l < "$RAW/ncu-app-$cache.csv")"
    tail -2 "$RAW/ncu-app-$cache.log"; pack
  done
fi
if [ "$MODE" = cost ]; then
  mkdir -p "$RAW/ncu-cost"
  python3 bench/h200_ncu_cost.py kineto --out "$RAW/ncu-cost/cost-kineto.json" > "$RAW/ncu-cost/kineto.log" 2>&1
  echo "cost kineto rc=$?"; tail -c 600 "$RAW/ncu-cost/kineto.log"
  NCU=${NCU:-/usr/local/cuda/bin/ncu}
  for cache in all none; do
    $NCU --profile-from-start off --clock-control none --cache-control $cache --kernel-name-base demangled \
        --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second --csv --print-units base \
        python3 bench/h200_ncu_cost.py ncu-driver > "$RAW/ncu-cost/cost-ncu-$cache.csv" 2> "$RAW/ncu-cost/ncu-$cache.log"
    echo "cost ncu (cache control $cache) rc=$? rows=$(wc -l < "$RAW/ncu-cost/cost-ncu-$cache.csv")"; tail -2 "$RAW/ncu-cost/ncu-$cache.log"
  done
fi
if [ "$MODE" = ncu ]; then
  NCU=${NCU:-/usr/local/cuda/bin/ncu}
  $NCU --version > "$RAW/ncu-version.txt" 2>&1
  M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.avg.per_second
  t0=$(date +%s)
  $NCU --profile-from-start off --clock-control none --target-processes all --kernel-name-base demangled \
      --metrics "$M" --csv --print-units base python3 bench/h200_truth.py ncu-driver $SUITES --map "$RAW/ncu-map.json" \
      > "$RAW/ncu.csv" 2> "$RAW/ncu.log"
  echo "ncu (cache control all) rc=$? wall=$(( $(date +%s) - t0 ))s rows=$(wc -l < "$RAW/ncu.csv")"; tail -3 "$RAW/ncu.log"
  pack
  t0=$(date +%s)
  $NCU --profile-from-start off --clock-control none --cache-control none --target-processes all \
      --kernel-name-base demangled --metrics gpu__time_duration.sum --csv --print-units base \
      python3 bench/h200_truth.py ncu-driver $SUITES --map "$RAW/ncu-none-map.json" > "$RAW/ncu-none.csv" 2> "$RAW/ncu-none.log"
  echo "ncu (cache control none) rc=$? wall=$(( $(date +%s) - t0 ))s rows=$(wc -l < "$RAW/ncu-none.csv")"; tail -3 "$RAW/ncu-none.log"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$RAW/nvidia-smi-$MODE-end.csv" 2>&1
pack
