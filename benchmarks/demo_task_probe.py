"""Probe the embedded SmolLM2-135M-Instruct on candidate tasks for the CPU demo, before any training.

GRPO learns only from groups whose samples disagree, so the demo task must sit where the base model is
sometimes right: sampled accuracy at T=1.0 roughly 15-50%, greedy clearly above sampled (headroom that RL
sharpening can take), most groups of 8 mixed, short completions, and a score that is not explained by a
constant answer. This script measures, for each (task, difficulty, prompt style, temperature):

- ``sampled``: mean exact-match reward of ``--samples`` samples per prompt (pass@1 at that temperature);
- ``greedy``: exact-match accuracy of the greedy completion;
- ``boxed``: fraction of sampled completions that contain ``\\boxed{...}``;
- ``mixed``: fraction of prompts whose samples got both reward 0 and reward 1;
- ``tokens``: mean completion length in tokens (eos included), and ``trunc`` the fraction cut at
  ``--max-new-tokens``;
- ``const``: accuracy of the best single constant answer on the same prompts (the answer prior), and
  ``prior``: the best skill-free strategy (``const``, or a task-specific one such as "always the first").

To fit ~15 minutes of 2 shared cores, the grid is staged: every default task is screened one-shot at
T=1.0, then the ``--top`` tasks by :func:`score` get one-shot T=0.7 and two-shot T=1.0 / T=0.7, and the
best ``--bare-top`` also the bare prompt at T=1.0 (bare prompts are known to score ~0: the model rarely
boxes without an example). Each prompt is prefilled once and its KV cache reused for greedy and all
samples (``--engine cached``; token-for-token identical to ``generate`` on greedy checks).

Grading: the content of the last ``\\boxed{...}`` (balanced braces), stripped, equal to the reference;
when both parse as numbers they are compared as numbers.

Prompts use the tokenizer's chat template (with its default system turn). Styles:
``bare`` (instruction only), ``1shot`` / ``2shot`` (solved items of the same task, drawn from a seed that
the evaluated prompts never use, as earlier user turns whose assistant turn is only ``\\boxed{answer}``).

Usage::

    .venv/bin/python benchmarks/demo_task_probe.py                     # the staged grid (~15 min, 2 cores)
    .venv/bin/python benchmarks/demo_task_probe.py --only count_bits   # tasks whose key contains this

Writes ``benchmarks/results/demo_task_probe.md`` (``--out``).
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import platform
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlvr.models.embedded import embedded_model_dir  # noqa: E402

EVAL_SEED = 1234
SHOT_SEED = 98765
INSTRUCTION = "Put your final answer inside \\boxed{}."

Item = dict[str, str]


@dataclass(frozen=True)
class Task:
    """A candidate task: a reasoning-gym dataset with a config, or a local generator."""

    key: str
    describe: str
    rg_name: str | None = None
    rg_config: dict[str, Any] = field(default_factory=dict)
    generator: Callable[[int, int], list[Item]] | None = None
    in_screen: bool = True
    trivial: Callable[[list[Item]], tuple[float, str]] | None = None

    def items(self, seed: int, n: int) -> list[Item]:
        """Return ``n`` items ``{"question", "answer"}`` for ``seed``.

        Raises:
            ValueError: the task has neither a reasoning-gym name nor a generator.
        """
        if self.generator is not None:
            return self.generator(seed, n)
        if self.rg_name is None:
            raise ValueError(f"task {self.key!r} has neither rg_name nor generator")
        import reasoning_gym

        ds = reasoning_gym.create_dataset(self.rg_name, seed=seed, size=n, **self.rg_config)
        return [{"question": ds[i]["question"], "answer": str(ds[i]["answer"])} for i in range(n)]


def larger_number(seed: int, n: int) -> list[Item]:
    """Items "Which number is larger, a or b?" with distinct two-digit a, b; the answer is the larger."""
    rng = random.Random(seed)
    out: list[Item] = []
    for _ in range(n):
        a, b = rng.sample(range(10, 100), 2)
        out.append({"question": f"Which number is larger, {a} or {b}?", "answer": str(max(a, b))})
    return out


def larger_number_positional(items: list[Item]) -> tuple[float, str]:
    """Accuracy of always answering the first (or always the second) number, whichever is better."""
    pairs = [re.findall(r"\d+", it["question"]) for it in items]
    first = sum(p[0] == it["answer"] for p, it in zip(pairs, items)) / len(items)
    return (first, "always the first") if first >= 0.5 else (1 - first, "always the second")


def add_small(seed: int, n: int) -> list[Item]:
    """Items "What is a + b?" with a, b uniform in 1..9."""
    rng = random.Random(seed)
    out: list[Item] = []
    for _ in range(n):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        out.append({"question": f"What is {a} + {b}?", "answer": str(a + b)})
    return out


TASKS: dict[str, Task] = {
    t.key: t
    for t in [
        Task("letter_counting_3-5w", "letter_counting, 3-5 words", "letter_counting", {"min_words": 3, "max_words": 5}),
        Task("count_bits_n<16", "count_bits, 1 <= n <= 15", "count_bits", {"min_n": 1, "max_n": 15}),
        Task("count_bits_n<64", "count_bits, 1 <= n <= 63", "count_bits", {"min_n": 1, "max_n": 63}),
        Task(
            "chain_sum_2x1d",
            "chain_sum, 2 terms of 1 digit (+/-)",
            "chain_sum",
            {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        ),
        Task(
            "basic_arith_2x1-2d_+-",
            "basic_arithmetic, 2 terms of 1-2 digits, + and -",
            "basic_arithmetic",
            {
                "min_terms": 2,
                "max_terms": 2,
                "min_digits": 1,
                "max_digits": 2,
                "operators": ("+", "-"),
                "allow_parentheses": False,
                "allow_negation": False,
            },
            in_screen=False,
        ),
        Task("add_1d", "local: a + b, a, b in 1..9", generator=add_small, in_screen=False),
        Task(
            "larger_2d",
            "local: larger of two distinct 2-digit numbers",
            generator=larger_number,
            trivial=larger_number_positional,
        ),
        Task(
            "leg_counting_1-2",
            "leg_counting, 1-2 animal kinds, 1-3 of each",
            "leg_counting",
            {"min_animals": 1, "max_animals": 2, "min_instances": 1, "max_instances": 3},
        ),
        Task("spell_backward_3-4", "spell_backward, words of 3-4 letters", "spell_backward",
             {"min_word_len": 3, "max_word_len": 4}),
    ]
}


def user_text(question: str) -> str:
    """The user turn for one item: the task's question, then the boxed-answer instruction."""
    return f"{question.strip()}\n{INSTRUCTION}"


