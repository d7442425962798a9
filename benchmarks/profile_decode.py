"""Where a fused decode step's time goes: each kernel call and each GEMM of the ``hf`` engine's fused bf16 (or fp32)
decode step timed on its own, with a fixed number of rows live, on the embedded SmolLM2-135M.

    python benchmarks/profile_decode.py --prompts 2 --n 8 --steps 64 --threads 2

Samples ``--n`` continuations of each of ``--prompts`` prompts through :func:`rlvr.rollout.decode.sample` with the
engine's :class:`~rlvr.kernels.fused_decode.FusedDecoder`, eos suppressed so every row stays live for ``--steps``
steps (the cost of a step at that row count, where a real rollout's rows leave as they finish). After a warm-up
rollout, one rollout runs with a timer around every call of the decoder's kernels (RMSNorm, RoPE, attention,
SiLU x up, the sampling draw) and of its GEMMs (per projection kind: qkv, o, gate_up, down, the output layer). Where
the engine runs every layer of a step in one kernel call (``FusedDecoder.one_call``: the tile GEMMs), one untimed
rollout that way comes first, and the timed one calls the same kernels one by one from Python.

With ``--lengths`` (one response length a row, as ``bench_decode_kernels_ab.py`` takes them), row i ends after its
i-th length instead, as a real rollout's rows leave as they finish, and the engine's steps are timed as they run: per
number of rows live, the steps, their median milliseconds against their floor, and the rollout's total against the
sum of the floors.

Prints, per decode step: each part's milliseconds, calls and share, and each GEMM kind's achieved GFLOP/s (2 x rows x
in x out per call), beside this process's matmul rate in the same dtype and the step's floor (the larger of its
FLOPs at that rate and one read of every weight at the read bandwidth: :mod:`compute_floor`), with the CPU, commit
and date. The timers add a few microseconds a call (~0.3 ms a step in 220 calls).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decode_ab import QUESTIONS, left_pad  # noqa: E402
from compute_floor import matmul_flops_per_s, read_bandwidth_bytes_per_s  # noqa: E402
from machine import stamp  # noqa: E402

VS_TRL_LENGTHS = "32,45,8,128,75,36,17,15,90,83,128,63,18,42,128,15"
"""The response lengths of a step of ``bench_vs_trl.py`` (SmolLM2-135M, 2 x 8 rows, up to 128 tokens; 2026-12-07)."""

PROJECTIONS = ("qkv", "o", "gate_up", "down")
"""The GEMMs of a decoder layer in :class:`~rlvr.kernels.fused_decode.FusedDecoder` (attribute names)."""


class Timers:
    """Seconds and calls per name, added by the wrappers :meth:`wrap` makes."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter[str] = collections.Counter()

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            self.seconds[name] += time.perf_counter() - t0
            self.calls[name] += 1
            return out
        return timed


class _TimedKernels:
    """The decoder's kernel module with every function call timed under its own name."""

    def __init__(self, kernels: object, timers: Timers) -> None:
        self._kernels, self._timers = kernels, timers

    def __getattr__(self, name: str) -> object:
        value = getattr(self._kernels, name)
        return self._timers.wrap(name, value) if callable(value) else value


class _TimedProjection:
    """A decoder GEMM (``__call__(x)``, ``refresh()``) timed under ``name``."""

    def __init__(self, projection: object, name: str, timers: Timers) -> None:
        self.projection = projection
        self._call = timers.wrap(name, projection.__call__)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._call(x)

    def refresh(self) -> None:
        self.projection.refresh()


def load_decoder(dtype: torch.dtype, prompts: int) -> tuple[torch.nn.Module, object, torch.Tensor, torch.Tensor, int]:
    """The embedded SmolLM2-135M's generation copy in ``dtype``, its :class:`~rlvr.kernels.fused_decode.FusedDecoder`,
    the first ``prompts`` of :data:`QUESTIONS` in its chat template, left-padded ((U, P) ids and mask), and the pad id.

    Raises:
        SystemExit: the fused step is not available on this CPU in ``dtype``.
    """
    from rlvr.config import resolve
    from rlvr.kernels.fused_decode import build_fused_decoder, fused_decode_supported
    from rlvr.models.loading import load_causal_lm, load_tokenizer, resolve_model_path
    from rlvr.rollout.hf import _low_precision_copy

    recipe = resolve({"model": {"name": "embedded:smollm2-135m-instruct"},
                      "data": {"source": {"type": "jsonl", "path": "x.jsonl"}}, "verifiers": [{"name": "math"}]})
    path = resolve_model_path(recipe.model.name)
    tok = load_tokenizer(path, recipe.model)
    model = load_causal_lm(path, recipe.model).eval()
    gen = _low_precision_copy(model, dtype) if dtype != torch.float32 else model
    fused = build_fused_decoder(gen)
    if fused is None:
        raise SystemExit(f"the fused {dtype} decode step is not available here: "
                         f"{fused_decode_supported(gen)[1] or 'its kernels did not build'}")
    chats = [tok.apply_chat_template([{"role": "user", "content": q + " Put your final answer within \\boxed{}."}],
                                     add_generation_prompt=True, tokenize=True, return_dict=False)
             for q in QUESTIONS[:prompts]]
    ids, mask = left_pad(chats, tok.pad_token_id)
    return gen, fused, ids, mask, tok.pad_token_id


