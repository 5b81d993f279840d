#!/usr/bin/env bash
# How long a profiling process takes to end once its result is written, on the GPU host, with and without the
# profiler's exit that skips the interpreter's teardown (attnprof.core.cli.exit_with): bench/reports/profile-exit-h200.md.
#   bash bench/profile_exit_h200.sh        # on the GPU host, from the repository root, with .whl/ carried
# .whl/ holds pydantic's wheels for the image's CPython 3.12 (the only package the profiler needs that the image
# lacks): python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
#   --platform manylinux2014_x86_64 -d .whl pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0
#   typing-inspection==0.4.5 typing-extensions==4.16.0
# One cold run (empty compile caches), then warm runs taking turns: "teardown" runs the Typer app and lets the
# interpreter end as it would (what `python -m attnprof.core` did before), "exit_with" is `python -m attnprof.core`.
# Each line of $OUT/profile-exit.tsv: run, kind, caches, seconds to the result file, seconds from it to the end,
# exit code, processes left behind by the run one second after it ended (compile workers and the like; zombies
# not counted).
set -u
SUITE=${SUITE:-examples/llama7b.toml}; PAIRS=${PAIRS:-3}; PY=${PYTHON:-python3}; DEVICE=${DEVICE:-cuda}
DEST=${OUT:-out/profile-exit}; mkdir -p "$DEST"
if [ -d .whl ]; then $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1; fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/pe-inductor TRITON_CACHE_DIR=/tmp/pe-triton
rm -rf "$TORCHINDUCTOR_CACHE_DIR" "$TRITON_CACHE_DIR" /tmp/pe-runs; mkdir -p /tmp/pe-runs
$PY -c "import torch, platform; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', platform.python_version(), torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')" > "$DEST/versions.txt"
printf 'run\tkind\tcaches\tto_result_s\texit_s\trc\tleft\n' > "$DEST/profile-exit.tsv"
one() {  # run kind caches
  local out=/tmp/pe-runs/$1.json cmd
  if [ "$2" = teardown ]; then
    cmd=("$PY" -c "import sys; from attnprof.core.cli import app; sys.argv[0] = 'attnprof'; app()")
  else
    cmd=("$PY" -m attnprof.core)
  fi
  $PY - "$1" "$2" "$3" "$out" "${cmd[@]}" profile "$SUITE" --device "$DEVICE" --quiet --out "$out" \
    --cache-dir /tmp/pe-peaks >> "$DEST/profile-exit.tsv" <<'PYEOF'
import os, subprocess, sys, time
run, kind, caches, out, *cmd = sys.argv[1:]
start = time.monotonic()
proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(out + ".err", "w"), start_new_session=True)
while not os.path.exists(out) and proc.poll() is None:
    time.sleep(0.01)
written = time.monotonic()
rc = proc.wait()
ended = time.monotonic()
time.sleep(1.0)
def alive(pid):  # a zombie is dead, waiting for whoever adopted it to reap it
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"
left = [p for p in subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split() if alive(p)]
print(f"{run}\t{kind}\t{caches}\t{written - start:.2f}\t{ended - written:.2f}\t{rc}\t{len(left)}", flush=True)
PYEOF
}
one 1 exit_with cold
for i in $(seq 1 "$PAIRS"); do
  one $((2 * i)) teardown warm
  one $((2 * i + 1)) exit_with warm
done
cp /tmp/pe-runs/3.json "$DEST/result-exit_with.json"
cat "$DEST/profile-exit.tsv"
