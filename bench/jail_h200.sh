#!/usr/bin/env bash
# The job jail on the GPU host (bench/reports/jail.md): run from the repository root through the device tool with
# .bwrap (bubblewrap's Debian package, when the host lacks it) and .whl (the packages the host lacks) carried.
#   bash bench/jail_h200.sh           # probe, self-tests, CUDA in the jail, hostile jobs, then PAIRS direct/jailed runs
#   bash bench/jail_h200.sh fetch     # here, once: .bwrap/*.deb and .whl/ (bench/pipeline_h200.sh wheels, pytest and
#                                     # the drivers tests/conftest.py imports)
set -u
if [ "${1:-}" = fetch ]; then
  mkdir -p .bwrap && (cd .bwrap && apt-get download bubblewrap libcap2 libselinux1)
  bash bench/pipeline_h200.sh wheels
  exec python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
    pytest==9.2.0 pluggy iniconfig packaging pytest-timeout psycopg==3.3.9 psycopg-binary==3.3.9 redis==8.1.0
fi
DEST=${OUT:-out/jail}; mkdir -p "$DEST"
export PYTHONUNBUFFERED=1
{ id; uname -r; head -2 /etc/os-release; } 2>&1 | tee "$DEST/host.txt"
if ! command -v bwrap >/dev/null; then
  for f in .bwrap/*.deb; do dpkg -x "$f" /opt/bw; done
  export PATH=/opt/bw/usr/bin:$PATH
  bwrap --version >/dev/null 2>&1 || export LD_LIBRARY_PATH=/opt/bw/usr/lib/x86_64-linux-gnu:/opt/bw/lib/x86_64-linux-gnu
fi
bwrap --version 2>&1 | tee -a "$DEST/host.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /opt/attnprof-site .whl/*.whl || exit 1
chmod -R a+rX /opt/attnprof-site
# Every interpreter finds them, the jailed profiler's included (its PYTHONPATH is its own): a .pth file in the
# Python installation, which the jail binds read-only, and the folder itself bound (BENCH_SITE, SANDBOX_RO_BINDS).
SITE=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "import sys; sys.path[0:0] = ['/opt/attnprof-site']" > "$SITE/00-attnprof-bench.pth"
export PYTHONPATH=$PWD BENCH_SITE=/opt/attnprof-site
for who in root nobody; do
  pre=(); [ $who = nobody ] && pre=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  "${pre[@]}" bwrap --unshare-all --die-with-parent --ro-bind / / --proc /proc --dev /dev true 2>&1 | tail -1
  echo "bwrap --unshare-all as $who: exit ${PIPESTATUS[0]}" | tee -a "$DEST/host.txt"
done
STEPS=${STEPS:-"probe tests ab embedded"}  # any of these, in this order
step() { case " $STEPS " in *" $1 "*) return 0;; *) return 1;; esac; }
step probe && python3 -m bench.jail_h200 all --pairs 0 --out "$DEST" 2>&1 | tail -40
step tests && ATTNPROF_TEST_JAIL_GPU=1 timeout 300 python3 -m pytest -q -p no:cacheprovider tests/worker/test_jail.py tests/worker/test_limits.py \
  2>&1 | tee "$DEST/hostile.txt" | tail -15
step ab && python3 -m bench.jail_h200 ab --pairs "${PAIRS:-2}" --budget-s "${BUDGET_S:-330}" --out "$DEST" 2>&1 | tail -12
# The embedded mode end to end on the GPU: a hostile job, then another project's honest job, through the service,
# the analysis worker and a profile worker whose jail has the GPU passed in.
export ATTNPROF_WORKER__SANDBOX_RO_BINDS='["/opt/attnprof-site"]'
step embedded && timeout 560 python3 -m bench.hostile_embedded --device cuda --testbed h200 --out "$DEST" 2>&1 | tail -25
exit 0
