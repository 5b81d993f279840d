# attnprof: `make install` sets everything up in .venv; `make demo` runs the main job; `make test` the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch comes first, pinned: otherwise a dependency's plain `torch` pulls a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: install demo test test-fast lint fmt clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# System packages (Debian's, installed when missing and this is root): bubblewrap, the jail profile workers run jobs
# in; chromium, the browser the dashboard's tests drive; prometheus, whose promtool and server the metrics tests use.
SYSTEM_TOOLS := bwrap:bubblewrap chromium:chromium promtool:prometheus
install: $(BIN)/python
	@for need in $(SYSTEM_TOOLS); do \
	  tool=$${need%%:*}; pkg=$${need#*:}; \
	  if ! command -v $$tool >/dev/null 2>&1; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	      export DEBIAN_FRONTEND=noninteractive; apt-get install -y -q $$pkg >/dev/null 2>&1 || \
	        { apt-get update -q >/dev/null && apt-get install -y -q $$pkg >/dev/null; }; \
	    else echo "$$pkg is missing: install it (apt-get install $$pkg); the tests that need $$tool say so" >&2; fi; fi; done
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	$(BIN)/pip install --quiet -e '.[profile,server,dev]'

# The main job: the whole flow on this machine, with no Postgres or Redis (SQLite and a folder broker):
# the service, a Celery profile worker and the analysis worker, the demo project submitted twice (the second
# time with a planted regression), the verdicts and comparisons printed; then it keeps serving until Ctrl-C.
# DEMO_ARGS=--once stops after the verdicts (CI).
DEMO_ARGS ?=
demo:
	$(BIN)/attnprof demo $(DEMO_ARGS)

test:
	$(BIN)/pytest -q

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check attnprof bench
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt:
	$(BIN)/ruff format attnprof bench
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
