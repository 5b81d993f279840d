#!/usr/bin/env bash
# Issue "from an alert to the culprit commit", measured on a GPU host in one command (the device tool's ten minutes),
# from the repository root with .whl carried (the packages the host lacks: bench/pipeline_h200.sh wheels):
#   bash bench/bisect_gpu.sh
# A history of COMMITS (16) commits of a custom attention kernel (bench/bisect_history.py), one of which adds a pass that
# costs about 3%; `attnprof bisect` finds it with paired probes, the first measuring the step. Everything lands in
# $OUT/bisect-<gpu>: bisect.json (each probe), the log, the wall time, the host.
set -u
export PYTHONUNBUFFERED=1
# attnprof bisect reads the history with git (rev-list, archive): a host without it cannot run this.
command -v git >/dev/null || { echo "no git on this host: attnprof bisect needs it"; exit 3; }
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
SLUG=$(echo "$GPU" | grep -oE '[A-Z]{1,2}[0-9]{2,4}' | head -1 | tr 'A-Z' 'a-z')
DEST=${OUT:-out}/bisect-${SLUG:-gpu}; mkdir -p "$DEST"
{ echo "gpu: $GPU"; date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader;
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > "$DEST/host.txt" 2>&1
HIST=$(mktemp -d)/history
read -r GOOD BAD CULPRIT < <(python3 -m bench.bisect_history --out "$HIST" --commits "${COMMITS:-16}" --culprit "${CULPRIT:-9}" \
  --slowdown "${SLOWDOWN:-0.03}")
echo "good $GOOD bad $BAD planted $CULPRIT" | tee -a "$DEST/host.txt"
t0=$(date +%s.%N)
timeout "${BISECT_S:-520}" python3 -m attnprof.core bisect "$HIST/perf.toml" --repo "$HIST" --good "$GOOD" --bad "$BAD" \
  --out "$DEST" > "$DEST/bisect.log" 2>&1
rc=$?
echo "exit $rc wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s" | tee -a "$DEST/host.txt"
tail -5 "$DEST/bisect.log"