def build_messages(item: Item, shots: list[Item]) -> list[dict[str, str]]:
    """Chat messages for ``item`` preceded by solved ``shots`` (assistant answers only ``\\boxed{...}``)."""
    messages: list[dict[str, str]] = []
    for shot in shots:
        messages.append({"role": "user", "content": user_text(shot["question"])})
        messages.append({"role": "assistant", "content": f"\\boxed{{{shot['answer']}}}"})
    messages.append({"role": "user", "content": user_text(item["question"])})
    return messages


STYLES: dict[str, int] = {"bare": 0, "1shot": 1, "2shot": 2}


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` in ``text`` (balanced braces), or ``None`` if there is none."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def same_answer(given: str, reference: str) -> bool:
    """Exact match after strip; numbers (both sides) compared as numbers."""
    a, b = given.strip(), reference.strip()
    if _NUMBER.match(a) and _NUMBER.match(b):
        return math.isclose(float(a), float(b), rel_tol=0.0, abs_tol=1e-9)
    return a == b


def reward(completion: str, reference: str) -> float:
    """1.0 when the last boxed answer equals ``reference``, else 0.0."""
    boxed = last_boxed(completion)
    return 1.0 if boxed is not None and same_answer(boxed, reference) else 0.0


def constant_baseline(answers: list[str]) -> tuple[float, str]:
    """Accuracy of the best single constant answer on ``answers``, and that answer."""
    canon = [format(float(a), "g") if _NUMBER.match(a.strip()) else a.strip() for a in answers]
    value, count = Counter(canon).most_common(1)[0]
    return count / len(answers), value


@dataclass
class GenResult:
    """Completions of one pass over the prompts: texts, token counts, truncation flags, seconds."""

    texts: list[str] = field(default_factory=list)
    n_tokens: list[int] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, rows: list[list[int]], tok: Any, eos: int, seconds: float) -> None:
        """Append completions given as token-id lists (cut after the first eos)."""
        for row in rows:
            if eos in row:
                row = row[: row.index(eos) + 1]
            self.truncated.append(eos not in row)
            self.n_tokens.append(len(row))
            self.texts.append(tok.decode(row, skip_special_tokens=True))
        self.seconds += seconds


def left_pad(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token-id lists into ``(input_ids, attention_mask)`` of shape ``(len(prompts), max_len)``."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


@dataclass
class Prefill:
    """KV cache and last-position logits of a left-padded prompt batch, computed once and reused."""

    cache: Any
    logits: torch.Tensor  # (B, vocab) float32
    mask: torch.Tensor  # (B, L) attention mask


def prefill(model: Any, prompts: list[list[int]], pad: int) -> Prefill:
    """Run the prompts once through the model (positions count real tokens only)."""
    ids, mask = left_pad(prompts, pad)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
    return Prefill(out.past_key_values, out.logits[:, -1].float(), mask)


def decode(
    model: Any,
    pre: Prefill,
    n: int,
    temperature: float | None,
    max_new_tokens: int,
    eos: int,
    gen: torch.Generator,
) -> list[list[int]]:
    """Sample ``n`` completions per prefilled prompt (greedy when ``temperature`` is None).

    The prompt cache is copied and repeated ``n`` times (the prompt is never recomputed per sample), and
    rows that emitted eos are dropped from the batch, so the cost follows the tokens actually generated.
    Plain sampling: softmax(logits / T), no top-k / top-p. Returns prompt-major token-id lists.
    """
    cache = copy.deepcopy(pre.cache)
    logits, mask = pre.logits, pre.mask
    if n > 1:
        cache.batch_repeat_interleave(n)
        logits, mask = logits.repeat_interleave(n, 0), mask.repeat_interleave(n, 0)
    rows: list[list[int]] = [[] for _ in range(logits.shape[0])]
    active = torch.arange(logits.shape[0])
    pos = mask.sum(-1)
    with torch.inference_mode():
        for step in range(max_new_tokens):
            if temperature is None:
                nxt = logits.argmax(-1)
            else:
                probs = torch.softmax(logits / temperature, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=gen).squeeze(1)
            for r, t in zip(active.tolist(), nxt.tolist()):
                rows[r].append(t)
            keep = nxt != eos
            if step == max_new_tokens - 1 or not keep.any():
                break
            if not keep.all():
                idx = keep.nonzero().squeeze(1)
                cache.batch_select_indices(idx)
                active, nxt, mask, pos = active[idx], nxt[idx], mask[idx], pos[idx]
            mask = torch.cat([mask, torch.ones(len(active), 1, dtype=mask.dtype)], dim=1)
            out = model(
                input_ids=nxt[:, None],
                attention_mask=mask,
                position_ids=pos[:, None],
                past_key_values=cache,
                use_cache=True,
            )
            pos = pos + 1
            logits = out.logits[:, -1].float()
    return rows


def hf_generate(
    model: Any, prompts: list[list[int]], n: int, temperature: float | None, max_new_tokens: int, pad: int, eos: int
) -> list[list[int]]:
    """The same as prefill + decode through ``model.generate`` (prompt recomputed per sample); for checks."""
    ids, mask = left_pad(prompts, pad)
    kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": pad, "eos_token_id": eos}
    if temperature is None:
        kwargs.update(do_sample=False)
    else:
        kwargs.update(do_sample=True, temperature=temperature, top_p=1.0, top_k=0, num_return_sequences=n)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    return out[:, ids.shape[1] :].tolist()


@dataclass
class Row:
    """One line of the results table."""

    task: str
    style: str
    temperature: float
    prompt_tokens: float
    sampled: float
    greedy: float
    boxed: float
    mixed: float
    tokens: float
    truncated: float
    const: float
    const_answer: str
    prior: float
    prior_how: str
    seconds: float
    gen_tokens: int


@dataclass
class Context:
    """What every measured configuration shares: model, tokenizer, RNG, options, collected outputs."""

    model: Any
    tok: Any
    gen: torch.Generator
    args: argparse.Namespace
    examples: dict[str, str] = field(default_factory=dict)
    greedy: dict[tuple[str, str], GenResult] = field(default_factory=dict)


def run_config(ctx: Context, task: Task, style: str, temperatures: list[float]) -> list[Row]:
    """Measure one (task, prompt style) at each temperature; greedy is computed once per (task, style)."""
    args, tok = ctx.args, ctx.tok
    pad, eos = tok.pad_token_id, tok.eos_token_id
    items = task.items(EVAL_SEED, args.prompts)
    eval_questions = {it["question"] for it in items}
    pool = [it for it in task.items(SHOT_SEED, 2 * args.prompts) if it["question"] not in eval_questions]
    const, const_answer = constant_baseline([it["answer"] for it in items])
    prior, prior_how = const, f"constant {const_answer}"
    if task.trivial is not None:
        t_acc, t_how = task.trivial(items)
        if t_acc > prior:
            prior, prior_how = t_acc, t_how
    k = STYLES[style]
    prompts: list[list[int]] = []
    for i, it in enumerate(items):
        shots = [pool[(k * i + j) % len(pool)] for j in range(k)]
        text = tok.apply_chat_template(build_messages(it, shots), add_generation_prompt=True, tokenize=False)
        if i == 0:
            ctx.examples[f"{task.key} / {style}"] = text
        prompts.append(tok(text, add_special_tokens=False)["input_ids"])
    prompt_tokens = sum(map(len, prompts)) / len(prompts)

    cached_greedy = ctx.greedy.get((task.key, style))
    greedy = cached_greedy or GenResult()
    sampled = {temp: GenResult() for temp in temperatures}
    prefill_seconds = 0.0
    for c in range(0, len(prompts), args.batch_prompts):
        chunk = prompts[c : c + args.batch_prompts]
        if args.engine == "hf":
            if cached_greedy is None:
                t0 = time.perf_counter()
                out = hf_generate(ctx.model, chunk, 1, None, args.max_new_tokens, pad, eos)
                greedy.add(out, tok, eos, time.perf_counter() - t0)
            for temp in temperatures:
                t0 = time.perf_counter()
                out = hf_generate(ctx.model, chunk, args.samples, temp, args.max_new_tokens, pad, eos)
                sampled[temp].add(out, tok, eos, time.perf_counter() - t0)
            continue
        t0 = time.perf_counter()
        pre = prefill(ctx.model, chunk, pad)
        prefill_seconds += time.perf_counter() - t0
        if cached_greedy is None:
            t0 = time.perf_counter()
            out = decode(ctx.model, pre, 1, None, args.max_new_tokens, eos, ctx.gen)
            greedy.add(out, tok, eos, time.perf_counter() - t0)
        for temp in temperatures:
            t0 = time.perf_counter()
            out = decode(ctx.model, pre, args.samples, temp, args.max_new_tokens, eos, ctx.gen)
            sampled[temp].add(out, tok, eos, time.perf_counter() - t0)
        del pre
    ctx.greedy[(task.key, style)] = greedy
    greedy_acc = sum(reward(t, it["answer"]) for t, it in zip(greedy.texts, items)) / len(items)
    if args.show and cached_greedy is None:
        for t, it in list(zip(greedy.texts, items))[:3]:
            print(f"    greedy ref={it['answer']!r} got={t!r}")
    shared_seconds = (prefill_seconds + (0.0 if cached_greedy else greedy.seconds)) / len(temperatures)
    shared_tokens = 0 if cached_greedy else sum(greedy.n_tokens) // len(temperatures)

    rows: list[Row] = []
    for temp in temperatures:
        res = sampled[temp]
        rewards = [reward(t, items[i // args.samples]["answer"]) for i, t in enumerate(res.texts)]
        groups = [rewards[i : i + args.samples] for i in range(0, len(rewards), args.samples)]
        row = Row(
            task=task.key,
            style=style,
            temperature=temp,
            prompt_tokens=prompt_tokens,
            sampled=sum(rewards) / len(rewards),
            greedy=greedy_acc,
            boxed=sum(last_boxed(t) is not None for t in res.texts) / len(res.texts),
            mixed=sum(0 < sum(g) < len(g) for g in groups) / len(groups),
            tokens=sum(res.n_tokens) / len(res.n_tokens),
            truncated=sum(res.truncated) / len(res.truncated),
            const=const,
            const_answer=const_answer,
            prior=prior,
            prior_how=prior_how,
            seconds=res.seconds + shared_seconds,
            gen_tokens=sum(res.n_tokens) + shared_tokens,
        )
        rows.append(row)
        print(
            f"{row.task:24s} {row.style:6s} T={temp:.1f} sampled={row.sampled:.3f} greedy={row.greedy:.3f} "
            f"boxed={row.boxed:.2f} mixed={row.mixed:.2f} tok={row.tokens:.1f} trunc={row.truncated:.2f} "
            f"prior={row.prior:.2f} ({row.seconds:.0f}s, {row.gen_tokens / row.seconds:.0f} tok/s)",
            flush=True,
        )
        if args.show:
            for i in range(0, min(len(res.texts), 4 * args.samples), args.samples):
                print(f"    T={temp} ref={items[i // args.samples]['answer']!r} got={res.texts[i]!r}")
    return rows


def probe(args: argparse.Namespace) -> tuple[list[Row], dict[str, str], float]:
    """Run the staged grid; return table rows, one example prompt per (task, style), and total seconds.

    Stage 1 screens every selected task with ``--screen-style`` at the first temperature. Stage 2 runs
    the other (style, temperature) pairs of ``--styles`` x ``--temperatures`` (``bare`` only at the first
    temperature, and only for the ``--bare-top`` best tasks) on the ``--top`` best tasks by :func:`score`.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model_dir = embedded_model_dir()
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
    ctx = Context(model, tok, torch.Generator().manual_seed(args.seed), args)
    if args.only:
        tasks = [t for t in TASKS.values() if any(o in t.key for o in args.only)]
    else:
        tasks = [t for t in TASKS.values() if t.in_screen]
    if not tasks:
        raise SystemExit(f"--only {args.only} matches no task; tasks: {sorted(TASKS)}")
    t_start = time.perf_counter()
    first_temp = args.temperatures[0]

    screen: dict[str, Row] = {}
    for t in tasks:
        screen[t.key] = run_config(ctx, t, args.screen_style, [first_temp])[0]
        write_markdown(list(screen.values()), ctx.examples, time.perf_counter() - t_start, args, partial=True)
    ranked = sorted(tasks, key=lambda t: (score(screen[t.key]), screen[t.key].mixed), reverse=True)
    rows = list(screen.values())
    for rank, task in enumerate(ranked[: args.top]):
        for style in args.styles:
            temps = [first_temp] if style == "bare" else list(args.temperatures)
            if style == "bare" and rank >= args.bare_top:
                continue
            temps = [t for t in temps if not (style == args.screen_style and t == first_temp)]
            if temps:
                rows += run_config(ctx, task, style, temps)
                write_markdown(rows, ctx.examples, time.perf_counter() - t_start, args, partial=True)
    order = {t.key: i for i, t in enumerate(ranked)}
    rows.sort(key=lambda r: (order[r.task], list(STYLES).index(r.style), -r.temperature))
    return rows, ctx.examples, time.perf_counter() - t_start


def score(row: Row) -> float:
    """Rank for the demo (higher is better): mixed groups, sampled accuracy in band, greedy headroom, short.

    Zero when sampled accuracy is outside 10-60% or completions exceed 32 tokens on average.
    """
    if not 0.10 <= row.sampled <= 0.60 or row.tokens > 32:
        return 0.0
    headroom = max(0.0, row.greedy - row.sampled)
    above_prior = max(0.0, row.greedy - row.prior)
    return row.mixed + headroom + 0.5 * above_prior


def write_markdown(
    rows: list[Row], examples: dict[str, str], seconds: float, args: argparse.Namespace, partial: bool = False
) -> None:
    """Write the results table, the time taken and the example prompts to ``args.out``.

    ``partial`` marks a file written while the probe is still running (it is rewritten after every row).
    """
    total_tokens = sum(r.gen_tokens for r in rows)
    gen_seconds = sum(r.seconds for r in rows)
    lines = [
        "# Demo task probe: SmolLM2-135M-Instruct (embedded) before training",
        "",
        *(["**PARTIAL: the probe was still running when this was written.**", ""] if partial else []),
        f"Command: `.venv/bin/python benchmarks/demo_task_probe.py {' '.join(sys.argv[1:])}`".rstrip(),
        "",
        f"Machine: {platform.machine()}, torch {torch.__version__}, {args.threads} threads, bf16 weights, "
        f"engine `{args.engine}` ({args.batch_prompts} prompts per batch, left padded; `cached` = each prompt "
        f"prefilled once and its KV cache repeated for the {args.samples} samples, rows dropped at eos).",
        f"Each row: {args.prompts} held-out prompts x {args.samples} samples, max {args.max_new_tokens} new tokens, "
        f"top_p=1, top_k=0. Greedy is shared by the rows of one (task, style).",
        f"Load average at write time (1/5/15 min): {'/'.join(f'{x:.1f}' for x in os.getloadavg())} on "
        f"{os.cpu_count()} cores (other jobs share this machine; times are wall-clock).",
        f"Total time {seconds:.0f} s ({seconds / 60:.1f} min); generation {total_tokens} completion tokens in "
        f"{gen_seconds:.0f} s = {total_tokens / gen_seconds:.0f} completion tokens/s (prefill included in the time).",
        "",
        "Columns: `sampled` = mean reward of the samples (pass@1 at T); `greedy` = greedy accuracy; `boxed` = "
        "fraction of samples with a `\\boxed{}`; `mixed` = fraction of prompts whose samples got both rewards; "
        "`tok` = mean completion tokens (eos included); `trunc` = fraction cut at the token limit; `const` = best "
        "constant answer's accuracy on the same prompts (that answer); `p_tok` = mean prompt tokens; `score` = the "
        "ranking used below (0 = outside 10-60% sampled or > 32 tokens; else mixed + max(0, greedy - sampled) + "
        "0.5 max(0, greedy - prior)); `prior` = the best skill-free strategy's accuracy (the best constant "
        "answer, or for `larger_2d` always picking the same position).",
        "",
        "| task | style | T | sampled | greedy | boxed | mixed | tok | trunc | const | prior | p_tok | s | tok/s | score |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r.task} | {r.style} | {r.temperature:.1f} | {r.sampled:.3f} | {r.greedy:.3f} | {r.boxed:.2f} | "
            f"{r.mixed:.2f} | {r.tokens:.1f} | {r.truncated:.2f} | {r.const:.2f} ({r.const_answer}) | {r.prior:.2f} | "
            f"{r.prompt_tokens:.0f} | {r.seconds:.0f} | {r.gen_tokens / r.seconds:.0f} | {score(r):.2f} |"
        )
    best = sorted(rows, key=score, reverse=True)[:5]
    lines += ["", "## Best by score", ""]
    for r in best:
        lines.append(
            f"- {r.task} / {r.style} / T={r.temperature:.1f}: sampled {r.sampled:.3f}, greedy {r.greedy:.3f}, "
            f"mixed {r.mixed:.2f}, {r.tokens:.1f} tokens, prior {r.prior:.2f} = {r.prior_how} (score {score(r):.2f})"
        )
    lines += ["", "## Tasks", ""]
    for t in TASKS.values():
        if any(r.task == t.key for r in rows):
            src = f"reasoning_gym `{t.rg_name}` {t.rg_config}" if t.rg_name else "local generator in this script"
            lines.append(f"- `{t.key}`: {t.describe} ({src})")
    lines += ["", "## Exact prompt text (first held-out item; chat template applied)", ""]
    for key, text in examples.items():
        lines += [f"### {key}", "", "```", text.rstrip("\n"), "```", ""]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, run the probe, print and write the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", default=[], help="substrings of task keys to run (default: all)")
    p.add_argument("--screen-style", default="1shot", choices=sorted(STYLES), help="style of the stage-1 screen")
    p.add_argument("--top", type=int, default=3, help="tasks that get the full grid after the screen")
    p.add_argument("--bare-top", type=int, default=1, help="of those, how many also get the bare style")
    p.add_argument("--styles", nargs="+", default=["bare", "1shot", "2shot"], choices=sorted(STYLES))
    p.add_argument("--temperatures", nargs="+", type=float, default=[1.0, 0.7])
    p.add_argument("--prompts", type=int, default=48)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--batch-prompts", type=int, default=16, help="prompts per batch")
    p.add_argument(
        "--engine",
        choices=["cached", "hf"],
        default="cached",
        help="cached: prefill each prompt once, reuse it for greedy and every temperature, drop finished rows; "
        "hf: transformers generate (num_return_sequences), for cross-checks",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=2,
        help="torch threads; use 1 when other jobs load the cores (measured 2.7x faster prefill then)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--show", action="store_true", help="print a few completions per row")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "demo_task_probe.md"))
    args = p.parse_args(argv)
    rows, examples, seconds = probe(args)
    write_markdown(rows, examples, seconds, args)
    print(f"wrote {args.out} ({seconds:.0f} s)")


if __name__ == "__main__":
    main()
