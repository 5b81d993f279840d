#!/usr/bin/env bash
# The worker pipeline on the GPU host against the direct profiler run (bench/reports/pipeline-h200.md).
#   bash bench/pipeline_h200.sh          # on the GPU host, from the repository root, with .whl/ carried
#   bash bench/pipeline_h200.sh wheels   # once, here (a registry is needed): fetch the wheels into .whl/
# On the GPU host: the embedded mode (SQLite and kombu's folder broker: it has no Postgres or Redis), the service,
# the analysis worker with beat and one Celery profile worker on the GPU; then the suite alternately submitted as a
# job and profiled directly (`python -m bench.pipeline_load compare`) until BUDGET_S seconds after the start.
# The server packages the GPU image lacks travel as wheels in .whl/: they are installed into /opt/attnprof-site, which a
# .pth file puts first on every interpreter's path, the jailed profiling subprocess's included (its sandbox sets a
# PYTHONPATH of its own, so PYTHONPATH cannot carry them there).
# Environment: NAME (default pipeline-h200), SUITE, BUDGET_S, SHARED_CACHES=1, DEVICE, TESTBED, WHEELS, PYTHON.
# Everything measured is packed into $OUT/$NAME.tar.gz, which `python -m bench.pipeline_load compare-report` reads.
set -u
if [ "${1:-}" = wheels ]; then
  # The server extra's closure (pyproject.toml), pinned to the versions this project is tested with, for the GPU
  # image's CPython 3.12 on x86-64; numpy and scipy are already there. About 13 MB.
  exec python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0 \
    pydantic-settings==2.16.3 python-dotenv==1.2.4 fastapi==0.165.0 starlette==1.10.0 annotated-doc==0.0.7 \
    opentelemetry-api==1.45.2 uvicorn==0.54.0 SQLAlchemy==2.1.9 alembic==1.20.1 Mako==1.4.3 celery==5.7.0 \
    kombu==5.7.0 billiard==4.3.2 vine==5.1.0 amqp==5.4.2 click==8.5.1 click-didyoumean==0.3.1 \
    click-plugins==1.1.1.2 click-repl==0.4.1 prompt_toolkit==3.0.53 wcwidth==0.9.4 tzlocal==5.4.5 \
    python-dateutil==2.9.0.post0 six==1.17.0 python-multipart==0.0.34 prometheus_client==0.26.0 Jinja2==3.1.6 \
    MarkupSafe==3.0.4 httpx==0.28.1 httpcore==1.0.9 h11==0.16.0 anyio==4.16.0 idna==3.20 \
    certifi==2026.10.19.post1 typer==0.29.2 rich==15.0.0 shellingham==1.5.4 markdown-it-py==4.3.0 mdurl==0.1.2 \
    Pygments==2.21.0
fi
DEST=${OUT:-out/pipeline-h200}; mkdir -p "$DEST"
NAME=${NAME:-pipeline-h200}
RAW=/tmp/$NAME; rm -rf "$RAW"; mkdir -p "$RAW"
SUITE=${SUITE:-examples/llama7b.toml}
BUDGET_S=${BUDGET_S:-470}
DEVICE=${DEVICE:-cuda}; TESTBED=${TESTBED:-h200}
WHEELS=${WHEELS-.whl}  # WHEELS= (empty) where the interpreter has the server extra already
PY=${PYTHON:-python3}
START=$(date +%s)
export PYTHONUNBUFFERED=1
# The jobs run in the worker's jail (bubblewrap, carried in .bwrap/ when the host lacks it), which sees /usr, the
# Python installation and the profiler, not /tmp: the carried packages go to /opt/attnprof-site, which the jail is
# told to bind read-only (ATTNPROF_WORKER__SANDBOX_RO_BINDS).
if ! command -v bwrap >/dev/null && [ -d .bwrap ]; then
  for f in .bwrap/*.deb; do dpkg -x "$f" /opt/bw; done
  export PATH=/opt/bw/usr/bin:$PATH
fi
if [ -n "$WHEELS" ] && [ -d "$WHEELS" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /opt/attnprof-site "$WHEELS"/*.whl || exit 1
  chmod -R a+rX /opt/attnprof-site
  SITE=$($PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "import sys; sys.path[0:0] = ['/opt/attnprof-site', '$PWD']" > "$SITE/00-attnprof-bench.pth"
  export ATTNPROF_WORKER__SANDBOX_RO_BINDS='["/opt/attnprof-site"]'
fi
# The stack's and the profiler's imports must work before anything starts (versions: compare.json).
$PY -c "import alembic, celery, fastapi, pydantic, sqlalchemy, uvicorn, torch, attnprof.core, attnprof.server, attnprof.worker" || exit 1
QUERY=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu
nvidia-smi --query-gpu=$QUERY --format=csv > "$RAW/nvidia-smi-start.csv" 2>&1
pack() { tar czf "$DEST/$NAME.tar.gz" -C /tmp "$NAME"; }
trap pack EXIT
# SHARED_CACHES=1: the jobs share the compile caches with each other and with the direct runs (an operator's
# choice, through ATTNPROF_WORKER__PASS_ENV); by default each job compiles in caches of its own (the sandbox's).
PASS=()
if [ "${SHARED_CACHES:-0}" = 1 ]; then
  export TORCHINDUCTOR_CACHE_DIR=/tmp/attnprof-inductor TRITON_CACHE_DIR=/tmp/attnprof-triton
  PASS=(--pass-env TORCHINDUCTOR_CACHE_DIR --pass-env TRITON_CACHE_DIR)
fi
LEFT=$(( BUDGET_S - ($(date +%s) - START) ))
$PY -m bench.pipeline_load compare --embedded --device "$DEVICE" --testbed "$TESTBED" --threads 0 --suite "$SUITE" \
    --budget-s "$LEFT" --timeout-s 400 --cache-dir /tmp/attnprof-cache "${PASS[@]}" --out "$RAW" 2>&1 | tee "$RAW/compare.log"
nvidia-smi --query-gpu=$QUERY --format=csv > "$RAW/nvidia-smi-end.csv" 2>&1
