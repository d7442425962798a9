"""In-process A/B of the ``hf`` engine's decoding: transformers ``generate`` (DynamicCache, ``repeat_kv``, stacked
``output_logits``) against rlvr's decode loop (:mod:`rlvr.rollout.decode`), alternated in one process.

    python benchmarks/bench_decode_ab.py --prompts 2 --n 8 --max-new-tokens 128 --reps 4 --threads 1

``decode_fused`` is the engine's path for Llama-style models on a CPU with native bf16 and AVX-512 (each decode step
through :mod:`rlvr.kernels.fused_decode`'s kernels); ``decode_gqa`` the same loop through transformers' modules
(linear layers over prepacked weights: :mod:`rlvr.kernels.packed_linear`), the engine's path elsewhere;
``decode_gqa_unpacked`` the same loop with ``F.linear`` on the plain weights; ``decode_fused_onednn`` the fused step
with its GEMMs through oneDNN (``decode_fused`` takes the kernel it measures fastest: ``amx_linear`` with AMX, else
``dot_linear`` or oneDNN);
``generate`` and ``decode_sdpa`` (transformers' SDPA attention) use packed weights where ``decode_gqa`` does. These
variants run on bf16 generation copies of the embedded SmolLM2-135M. In fp32 (the engine's path where generation runs
in fp32, on the policy itself): ``fp32_fused``, the fused step in fp32 (AVX2 kernels of
:mod:`rlvr.kernels.fp32_decode`), and ``fp32_modules``, transformers' modules with their linear layers through
the AVX2 GEMM where it measures faster (the path for other architectures):

    python benchmarks/bench_decode_ab.py --variants fp32_fused,fp32_modules --threads 2

All variants use the same prompts and seed per repetition;
eos is not suppressed, so each run reports seconds per decode step (steps = the longest sample). Printed: per variant
the median seconds per decode step and per rollout, the 1-minute load average, and whether the
variants sampled the same tokens (same seed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compute_floor import read_bandwidth_bytes_per_s  # noqa: E402

from rlvr.kernels.build import decode_kernels  # noqa: E402
from rlvr.kernels.fp32_decode import fp32_decode_linears, measured_fp32_decode  # noqa: E402
from rlvr.kernels.fused_decode import FusedDecoder, build_fused_decoder, fused_decode_supported  # noqa: E402
from rlvr.kernels.packed_linear import pack_linears, packing_supported  # noqa: E402
from rlvr.models.attention import use_grouped_query_attention  # noqa: E402
from rlvr.rollout import decode  # noqa: E402
from rlvr.rollout.hf import _low_precision_copy  # noqa: E402

QUESTIONS = ["What is 17 + 25 * 3 - 4?", "What is 9 * 8 - 144 / 12?", "What is 53 - 19 + 7 * 13?",
             "What is 250 + 375 - 81?"]


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    return ids, mask


def run_generate(model, ids, mask, n, max_new, eos, pad_id):
    """The engine's previous path: prefill all but the last prompt token, repeat the cache, ``generate``."""
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=pos[:, :-1], use_cache=True,
                  logits_to_keep=1).past_key_values
    cache.batch_repeat_interleave(n)
    out = model.generate(input_ids=ids.repeat_interleave(n, 0), attention_mask=mask.repeat_interleave(n, 0),
                         past_key_values=cache, do_sample=True, temperature=1.0, top_p=1.0, top_k=None,
                         max_new_tokens=max_new, eos_token_id=eos, pad_token_id=pad_id,
                         return_dict_in_generate=True, output_logits=True)
    logits = torch.stack(out.logits, dim=1).float()
    new = out.sequences[:, ids.shape[1]:]
    lp = logits.gather(-1, new.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
    return new, lp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--variants", default="generate,decode_sdpa,decode_gqa_unpacked,decode_gqa,decode_fused")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from rlvr.config import resolve
    from rlvr.models.loading import eos_token_ids, load_causal_lm, load_tokenizer, resolve_model_path

    recipe = resolve({"model": {"name": args.model}, "data": {"source": {"type": "jsonl", "path": "x.jsonl"}},
                      "verifiers": [{"name": "math"}]})
    path = resolve_model_path(recipe.model.name)
    tok = load_tokenizer(path, recipe.model)
    model = load_causal_lm(path, recipe.model).eval()
    eos = eos_token_ids(model, tok)
    gen_sdpa = _low_precision_copy(model, torch.bfloat16)
    gen_sdpa.config._attn_implementation = "sdpa"  # the copy defaults to the GQA attention now
    gen_gqa = _low_precision_copy(model, torch.bfloat16)
    use_grouped_query_attention(gen_gqa)
    for gen in (gen_sdpa, gen_gqa):
        if packing_supported(gen):  # packed linears where the CPU has native bf16, as the engine's fallback path
            pack_linears(gen)
    gen_fused = _low_precision_copy(model, torch.bfloat16)
    fused = build_fused_decoder(gen_fused) if "decode_fused" in args.variants else None
    if "decode_fused" in args.variants and fused is None:
        raise SystemExit(f"decode_fused: not available here ({fused_decode_supported(gen_fused)[1] or 'kernels'})")
    gen_onednn = _low_precision_copy(model, torch.bfloat16)
    fused_onednn = (FusedDecoder(gen_onednn, decode_kernels(), gemm="onednn")
                    if "decode_fused_onednn" in args.variants and fused_decode_supported(gen_onednn)[0]
                    and decode_kernels() is not None else None)
    if "decode_fused_onednn" in args.variants and fused_onednn is None:
        raise SystemExit("decode_fused_onednn: the fused step is not available here")
    gen_unpacked = _low_precision_copy(model, torch.bfloat16)  # F.linear on the plain bf16 weights
    fp32_fused = build_fused_decoder(model) if "fp32_fused" in args.variants else None
    if "fp32_fused" in args.variants and fp32_fused is None:
        raise SystemExit(f"fp32_fused: not available here ({fused_decode_supported(model)[1] or 'kernels'})")
    gen_fp32 = _low_precision_copy(model, torch.float32)  # the same weights, with the GQA attention as the policy's
    fp32_gemm = measured_fp32_decode(gen_fp32) if "fp32_modules" in args.variants else None
    fp32_linears = (lambda: fp32_decode_linears(gen_fp32, fp32_gemm)) if fp32_gemm is not None else nullcontext
    prompts = [tok.apply_chat_template([{"role": "user", "content": q + " Put your final answer within \\boxed{}."}],
                                       add_generation_prompt=True, tokenize=True, return_dict=False)
               for q in QUESTIONS[:args.prompts]]
    ids, mask = left_pad(prompts, tok.pad_token_id)
    variants = {
        "generate": lambda: run_generate(gen_sdpa, ids, mask, args.n, args.max_new_tokens, eos, tok.pad_token_id),
        "decode_sdpa": lambda: decode.sample(gen_sdpa, ids, mask, args.n, max_new_tokens=args.max_new_tokens,
                                             temperature=1.0, top_k=0, top_p=1.0, eos_ids=eos,
                                             pad_id=tok.pad_token_id),
        "decode_gqa_unpacked": lambda: decode.sample(gen_unpacked, ids, mask, args.n,
                                                     max_new_tokens=args.max_new_tokens, temperature=1.0, top_k=0,
                                                     top_p=1.0, eos_ids=eos, pad_id=tok.pad_token_id),
        "decode_gqa": lambda: decode.sample(gen_gqa, ids, mask, args.n, max_new_tokens=args.max_new_tokens,
                                            temperature=1.0, top_k=0, top_p=1.0, eos_ids=eos,
                                            pad_id=tok.pad_token_id),
        "decode_fused": lambda: decode.sample(gen_fused, ids, mask, args.n, max_new_tokens=args.max_new_tokens,
                                              temperature=1.0, top_k=0, top_p=1.0, eos_ids=eos,
                                              pad_id=tok.pad_token_id, fused=fused),
        "decode_fused_onednn": lambda: decode.sample(gen_onednn, ids, mask, args.n,
                                                     max_new_tokens=args.max_new_tokens, temperature=1.0, top_k=0,
                                                     top_p=1.0, eos_ids=eos, pad_id=tok.pad_token_id,
                                                     fused=fused_onednn),
        "fp32_fused": lambda: decode.sample(model, ids, mask, args.n, max_new_tokens=args.max_new_tokens,
                                            temperature=1.0, top_k=0, top_p=1.0, eos_ids=eos,
                                            pad_id=tok.pad_token_id, fused=fp32_fused),
        "fp32_modules": lambda: _within(fp32_linears, lambda: decode.sample(
            gen_fp32, ids, mask, args.n, max_new_tokens=args.max_new_tokens, temperature=1.0, top_k=0, top_p=1.0,
            eos_ids=eos, pad_id=tok.pad_token_id)),
    }
    names = args.variants.split(",")
    unknown = sorted(set(names) - set(variants))
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; expected some of {sorted(variants)}")
    per_step: dict[str, list[float]] = {k: [] for k in names}
    per_run: dict[str, list[float]] = {k: [] for k in names}
    loads, same = [], []
    with torch.no_grad():
        for name in names:  # warm-up
            torch.manual_seed(0)
            variants[name]()
        for rep in range(args.reps):
            order = names if rep % 2 == 0 else names[::-1]
            toks = {}
            for name in order:
                torch.manual_seed(100 + rep)
                t0 = time.perf_counter()
                new, lp = variants[name]()
                dt = time.perf_counter() - t0
                per_run[name].append(dt)
                per_step[name].append(dt / new.shape[1])
                toks[name] = new
                loads.append(os.getloadavg()[0])
                print(f"rep {rep} {name}: {dt:.2f} s, {new.shape[1]} steps, {dt / new.shape[1] * 1000:.1f} ms/step, "
                      f"load {loads[-1]:.1f}", flush=True)
            ref = toks[names[0]]
            for name in names[1:]:
                t = min(ref.shape[1], toks[name].shape[1])
                same.append(bool((ref[:, :t] == toks[name][:, :t]).all()))
    # the bandwidth floor of a decode step: every weight read once (2 bytes in bf16, 4 in fp32), at the read rate
    # of this process
    floor_s = sum(p.numel() for p in model.parameters()) * 2 / read_bandwidth_bytes_per_s()
    print(f"weight-read floor {floor_s * 1000:.1f} ms/decode step in bf16, {2 * floor_s * 1000:.1f} in fp32 "
          f"({args.threads} threads)")
    for name in names:
        floor = 2 * floor_s if name.startswith("fp32") else floor_s
        print(f"{name}: median {statistics.median(per_step[name]) * 1000:.1f} ms/decode step "
              f"({statistics.median(per_step[name]) / floor:.1f}x the floor), "
              f"{statistics.median(per_run[name]):.2f} s/rollout ({args.prompts} x {args.n} x <= "
              f"{args.max_new_tokens})")
    print(f"load 1-min median {statistics.median(loads):.1f}; identical tokens across variants: {same}")


def _within(context, call):
    """``call()`` inside ``context()``."""
    with context():
        return call()


if __name__ == "__main__":
    main()
