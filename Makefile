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

install: $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	$(BIN)/pip install --quiet -e '.[profile,server,dev]'

# The main job: profile the example suite (the LLaMA-7B attention layer on a GPU, a reduced suite on
# CPU) and print the per-kernel report.
demo:
	@if $(BIN)/python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then \
		$(BIN)/attnprof profile examples/llama7b.toml --out out/demo-result.json; \
	else \
		echo "no CUDA device: profiling the reduced CPU suite examples/cpu.toml"; \
		$(BIN)/attnprof profile examples/cpu.toml --device cpu --out out/demo-result.json; \
	fi

test:
	$(BIN)/pytest -q

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check profiler_core attnprof service worker
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt:
	$(BIN)/ruff format profiler_core attnprof service worker
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
