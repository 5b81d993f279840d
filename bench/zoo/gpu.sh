#!/usr/bin/env bash
# The regression zoo on a GPU host, in one command of at most ten minutes (the device tool's), from the repository
# root with .whl (the server packages the host lacks: bench/pipeline_h200.sh wheels) and .bwrap (bubblewrap's Debian
# package: bench/jail_h200.sh fetch) carried:
#   bash bench/zoo/gpu.sh
# First the ground truth (bench/zoo/truth.py, at most TRUTH_S seconds), then the zoo through `attnprof ab`, paired
# jobs through the embedded stack and unpaired profiles (bench/zoo/run.py) until BUDGET_S seconds after the start.
# Both write into $OUT/zoo-<gpu> after every change, so a command stopped early still returns what it measured.
# Environment: BUDGET_S (555), TRUTH_S (100; 0 skips the truth), ONLY (changes, comma-separated, in the zoo's order),
# STEPS (ab,job,profile), REPEAT (1: ab runs and jobs per change), PROFILES (3: changes whose head gets an unpaired
# profile), NAME (the output folder's name).
set -u
START=$(date +%s)
BUDGET_S=${BUDGET_S:-555}; TRUTH_S=${TRUTH_S:-100}
export PYTHONUNBUFFERED=1
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
SLUG=$(echo "$GPU" | grep -oE '[A-Z]{1,2}[0-9]{2,4}' | head -1 | tr 'A-Z' 'a-z')
DEST=${OUT:-out/zoo}/${NAME:-zoo-${SLUG:-gpu}}; mkdir -p "$DEST"
{ echo "gpu: $GPU"; id; uname -r; head -2 /etc/os-release; nvidia-smi; } > "$DEST/host.txt" 2>&1
# The jail's bubblewrap and the stack's packages, as bench/jail_h200.sh sets them up: the wheels in /opt/attnprof-site,
# which a .pth file puts first on every interpreter's path and the jail binds read-only for the job.
if ! command -v bwrap >/dev/null && [ -d .bwrap ]; then
  for f in .bwrap/*.deb; do dpkg -x "$f" /opt/bw; done
  export PATH=/opt/bw/usr/bin:$PATH
  bwrap --version >/dev/null 2>&1 || export LD_LIBRARY_PATH=/opt/bw/usr/lib/x86_64-linux-gnu:/opt/bw/lib/x86_64-linux-gnu
fi
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /opt/attnprof-site .whl/*.whl \
    || exit 1
  chmod -R a+rX /opt/attnprof-site
  SITE=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "import sys; sys.path[0:0] = ['/opt/attnprof-site']" > "$SITE/00-attnprof-bench.pth"
  export BENCH_SITE=/opt/attnprof-site ATTNPROF_WORKER__SANDBOX_RO_BINDS='["/opt/attnprof-site"]'
fi
export PYTHONPATH=$PWD
python3 -c "import pydantic, httpx, torch, triton, attnprof.core, attnprof.server, attnprof.worker" || exit 1
echo "set up in $(( $(date +%s) - START )) s: $GPU, bubblewrap $(bwrap --version 2>&1)" | tee -a "$DEST/host.txt"
ARGS=(); [ -n "${ONLY:-}" ] && ARGS=(--only "$ONLY")
if [ "$TRUTH_S" -gt 0 ]; then
  # A change starts only within TRUTH_S; one that hangs is stopped 120 s after (truth.json holds every change before).
  timeout $(( TRUTH_S + 120 )) python3 -m bench.zoo.truth --out "$DEST" --budget-s "$TRUTH_S" ${ARGS[@]+"${ARGS[@]}"} \
    2>&1 | tee "$DEST/truth.log"
fi
# The stack stops in seconds once run.py's budget is spent: leave it 25 s of the command's ten minutes.
LEFT=$(( BUDGET_S - ($(date +%s) - START) - 25 ))
if [ "$LEFT" -gt 60 ]; then
  timeout $(( LEFT + 20 )) python3 -m bench.zoo.run --out "$DEST" --budget-s "$LEFT" --steps "${STEPS:-ab,job,profile}" \
    --repeat "${REPEAT:-1}" --profiles "${PROFILES:-3}" ${ARGS[@]+"${ARGS[@]}"} 2>&1 | tee "$DEST/run.log"
else
  echo "no time left for the runs ($LEFT s)" | tee "$DEST/run.log"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv \
  >> "$DEST/host.txt" 2>&1
echo "done in $(( $(date +%s) - START )) s: $DEST"
exit 0
