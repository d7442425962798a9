"""rlvr against TRL's ``RLTrainer``, side by side on this machine: step time per stage, peak RSS, and the step's
FLOP / memory-bandwidth floor. Writes ``benchmarks/RESULTS.md`` and ``benchmarks/results/vs_trl.png``.

    python benchmarks/bench_vs_trl.py --setup-trl          # once: TRL in its own venv (.venv-trl), pins kept apart
    python benchmarks/bench_vs_trl.py                      # SmolLM2-135M + a tiny Qwen2-shaped model, 3 pairs each
    python benchmarks/bench_vs_trl.py --models tiny --pairs 1 --steps 3      # a quick check

Both sides get the same settings (GRPO, 2 prompts x 8 samples, 128 new tokens, temperature 1, lr 1e-6, no KL,
token-mean loss, clip 0.2, grad clip 1.0, HF generate, the precision ``auto`` picks on this CPU), the same prompts
(reasoning-gym ``basic_arithmetic``, boxed-answer instruction, chat template) and the same model folder (the embedded
SmolLM2 converted once by ``rlvr.models.embedded``). Each run is its own process (``rlvr_step_worker.py`` in this venv,
``trl_step_worker.py`` in TRL's); the two sides alternate run by run, starting side swapped every pair, so the load
other jobs put on the shared cores hits both. The first step of every run is a warm-up and is not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from compute_floor import machine_limits, matmul_flops_per_s, read_bandwidth_bytes_per_s, step_floor  # noqa: E402
from machine import commit  # noqa: E402

ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **os.environ}  # caches: rlvr's defaults
TRL_PINS = ["torch==2.13.0", "trl==1.16.0", "math-verify[antlr4-13-2]"]
"""TRL's venv: torch pinned to the CPU wheel rlvr uses (a bare install could pull a CUDA build); math-verify for TRL's
``accuracy_reward``."""
SIDES = ("rlvr", "trl")
MODELS = ("smollm2", "tiny")


def setup_trl_venv(venv: Path, pins: list[str] = TRL_PINS) -> Path:
    """Create ``venv`` if missing and install ``pins`` (TRL's: :data:`TRL_PINS`) into it; returns its python."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *pins], check=True)
    out = subprocess.run([str(python), "-c", "import trl, torch; print(trl.__version__, torch.__version__)"],
                         check=True, capture_output=True, text=True).stdout.split()
    if "+cpu" not in out[1]:
        raise RuntimeError(f"{venv}: torch {out[1]} is not the CPU build; reinstall with {TRL_PINS[0]}")
    print(f"{venv}: trl {out[0]}, torch {out[1]}")
    return python


def cpu_info() -> dict:
    """CPU model, the SIMD flags that decide bf16 speed, core count and torch's kernel level."""
    import torch

    model, flags = platform.processor(), set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            model = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
    wanted = ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16"]
    return {"model": model, "flags": [f for f in wanted if f in flags], "cores": os.cpu_count(),
            "torch_capability": torch.backends.cpu.get_cpu_capability()}


def auto_precision(info: dict) -> str:
    """bf16 where the CPU computes it natively (AVX-512 bf16 or AMX), else fp32 (emulated bf16 is ~20x slower). One
    precision for both sides (TRL takes one); the report prints both matmul rates, which show where this rule errs
    (a CPU whose fp32 GEMM outruns its bf16 one: rlvr's own ``auto`` measures instead)."""
    return "bf16" if {"avx512_bf16", "amx_bf16"} & set(info["flags"]) else "fp32"


def tiny_model_dir(cache: Path, tokenizer_dir: Path) -> Path:
    """A random Qwen2-shaped model (hidden 64, 2 layers) with SmolLM2's tokenizer and chat template, saved once."""
    out = cache / "bench-tiny-qwen2"
    if (out / "config.json").is_file():
        return out
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.bos_token_id)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    tmp = Path(tempfile.mkdtemp(prefix=".bench-tiny-", dir=cache))
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    os.replace(tmp, out)
    return out


def write_prompts(path: Path, size: int, seed: int) -> Path:
    """reasoning-gym ``basic_arithmetic`` rows ``{"question", "answer"}`` as JSONL (read by both sides)."""
    import reasoning_gym

    with path.open("w") as fh:
        for item in reasoning_gym.create_dataset("basic_arithmetic", seed=seed, size=size):
            fh.write(json.dumps({"question": item["question"], "answer": str(item["answer"])}) + "\n")
    return path


