#!/usr/bin/env bash
# Paired A/B on the H200: run on the GPU host from the repository root, the pydantic wheels in .whl/.
#   [RECORD_SET="aa:aa3 ..."] bash bench/h200_paired.sh record  -> plant the trees (bench/h200_paired.py plant), then `attnprof ab --record`
#                                        of each head against the base: A/A twice, 0.5%, 1%, 2% (MAX_PAIRS pairs per case)
#   bash bench/h200_paired.sh costs   -> the same trees: `attnprof profile` of the base (4 processes) and of each head
#                                        (2 processes each), for the stored-baseline and the run-A-then-B methods and
#                                        the unpaired cost; then `attnprof ab` as a job runs it (early stopping), twice
#                                        per head, for the paired cost and its stops
#   bash bench/h200_paired.sh jobs    -> after a change to how a paired run spends its time: the base profiled and
#                                        `attnprof ab` of the A/A and 1% heads, JOBS_N (2) times each, alternating, with the
#                                        first builds apart (the default) and together
#   bash bench/h200_paired.sh trials  -> `attnprof ab` of the 1% and A/A heads as a job runs it, alternating, JOBS_N
#                                        (10) times each or as many as BUDGET_S allows: direct trials of the rule
# Everything is packed into $OUT/paired-<mode>.tar.gz after every step. BUDGET_S stops starting steps that would not fit.
set -u
MODE=${1:-record}; MAX_PAIRS=${MAX_PAIRS:-40}
DEST=${OUT:-out/h200}; RAW=/tmp/attnprof-paired/raw; TREES=/tmp/attnprof-paired/trees; mkdir -p "$DEST" "$RAW"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/attnprof-triton
SUITE=$PWD/bench/paired/suite.toml PEAKS=/tmp/attnprof-peaks
BUDGET_S=${BUDGET_S:-540}; START=$(date +%s)
pack() { (cd "$RAW/.." && tar czf "$DEST/paired-$MODE.tar.gz" raw); }
fits() { [ $(( $(date +%s) - START + $1 )) -le "$BUDGET_S" ] || { echo "budget: not starting $2"; return 1; }; }
step() {  # step NAME EXPECTED_S COMMAND...: run it, log it, time it, pack
  local name=$1 expect=$2; shift 2
  fits "$expect" "$name" || return 1
  local s0=$(date +%s); "$@" > "$RAW/$name.log" 2>&1; local rc=$?
  echo "{\"step\": \"$name\", \"rc\": $rc, \"wall_s\": $(( $(date +%s) - s0 )), \"at\": \"$(date -u +%FT%TZ)\"}" | tee -a "$RAW/walls.jsonl"
  [ $rc -le 1 ] || tail -5 "$RAW/$name.log"
  pack
}
python3 -c "import torch, triton, platform; print({'torch': torch.__version__, 'cuda': torch.version.cuda, 'cudnn': torch.backends.cudnn.version(), 'triton': triton.__version__, 'python': platform.python_version()})" > "$RAW/versions.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$RAW/nvidia-smi-$MODE-start.csv" 2>&1
if [ ! -f "$TREES/plant.json" ]; then
  python3 -m attnprof.core calibrate --device cuda --cache-dir "$PEAKS" > "$RAW/calibrate.log" 2>&1
  python3 -m bench.h200_paired plant --out "$TREES" > "$RAW/plant.log" 2>&1 || { cat "$RAW/plant.log"; exit 1; }
fi
cp "$TREES/plant.json" "$RAW/plant.json"
ab() {  # ab HEAD OUTNAME [extra...]
  local head=$1 name=$2; shift 2
  python3 -m attnprof.core ab "$SUITE" --base "$TREES/base" --head "$TREES/$head" --out "$RAW/$name" \
    --device cuda --cache-dir "$PEAKS" --quiet "$@"
  local rc=$?; rm -rf "$RAW/$name/traces" "$RAW/$name/base-traces"; return $rc
}
profile() {  # profile TREE OUTNAME
  (cd "$TREES/$1" && PYTHONPATH="$TREES/$1:$PYTHONPATH" python3 -m attnprof.core profile "$SUITE" --device cuda \
     --cache-dir "$PEAKS" --out "$RAW/$2.json" --trace-dir "$RAW/traces-$2" --quiet)
  rm -rf "$RAW/traces-$2"
}
if [ "$MODE" = record ]; then
  for v in ${RECORD_SET:-aa:aa1 p1:p1 aa:aa2 p0.5:p0.5 p2:p2}; do
    step "ab-${v#*:}" 120 ab "${v%%:*}" "ab-${v#*:}" --record --max-pairs "$MAX_PAIRS"
  done
fi
if [ "$MODE" = costs ]; then
  for i in 1 2; do
    step "profile-base$i" 60 profile base "profile-base$i"
    for v in aa p0.5 p1 p2; do step "profile-$v-$i" 60 profile "$v" "profile-$v-$i"; done
    step "profile-base$((i + 2))" 60 profile base "profile-base$((i + 2))"
  done
  for i in 1 2; do
    for v in aa p0.5 p1 p2; do step "job-$v-$i" 60 ab "$v" "job-$v-$i"; done
  done
fi
if [ "$MODE" = jobs ]; then  # the cost of a job-like paired run against one unpaired profile, side by side
  for i in $(seq 1 "${JOBS_N:-2}"); do
    step "jobs-profile-base$i" 40 profile base "jobs-profile-base$i"
    for v in aa p1; do
      step "jobs-$v-$i" 40 ab "$v" "jobs-$v-$i"
      step "jobs-together-$v-$i" 40 ab "$v" "jobs-together-$v-$i" --first-builds together
    done
  done
fi
if [ "$MODE" = trials ]; then  # direct trials of the rule as a job runs it: the 1% and A/A heads, alternating
  for i in $(seq 1 "${JOBS_N:-10}"); do
    step "jobs-p1-$i" 15 ab p1 "jobs-p1-$i" || break
    step "jobs-aa-$i" 15 ab aa "jobs-aa-$i" || break
  done
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$RAW/nvidia-smi-$MODE-end.csv" 2>&1
pack