def add_lengths_option(ap: argparse.ArgumentParser, effect: str) -> None:
    """``--lengths``, one response length a row, for :func:`lengths_stop_when`; ``effect``: what giving it does."""
    ap.add_argument("--lengths", type=lambda text: [int(v) for v in text.split(",")], default=None,
                    help=f"comma-separated response lengths, one a row (prompt-major), each at most --steps: the rows "
                         f"end there ({effect}). bench_vs_trl's first timed step: {VS_TRL_LENGTHS}")


def lengths_stop_when(ap: argparse.ArgumentParser, args: argparse.Namespace) -> Callable[[int, list[int]], bool] | None:
    """The ``stop_when`` of :func:`rlvr.rollout.decode.sample` that ends row i after ``args.lengths[i]`` tokens, or
    None without ``--lengths``. Exits through ``ap.error`` where the lengths do not fit ``--prompts`` x ``--n`` rows
    of at most ``--steps`` tokens."""
    lengths, rows = args.lengths, args.prompts * args.n
    if lengths is None:
        return None
    if len(lengths) != rows or not all(1 <= v <= args.steps for v in lengths):
        ap.error(f"--lengths: expected {rows} lengths (--prompts x --n) in 1..{args.steps}, got {lengths}")
    return lambda row, ids: len(ids) >= lengths[row]


def lengths_text(lengths: list[int]) -> str:
    """``16 rows ending after 8-128 tokens (923 in all)``."""
    return f"{len(lengths)} rows ending after {min(lengths)}-{max(lengths)} tokens ({sum(lengths)} in all)"