def run_side(side: str, spec: dict, trl_python: Path, work: Path, tag: str, reuse: bool = False) -> dict:
    """One run of ``side`` in its own process; returns the worker's JSON (raises with the log's tail on failure), with
    ``limits``: the machine's matmul rate and read bandwidth measured right before the run
    (:func:`compute_floor.machine_limits`), whose median over the runs sets the floors (:func:`summarize`).

    With ``reuse``, a finished run of the same tag and spec in ``work`` is read back instead of run again (to continue
    an interrupted invocation; only valid while the code under test has not changed)."""
    spec_path, out_path, log_path = work / f"{tag}.spec.json", work / f"{tag}.json", work / f"{tag}.log"
    spec = {**spec, "scratch_dir": str(work / f"{tag}-scratch")}
    if reuse and out_path.exists() and spec_path.exists() and json.loads(spec_path.read_text()) == spec:
        print(f"{tag}: reusing {out_path}", flush=True)
        return json.loads(out_path.read_text())
    out_path.unlink(missing_ok=True)
    spec_path.write_text(json.dumps(spec))
    limits = machine_limits(spec["precision"])
    python = sys.executable if side == "rlvr" else str(trl_python)
    cmd = [python, str(HERE / f"{side}_step_worker.py"), str(spec_path), str(out_path)]
    env = {**ENV, "PYTHONPATH": str(REPO)} if side == "rlvr" else {k: v for k, v in ENV.items() if k != "PYTHONPATH"}
    print(f"[{time.strftime('%H:%M:%S')}] {tag}: {' '.join(cmd)}", flush=True)
    with log_path.open("w") as log:
        rc = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc:
        tail = "\n".join(log_path.read_text().splitlines()[-30:])
        raise RuntimeError(f"{tag} failed (exit {rc}); log {log_path}:\n{tail}")
    result = {**json.loads(out_path.read_text()), "limits": limits}
    out_path.write_text(json.dumps(result))  # a reused run keeps its limits
    timed = result["steps"][1:]
    print(f"    median {statistics.median(s['wall_s'] for s in timed):.2f} s/step over {len(timed)} steps, "
          f"peak RSS {result['peak_rss_mb']:.0f} MB", flush=True)
    return result


def median_of(steps: list[dict], key: str) -> float:
    return statistics.median(s[key] for s in steps)


def run_limits(run: dict, machine: dict, precision: str) -> tuple[float, float]:
    """The matmul FLOP/s in ``precision`` and read bytes/s measured right before a run (``run["limits"]``), or, for a
    run recorded without them, at the start of the invocation."""
    limits = run.get("limits")
    if limits is None:
        return machine["matmul_flops_per_s"][precision], machine["read_bytes_per_s"]
    return limits["matmul_flops_per_s"], limits["read_bytes_per_s"]


def floors(steps: list[dict], params: int, precision: str, limits: tuple[float, float]) -> dict:
    """Median floor seconds per stage over ``steps`` (each step's own token counts) at ``limits``, (FLOP/s, bytes/s)."""
    out = {"generation": [], "training": [], "step": [], "generation_bandwidth": [], "generation_compute": []}
    for s in steps:
        f = step_floor(params, s["prompt_tokens"], s["completion_tokens"], *limits, 2 if precision == "bf16" else 4)
        out["generation"].append(f.generation_s)
        out["generation_bandwidth"].append(f.generation_bandwidth_s)
        out["generation_compute"].append(f.generation_compute_s)
        out["training"].append(f.training_s)
        out["step"].append(f.step_s)
    return {k: statistics.median(v) for k, v in out.items()}


