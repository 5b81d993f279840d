#!/usr/bin/env bash
# Host health on a GPU (docs/service.md, "Host health"): the canary a profile worker runs, REPEAT (5) times in a row
# on this host's GPU, as the worker runs it (`python -m attnprof.core canary`, each its own process, CUDA's start
# included), then once with a copy of the same size running beside it on the GPU (a host that another job loads: the
# band must see it). From the repository root with .whl carried (the packages the host lacks, pydantic among them:
# bench/pipeline_h200.sh wheels):
#   bash bench/canary_gpu.sh
# Writes $OUT/canary-<gpu>/canary-<i>.json, loaded.json, host.txt; bench/canary_report.py reads them.
set -u
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
SLUG=$(echo "$GPU" | grep -oE '[A-Z]{1,2}[0-9]{2,4}' | head -1 | tr 'A-Z' 'a-z')
DEST=${OUT:-out}/canary-${SLUG:-gpu}; mkdir -p "$DEST"
{ echo "gpu: $GPU"; date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader;
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } > "$DEST/host.txt" 2>&1
for i in $(seq 1 "${REPEAT:-5}"); do
  t0=$(date +%s.%N)
  python3 -m attnprof.core canary --device cuda > "$DEST/canary-$i.json" 2> "$DEST/canary-$i.err" || echo "canary $i failed"
  echo "canary $i: $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s wall" | tee -a "$DEST/host.txt"
done
# A neighbour: a loop of 2 GiB copies on the same GPU while the canary runs.
python3 - <<'PY' &
import time, torch
a = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
end = time.time() + 60
while time.time() < end:
    b.copy_(a)
PY
NEIGHBOUR=$!
sleep 8
python3 -m attnprof.core canary --device cuda > "$DEST/loaded.json" 2> "$DEST/loaded.err" || echo "loaded canary failed"
kill $NEIGHBOUR 2>/dev/null; wait 2>/dev/null
ls -l "$DEST"
