#!/usr/bin/env bash
# Paired runs at the defaults on a GPU: the three cases of bench/paired/suite.toml without their [suite.timing] (so the
# defaults a new suite gets: 5 rounds, the paired budget, warm-up), the base and a +1% head planted by
# bench/h200_paired.py, each job beside an unpaired profile of the base, alternating.
#   bash bench/paired_defaults.sh [RUNS]     (on the GPU host, from the repository root, the wheels in .whl/)
# Writes $OUT/paired-defaults.tar.gz (walls.jsonl, each run's paired.json and comparison.json, the profiles' documents)
# and prints one line per case and job: how its warm-up ended, its rounds, why it stopped, what it cost.
set -u
RUNS=${1:-2}
DEST=${OUT:-out/gpu}; RAW=/tmp/attnprof-defaults/raw; TREES=/tmp/attnprof-defaults/trees; mkdir -p "$DEST" "$RAW"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/attnprof-triton
PEAKS=/tmp/attnprof-peaks SUITE=/tmp/attnprof-defaults/suite.toml
# The suite as a new user writes it: the same cases, no timing section.
python3 - <<'PY'
import re
text = open("bench/paired/suite.toml").read()
text = re.sub(r"\[suite\.timing\][^\[]*", "", text)
open("/tmp/attnprof-defaults/suite.toml", "w").write(text)
PY
step() {  # step NAME COMMAND...: run it, time it, log it
  local name=$1; shift
  local s0=$(date +%s%N); "$@" > "$RAW/$name.log" 2>&1; local rc=$?
  local ms=$(( ($(date +%s%N) - s0) / 1000000 ))
  echo "{\"step\": \"$name\", \"rc\": $rc, \"wall_ms\": $ms}" | tee -a "$RAW/walls.jsonl"
}
python3 -c "import torch, triton; print(torch.__version__, torch.cuda.get_device_name(), triton.__version__)" \
  > "$RAW/versions.txt" 2>&1
python3 -m attnprof.core calibrate --device cuda --cache-dir "$PEAKS" > "$RAW/calibrate.log" 2>&1
python3 -m bench.h200_paired plant --out "$TREES" --effects 0.01 --suite "$SUITE" > "$RAW/plant.log" 2>&1 \
  || { cat "$RAW/plant.log"; exit 1; }
cp "$TREES/plant.json" "$RAW/plant.json"
for i in $(seq "$RUNS"); do
  step "profile-$i" bash -c "cd $TREES/base && PYTHONPATH=$TREES/base:\$PYTHONPATH python3 -m attnprof.core profile \
    $SUITE --device cuda --cache-dir $PEAKS --out $RAW/profile-$i.json --quiet"
  for head in aa p1; do
    step "ab-$head-$i" python3 -m attnprof.core ab "$SUITE" --base "$TREES/base" --head "$TREES/$head" \
      --out "$RAW/ab-$head-$i" --device cuda --cache-dir "$PEAKS" --quiet
    rm -rf "$RAW/ab-$head-$i/traces" "$RAW/ab-$head-$i/base-traces"
  done
done
python3 - "$RAW" <<'PY'
import json, sys
from pathlib import Path
raw = Path(sys.argv[1])
for run in sorted(raw.glob("ab-*/paired.json")):
    doc = json.loads(run.read_text())
    comparison = json.loads((run.parent / "comparison.json").read_text())
    status = {f["case"]: f["status"] for f in comparison["findings"] if f.get("rounds") is not None}
    for c in doc["cases"]:
        warm = [round(p["base_us"], 1) for p in c.get("warmup", [])]
        print(f"{run.parent.name} {c['case']}: warm-up {c.get('warmup_end')} {warm}; {c['stopped_by']} after "
              f"{len(c['pairs'])} pairs (plan {c.get('max_pairs')}, {c.get('limit')}); spent {c.get('spent_s')} s of "
              f"{c.get('budget_s')} s; case wall {c.get('wall_s')} s; verdict {status.get(c['case'])}")
    print(f"{run.parent.name}: verdict {comparison['verdict']}, wall {doc.get('wall_s')} s")
PY
(cd "$RAW/.." && tar czf "$DEST/paired-defaults.tar.gz" raw)