def summarize(runs: list[dict], params: int, machine: dict, precision: str) -> dict:
    """Per side: medians over every timed step of its runs, and their floors at the median of the machine's limits
    measured before each run (on a shared host a single reading can catch a passing dip or burst: the median moves
    with neither); the ratio: median over pairs of the per-pair ratio of median step times."""
    by_side = {side: [r for r in runs if r["side"] == side] for side in SIDES}
    out: dict = {"sides": {}}
    limits = [run_limits(r, machine, precision) for r in runs]
    at = (statistics.median(x[0] for x in limits), statistics.median(x[1] for x in limits))
    for side, rs in by_side.items():
        steps = [s for r in rs for s in r["steps"][1:]]
        out["sides"][side] = {
            "step_s": median_of(steps, "wall_s"), "step_min_s": min(s["wall_s"] for s in steps),
            "step_max_s": max(s["wall_s"] for s in steps),
            "generation_s": median_of(steps, "generation_s"), "scoring_s": median_of(steps, "scoring_s"),
            "training_s": median_of(steps, "training_s"),
            "completion_tokens": statistics.median(sum(s["completion_tokens"]) for s in steps),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in rs), "load_1m": statistics.median(s["load_1m"] for s in steps),
            "steps": len(steps), "runs": len(rs), "floor": floors(steps, params, precision, at),
            "versions": rs[0]["versions"]}
    pairs = [median_of(a["steps"][1:], "wall_s") / median_of(b["steps"][1:], "wall_s")
             for a, b in zip(by_side["rlvr"], by_side["trl"], strict=True)]
    out["pair_ratios"] = pairs
    out["pairs"] = [{"first": SIDES[i % 2], **{f"{r['side']}_step_s": median_of(r["steps"][1:], "wall_s") for r in (a, b)},
                     **{f"{r['side']}_load_1m": statistics.median(x["load_1m"] for x in r["steps"][1:]) for r in (a, b)}}
                    for i, (a, b) in enumerate(zip(by_side["rlvr"], by_side["trl"], strict=True))]
    out["ratio"] = statistics.median(pairs)
    out["limits"] = {"matmul_flops_per_s": [min(x[0] for x in limits), at[0], max(x[0] for x in limits)],
                     "read_bytes_per_s": [min(x[1] for x in limits), at[1], max(x[1] for x in limits)],
                     "per_run": any("limits" in r for r in runs)}
    return out


