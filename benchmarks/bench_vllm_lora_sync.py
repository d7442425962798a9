"""How a LoRA policy reaches vLLM after an update: the adapter alone (``LoRARequest``) against merged full weights
(``reload_weights``), on the embedded SmolLM2-135M (vLLM's CPU backend here).

    python benchmarks/bench_vllm_lora_sync.py                       # ranks 8 and 64, 5 syncs each (~5 min on 2 cores)
    python benchmarks/bench_vllm_lora_sync.py --ranks 16 --syncs 10 --precision fp32

Each arm (rank x way) runs in its own process: it loads the policy with fresh adapters (``model.lora``, alpha = 2 x
rank, all linear layers), builds the engine as a training run does (``VLLMRolloutEngine.from_recipe`` with
``model.lora.vllm_adapter`` set to the arm's way), then ``--syncs`` times draws new adapter values (an "optimizer
step"), times ``sync_weights`` (what ``time/sync_s`` measures in a run) and a fixed generation (8 prompts x 4 samples x
32 tokens, seeded). It checks that vLLM's log-probs of those samples match the trainer's forward after each sync (the
largest |difference| is reported). Arms alternate (adapter, merged, adapter, ...) so background load falls on both.
Reports medians with the date, commit and CPU, and the 1-minute load average at the start of each arm.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.machine import stamp  # noqa: E402

PROMPTS = ["What is 12 + 30?", "Name a prime number above 50.", "Spell the word cat backwards.",
           "What is the capital of France?", "Count from 1 to 5.", "What is 7 times 8?", "Say hello in Spanish.",
           "Which is larger, 0.5 or 0.25?"]


def run_arm(rank: int, way: str, syncs: int, precision: str) -> dict:
    """One arm in this process; returns its timings (seconds) and the largest log-prob gap (nats)."""
    import torch

    from rlvr.config import resolve
    from rlvr.models.loading import load_causal_lm, load_tokenizer, resolve_model_path
    from rlvr.models.logprobs import response_logprobs
    from rlvr.models.lora import apply_lora
    from rlvr.rollout.base import SamplingParams
    from rlvr.rollout.vllm_engine import VLLMRolloutEngine

    torch.set_num_threads(1)
    raw = {"model": {"lora": {"rank": rank, "alpha": 2.0 * rank, "vllm_adapter": way}},
           "data": {"source": {"type": "jsonl", "path": "unused.jsonl"}}, "verifiers": [{"name": "math"}],
           "rollout": {"engine": "vllm", "vllm_max_model_len": 256}, "trainer": {"precision": precision}}
    recipe = resolve(raw)
    path = resolve_model_path(recipe.model.name)
    tok = load_tokenizer(path, recipe.model)
    model = apply_lora(load_causal_lm(path, recipe.model), recipe.model.lora, base_name=recipe.model.name)
    start = time.perf_counter()
    engine = VLLMRolloutEngine.from_recipe(recipe, model, tok, [int(tok.eos_token_id)])
    startup = time.perf_counter() - start
    prompts = [list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)["input_ids"])
               for p in PROMPTS]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=32)
    sync_s, gen_s, worst = [], [], 0.0
    g = torch.Generator().manual_seed(0)
    for _ in range(syncs):
        with torch.no_grad():  # an "optimizer step": every adapter moves
            for name, p in model.named_parameters():
                if "lora_" in name:
                    p.copy_(torch.randn(p.shape, generator=g) * (0.02 if "lora_B" in name else 0.1))
        t = time.perf_counter()
        engine.sync_weights(model)
        sync_s.append(time.perf_counter() - t)
        torch.manual_seed(0)
        t = time.perf_counter()
        groups = engine.generate(prompts, 4, sampling)
        gen_s.append(time.perf_counter() - t)
        with torch.no_grad():
            for prompt, group in zip(prompts, groups):
                for c in group[:1]:
                    ids = torch.tensor([prompt + c.token_ids])
                    lp, _ = response_logprobs(model, ids, torch.ones_like(ids), len(c.token_ids), temperature=1.0)
                    worst = max(worst, float((lp[0] - torch.tensor(c.logprobs)).abs().max()))
    engine.close()
    return {"rank": rank, "way": engine.lora_sync.way, "asked": way, "startup_s": startup, "sync_s": sync_s,
            "generate_s": gen_s, "max_logprob_diff": worst, "dtype": str(engine.dtype).replace("torch.", ""),
            "load_avg": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 64])
    ap.add_argument("--syncs", type=int, default=5)
    ap.add_argument("--precision", default="fp32", help="trainer.precision (vLLM's dtype follows it)")
    ap.add_argument("--arm", nargs=2, metavar=("RANK", "WAY"), help=argparse.SUPPRESS)  # one arm, in a subprocess
    args = ap.parse_args()
    if args.arm:
        print("ARM " + json.dumps(run_arm(int(args.arm[0]), args.arm[1], args.syncs, args.precision)), flush=True)
        return
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    results = []
    for rank in args.ranks:
        for way in ("adapter", "merged"):
            load = os.getloadavg()[0]
            proc = subprocess.run([sys.executable, __file__, "--arm", str(rank), way, "--syncs", str(args.syncs),
                                   "--precision", args.precision], cwd=REPO, env=env, capture_output=True, text=True)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ARM ")), None)
            if proc.returncode != 0 or line is None:
                sys.exit(f"arm rank {rank} {way} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
            results.append({**json.loads(line[4:]), "load_start": load})
    print(f"{stamp()}; {args.syncs} syncs per arm, medians; vLLM CPU backend, 1 torch thread")
    print("| rank | way | sync s | generate s (8 x 4 x 32 tokens) | engine start s | max abs log-prob diff | "
          "dtype | load avg |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for r in results:
        print(f"| {r['rank']} | {r['way']} | {statistics.median(r['sync_s']):.3f} | "
              f"{statistics.median(r['generate_s']):.2f} | {r['startup_s']:.1f} | {r['max_logprob_diff']:.1e} | "
              f"{r['dtype']} | {r['load_start']:.1f} |")
    print("raw: " + json.dumps(results))


if __name__ == "__main__":
    main()