def by_rows_live(gen: torch.nn.Module, fused: object, ids: torch.Tensor, mask: torch.Tensor, pad_id: int,
                 args: argparse.Namespace, stop_when: Callable[[int, list[int]], bool]) -> None:
    """One rollout whose row i ends after ``args.lengths[i]`` tokens, each engine step timed: prints the steps by rows
    live against their floors (:func:`compute_floor.step_floor`'s per-step roofline) and the rollout's parts."""
    from rlvr.rollout import decode

    dtype = next(gen.parameters()).dtype
    timed: list[tuple[int, float]] = []  # (rows live, seconds) a step
    step = fused.step

    def timed_step(state, tokens, positions, rows=None):  # noqa: ANN001, ANN202
        t0 = time.perf_counter()
        out = step(state, tokens, positions, rows)
        timed.append((tokens.shape[0], time.perf_counter() - t0))
        return out

    def rollout() -> float:
        timed.clear()
        torch.manual_seed(0)
        t0 = time.perf_counter()
        decode.sample(gen, ids, mask, args.n, max_new_tokens=args.steps, temperature=1.0, top_k=0, top_p=1.0,
                      eos_ids=[], pad_id=pad_id, fused=fused, stop_when=stop_when)
        return time.perf_counter() - t0

    fused.step = timed_step
    rollout()  # warm-up: kernel selection, first-touch of the caches
    wall = rollout()
    params = sum(p.numel() for p in gen.parameters())
    rate, read = matmul_flops_per_s(dtype), read_bandwidth_bytes_per_s()
    weight_read_s = params * (2 if dtype == torch.bfloat16 else 4) / read
    by_rows: dict[int, list[float]] = collections.defaultdict(list)
    for rows, seconds in timed:
        by_rows[rows].append(seconds)
    print(f"{stamp()}; {args.threads} thread(s), {args.precision}; {lengths_text(args.lengths)}; matmul "
          f"{rate / 1e9:.0f} GFLOP/s, read {read / 1e9:.1f} GB/s (a weight read {weight_read_s * 1000:.2f} ms)")
    print(f"{'rows live':>9s} {'steps':>5s} {'ms median':>9s} {'floor ms':>8s} {'x floor':>7s}")
    floor_sum = 0.0
    for rows in sorted(by_rows, reverse=True):
        floor = max(2.0 * params * rows / rate, weight_read_s)
        floor_sum += floor * len(by_rows[rows])
        median = statistics.median(by_rows[rows])
        print(f"{rows:9d} {len(by_rows[rows]):5d} {median * 1000:9.2f} {floor * 1000:8.2f} {median / floor:7.2f}")
    steps_s = sum(seconds for _, seconds in timed)
    print(f"rollout {wall:.3f} s: {len(timed)} decode steps {steps_s:.3f} s against their floors' sum "
          f"{floor_sum:.3f} s ({steps_s / floor_sum:.2f}x); {wall - steps_s:.3f} s outside them (the prefill, the sampling draws, the "
          f"loop)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=2, choices=range(1, len(QUESTIONS) + 1))
    ap.add_argument("--n", type=int, default=8, help="samples per prompt (rows live = prompts x n)")
    ap.add_argument("--steps", type=int, default=64, help="decode steps a rollout (every row runs them all)")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--threads", type=int, default=2)
    add_lengths_option(ap, "each step is then timed by rows live")
    args = ap.parse_args()
    stop_when = lengths_stop_when(ap, args)
    torch.set_num_threads(args.threads)
    from rlvr.rollout import decode

    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    gen, fused, ids, mask, pad_id = load_decoder(dtype, args.prompts)
    if stop_when is not None:
        by_rows_live(gen, fused, ids, mask, pad_id, args, stop_when)
        return

    def rollout() -> torch.Tensor:
        torch.manual_seed(0)
        new, _ = decode.sample(gen, ids, mask, args.n, max_new_tokens=args.steps, temperature=1.0, top_k=0,
                               top_p=1.0, eos_ids=[], pad_id=pad_id, fused=fused)
        return new

    rollout()  # warm-up: kernel selection, first-touch of the caches
    one_call_s = None
    if fused.one_call:  # the engine's step: every layer in one kernel call, which no timer below can see into
        t0 = time.perf_counter()
        rollout()
        one_call_s = time.perf_counter() - t0
        fused.one_call = False  # the same kernels in the same order, each called (and timed) from Python
    timers = Timers()
    fused.kernels = _TimedKernels(fused.kernels, timers)
    config = gen.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    qkv_out = (config.num_attention_heads + 2 * config.num_key_value_heads) * head_dim
    features = {  # (out, in) of each GEMM, by its timer's name
        "gemm qkv": (qkv_out, config.hidden_size), "gemm o": (config.hidden_size, config.num_attention_heads * head_dim),
        "gemm gate_up": (2 * config.intermediate_size, config.hidden_size),
        "gemm down": (config.hidden_size, config.intermediate_size),
        "gemm lm_head": (config.vocab_size, config.hidden_size)}
    for layer in fused.layers:
        for name in PROJECTIONS:
            setattr(layer, name, _TimedProjection(getattr(layer, name), f"gemm {name}", timers))
    fused.lm_head = _TimedProjection(fused.lm_head, "gemm lm_head", timers)
    step = fused.step
    fused.step = timers.wrap("step", step)
    t0 = time.perf_counter()
    new = rollout()
    wall = time.perf_counter() - t0

    rows, steps = new.shape[0], timers.calls["step"]
    params = sum(p.numel() for p in gen.parameters())
    rate = matmul_flops_per_s(dtype)
    read = read_bandwidth_bytes_per_s()
    step_flops = 2.0 * params * rows
    weight_read_s = params * (2 if dtype == torch.bfloat16 else 4) / read
    floor = max(step_flops / rate, weight_read_s)
    per_step = timers.seconds["step"] / steps
    print(f"{stamp()}; {args.threads} thread(s), {args.precision}; {rows} rows live, {steps} decode steps")
    print(f"rollout {wall:.3f} s ({wall - timers.seconds['step']:.3f} s outside the decode steps: prefill, the "
          f"sampling loop); a decode step {per_step * 1000:.2f} ms; its floor {floor * 1000:.2f} ms (FLOPs "
          f"{step_flops / rate * 1000:.2f} ms at {rate / 1e9:.0f} GFLOP/s, weight read "
          f"{weight_read_s * 1000:.2f} ms at {read / 1e9:.1f} GB/s): "
          f"{per_step / floor:.2f}x")
    if one_call_s is not None:
        outside = wall - timers.seconds["step"]
        print(f"the engine's step, every layer in one kernel call: rollout {one_call_s:.3f} s, a decode step ~"
              f"{(one_call_s - outside) / steps * 1000:.2f} ms ({(one_call_s - outside) / steps / floor:.2f}x its "
              f"floor; the time outside the steps taken as above); the parts below are its kernels called and "
              f"timed one by one from Python")
    parts = sorted(((name, s) for name, s in timers.seconds.items() if name != "step"), key=lambda kv: -kv[1])
    print(f"{'part':22s} {'ms/step':>8s} {'calls/step':>10s} {'share':>6s} {'GFLOP/s':>8s}")
    for name, seconds in parts:
        gflops = ""
        if name in features:
            out_f, in_f = features[name]
            gflops = f"{2.0 * rows * out_f * in_f * timers.calls[name] / seconds / 1e9:8.0f}"
        print(f"{name:22s} {seconds / steps * 1000:8.3f} {timers.calls[name] / steps:10.1f} "
              f"{seconds / timers.seconds['step']:6.1%} {gflops:>8s}")
    rest = timers.seconds["step"] - sum(s for _, s in parts)
    print(f"{'between the calls':22s} {rest / steps * 1000:8.3f} {'':>10s} {rest / timers.seconds['step']:6.1%}")


if __name__ == "__main__":
    main()