def plot(summaries: dict, path: Path) -> None:
    """Stacked bars: generation / scoring / training seconds per side and model, with each side's floor marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(summaries), figsize=(5 * len(summaries), 4), squeeze=False)
    for ax, (name, summ) in zip(axes[0], summaries.items(), strict=True):
        bottom = [0.0, 0.0]
        for stage, color in (("generation", "tab:blue"), ("scoring", "tab:orange"), ("training", "tab:green")):
            vals = [summ["sides"][s][f"{stage}_s"] for s in SIDES]
            ax.bar(SIDES, vals, bottom=bottom, color=color, label=stage)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        for i, side in enumerate(SIDES):
            ax.hlines(summ["sides"][side]["floor"]["step"], i - 0.4, i + 0.4, colors="k", linestyles="--",
                      label="FLOP/bandwidth floor" if i == 0 else None)
        ax.set_title(f"{name}: rlvr/TRL = {summ['ratio']:.2f}")
        ax.set_ylabel("median seconds per step")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def parse_pairs(text: str, models: list[str]) -> dict[str, int]:
    """``--pairs``: "N" for every model or "model=N,..." (a model left out gets 1).

    Raises:
        SystemExit: an unknown model name or a count below 1.
    """
    for name in models:
        if name not in MODELS:
            sys.exit(f"--models: unknown model {name!r}; expected one of {', '.join(MODELS)}")
    if "=" not in text:
        counts = {name: int(text) for name in models}
    else:
        counts = {name: 1 for name in models}
        for item in text.split(","):
            name, _, n = item.partition("=")
            if name not in models:
                sys.exit(f"--pairs: {name!r} is not among --models {','.join(models)}")
            counts[name] = int(n)
    if min(counts.values()) < 1:
        sys.exit(f"--pairs: every model needs at least 1 pair, got {counts}")
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setup-trl", action="store_true", help="create/refresh TRL's venv and exit")
    ap.add_argument("--trl-venv", type=Path, default=REPO / ".venv-trl")
    ap.add_argument("--models", default="smollm2,tiny", help="comma-separated: smollm2, tiny")
    ap.add_argument("--pairs", default="3", help="alternated rlvr/TRL run pairs per model: N for every model, or "
                    "per model, e.g. smollm2=2,tiny=1")
    ap.add_argument("--steps", type=int, default=6, help="steps per run; the first is a warm-up")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads on both sides")
    ap.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto")
    ap.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    ap.add_argument("--results-dir", type=Path, default=HERE / "results",
                    help="where vs_trl_raw.json and vs_trl.png go (another folder keeps a run on another machine apart)")
    ap.add_argument("--work-dir", type=Path, default=REPO / "runs" / "bench_vs_trl")
    ap.add_argument("--reuse", action="store_true",
                    help="read back finished runs of the same spec from --work-dir (continue an interrupted run)")
    ap.add_argument("--render-only", action="store_true",
                    help="rewrite --out and the plot from --results-dir's vs_trl_raw.json without measuring")
    args = ap.parse_args()
    if args.setup_trl:
        setup_trl_venv(args.trl_venv)
        return
    if args.render_only:
        saved = json.loads((args.results_dir / "vs_trl_raw.json").read_text())
        machine = saved["machine"]
        summaries = {name: {**summarize(runs, saved["summaries"][name]["params"], machine, machine["precision"]),
                            "params": saved["summaries"][name]["params"]} for name, runs in saved["runs"].items()}
        write_outputs(machine, summaries, saved["runs"], args, saved["argv"])
        return
    trl_python = args.trl_venv / "bin" / "python"
    if not trl_python.exists():
        sys.exit(f"no TRL venv at {args.trl_venv}: run `python benchmarks/bench_vs_trl.py --setup-trl` first")
    if args.steps < 2:
        sys.exit("--steps must be >= 2 (the first step is a warm-up)")

    import torch

    from rlvr import cache_dir
    from rlvr.models.embedded import embedded_model_dir

    torch.set_num_threads(args.threads)
    info = cpu_info()
    precision = auto_precision(info) if args.precision == "auto" else args.precision
    machine = {"cpu": info, "commit": commit(), "precision": precision, "threads": args.threads,
               "matmul_flops_per_s": {"bf16": matmul_flops_per_s(torch.bfloat16),
                                      "fp32": matmul_flops_per_s(torch.float32)},
               "read_bytes_per_s": read_bandwidth_bytes_per_s(), "read_pages": "2 MB", "load_1m_at_start": os.getloadavg()[0],
               "steps_per_run": args.steps, "measured_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(f"machine: {json.dumps(machine)}", flush=True)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    cache = cache_dir()
    smollm2 = embedded_model_dir(cache)
    model_dirs = {"smollm2": smollm2, "tiny": None}
    prompts = write_prompts(args.work_dir / "basic_arithmetic.jsonl", size=500, seed=0)
    summaries, raw = {}, {}
    pairs = parse_pairs(args.pairs, args.models.split(","))
    for name in args.models.split(","):
        model_dir = model_dirs[name] or tiny_model_dir(cache, smollm2)
        from transformers import AutoConfig, AutoModelForCausalLM
        with torch.device("meta"):
            params = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir)).num_parameters()
        spec = {"model_dir": str(model_dir), "prompts": str(prompts), "steps": args.steps, "seed": 0,
                "threads": args.threads, "precision": precision, "prompts_per_step": 2, "group_size": 8,
                "max_new_tokens": 128, "lr": 1e-6}
        runs = []
        for pair in range(pairs[name]):
            order = SIDES if pair % 2 == 0 else SIDES[::-1]
            for side in order:
                runs.append(run_side(side, spec, trl_python, args.work_dir, f"{name}-pair{pair}-{side}",
                                     reuse=args.reuse))
        runs.sort(key=lambda r: SIDES.index(r["side"]))  # stable: pair order kept within a side
        summaries[name] = {**summarize(runs, params, machine, precision), "params": params}
        raw[name] = runs
        print(f"{name}: step time ratio rlvr/TRL {summaries[name]['ratio']:.2f} (pairs "
              f"{[round(x, 2) for x in summaries[name]['pair_ratios']]})", flush=True)
        write_outputs(machine, summaries, raw, args, sys.argv[1:])  # after every model: a later one may be cut


def write_outputs(machine: dict, summaries: dict, raw: dict, args: argparse.Namespace, argv: list[str]) -> None:
    """``vs_trl_raw.json`` (every step of every run) and ``vs_trl.png`` in ``args.results_dir``, and ``args.out``."""
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "vs_trl_raw.json").write_text(json.dumps({"machine": machine, "summaries": summaries,
                                                                  "runs": raw, "argv": argv}, indent=1))
    plot(summaries, args.results_dir / "vs_trl.png")
    from vs_trl_report import FINDINGS, render_results
    text = render_results(machine, summaries, machine["steps_per_run"], argv, FINDINGS)
    # from bench_learning_vs_trl.py's start marker on, the file holds other benchmarks' own sections (learning per
    # CPU-second, LoRA, the tool demo): carried over as they are
    from bench_learning_vs_trl import MARK_START as start
    old = args.out.read_text() if args.out.exists() else ""
    if start in old:
        text = text.rstrip("\n") + "\n\n" + start + old.split(start, 1)[1]
    args.out.write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
