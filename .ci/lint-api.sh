#!/usr/bin/env bash
# The API's public contracts through the tools their users run:
#   openapi-spec-validator (PyPI, the dev extra)   /openapi.json and /internal/openapi.json, as the app serves them
#   redocly 2.77.0 (npm: @redocly/cli)               the same two documents, recommended-strict (.ci/redocly.yaml)
#   promtool, prometheus (Debian's prometheus package, 2.42)   installed here for `make test`:
#     tests/server/test_metrics_multiprocess.py runs `promtool check metrics` on a scrape of `attnprof serve
#     --workers 2` and has a real Prometheus scrape it
# Zero findings: the one rule turned off is in .ci/redocly.yaml, with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="${ATTNPROF_CI_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/attnprof-ci-tools}"
if [ ! -x "$TOOLS/npm/node_modules/.bin/redocly" ]; then
  npm install --prefix "$TOOLS/npm" --no-audit --no-fund --silent @redocly/cli@2.77.0
fi

if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 \
    || { apt-get update -q && apt-get install -y -q --no-install-recommends prometheus; }
fi
promtool --version | head -1

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
# The documents do not depend on the database: an app on an empty SQLite file serves them.
ATTNPROF_DATABASE_URL="sqlite:///$OUT/none.db" .venv/bin/python - "$OUT" <<'PY'
import json
import sys

from fastapi.testclient import TestClient

from attnprof.server.app import create_app

client = TestClient(create_app())
for path, name in (("/openapi.json", "public.json"), ("/internal/openapi.json", "internal.json")):
    answer = client.get(path)
    answer.raise_for_status()
    with open(f"{sys.argv[1]}/{name}", "w") as out:
        json.dump(answer.json(), out)
PY
for document in "$OUT/public.json" "$OUT/internal.json"; do
  .venv/bin/openapi-spec-validator "$document"
done
REDOCLY_TELEMETRY=off "$TOOLS/npm/node_modules/.bin/redocly" lint --config .ci/redocly.yaml --format=summary \
  "$OUT/public.json" "$OUT/internal.json"
