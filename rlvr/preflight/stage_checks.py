"""Pre-flight checks of an SFT or preference recipe (``kind: sft`` / ``kind: dpo``), in seconds, without loading the
model's weights: the model and its tokenizer, the chat template's end of turn against the ids generation stops on,
every row tokenized with its loss mask (a template that cannot mask a row is an error naming it), the verifiers of the
generation eval (checked by ``rlvr check`` itself, which may import the verifier registry's callers), the batch
against the ranks, and the memory per rank.

The memory estimate is :func:`rlvr.preflight.memory.estimate_memory` on the run as the trainer makes it: the policy
alone (a reference's log-probs are computed before training and the model freed), micro-batches of the longest
prompt and response of the data.
"""

from __future__ import annotations

from typing import Any

from rlvr.config import RecipeError, StageRecipe
from rlvr.data.sources import DataError
from rlvr.preflight.devices import local_device_memory
from rlvr.preflight.report import Report

LEARNED_MARK = ("\u00ab", "\u00bb")
"""What ``rlvr check --show-prompt`` puts around the learned stretches of an example (« »)."""


def marked_example(tokenizer: Any, ids: list[int], mask: list[int]) -> str:
    """The example's text with every stretch of learned ids between « and »."""
    out, i = [], 0
    while i < len(ids):
        j = i
        while j < len(ids) and mask[j] == mask[i]:
            j += 1
        text = tokenizer.decode(ids[i:j], skip_special_tokens=False)
        out.append(f"{LEARNED_MARK[0]}{text}{LEARNED_MARK[1]}" if mask[i] else text)
        i = j
    return "".join(out)


def memory_view(recipe: StageRecipe, prompt_tokens: int, response_tokens: int, per_rank_rows: int) -> Any:
    """An RL recipe with the stage's model, optimizer and run keys, whose rollout stands for its batches (one row per
    example or response, ``response_tokens`` after ``prompt_tokens``), for :func:`estimate_memory`: the policy alone,
    the ``hf`` engine (the generation eval)."""
    from rlvr.config import AlgorithmConfig, Recipe, RolloutConfig, TrainerConfig

    rollout = RolloutConfig.model_construct(**{**RolloutConfig().model_dump(), "engine": "hf", "group_size": 1,
                                               "prompts_per_step": max(1, per_rank_rows),
                                               "max_new_tokens": max(1, response_tokens),
                                               "generation_batch_size": 64 if recipe.verifiers else 1})
    trainer = TrainerConfig(**recipe.trainer.model_dump())
    return Recipe.model_construct(model=recipe.model, optim=recipe.optim, trainer=trainer, rollout=rollout,
                                  algorithm=AlgorithmConfig(), verifiers=[], reward_model=None)


def check_stage_recipe(path: str, kind: str, overrides: list[str], report: Report, options: Any
                       ) -> tuple[StageRecipe | None, str | None]:
    """Every check of the SFT or preference recipe at ``path`` into ``report``; returns the recipe (None when it does
    not load) and the first training example with its learned stretches marked (None when the data did not load)."""
    from rlvr.config import load_stage_recipe

    try:
        recipe = load_stage_recipe(path, kind, overrides)
    except RecipeError as exc:
        report.add("error", "schema", f"{exc}\n(a recipe that does not load stops here: nothing else can be checked)")
        return None, None
    report.add("ok", "schema", f"the {kind} recipe validates (objective {recipe.algorithm.name})")
    from rlvr.models.loading import ModelLoadError, generation_eos_ids, load_tokenizer, resolve_model_path

    tokenizer = eos = model_path = None
    try:
        model_path = resolve_model_path(recipe.model.name)
        tokenizer = load_tokenizer(model_path, recipe.model)
        eos = generation_eos_ids(model_path, tokenizer, recipe.model)
        report.add("ok", "model", f"{recipe.model.name} -> {model_path}")
    except (ModelLoadError, OSError, ValueError) as exc:
        report.add("error", "model", str(exc))
    shown = None
    longest = (1, 1)
    if tokenizer is not None:
        _check_end_of_turn(report, recipe, tokenizer, eos)
        shown, longest = _check_data(report, recipe, kind, tokenizer, eos)
    per_step = recipe.data.pairs_per_step if kind == "dpo" else recipe.data.examples_per_step
    ranks = options.world()
    if per_step % ranks:
        what = "data.pairs_per_step" if kind == "dpo" else "data.examples_per_step"
        report.add("error", "batch", f"{what}={per_step} does not divide over {ranks} ranks")
    if model_path is not None:
        _check_memory(report, recipe, model_path, longest, (per_step * (2 if kind == "dpo" else 1)) // ranks,
                      options)
    return recipe, shown


def _check_end_of_turn(report: Report, recipe: StageRecipe, tokenizer: Any, eos: list[int]) -> None:
    from rlvr.data.sft_examples import use_chat_template
    from rlvr.preflight.template_checks import end_of_turn_token

    use_chat_template(tokenizer, recipe.data.chat_template)
    ends = end_of_turn_token(tokenizer)
    if ends is None:
        report.add("ok", "eos", f"generation stops on {eos}; text responses end with the eos "
                                f"{tokenizer.eos_token!r}")
    elif ends[1] not in eos:
        report.add("error", "eos", f"the chat template ends an assistant turn with {ends[0]!r} (id {ends[1]}), which "
                                   f"is not among the ids generation stops on {eos}: a model trained on it would "
                                   "not stop; fix the template (data.chat_template) or generation_config.json")
    else:
        report.add("ok", "eos", f"the template's end of turn {ends[0]!r} (id {ends[1]}) is learned and stops "
                                f"generation (stop ids {eos})")


def _check_data(report: Report, recipe: StageRecipe, kind: str, tokenizer: Any, eos: list[int]
                ) -> tuple[str | None, tuple[int, int]]:
    """Tokenize every row with its mask; returns the first example marked and the (longest prompt, longest response)
    in tokens."""
    from rlvr.data.pair_examples import build_pair_examples
    from rlvr.data.sft_examples import build_sft_examples

    try:
        if kind == "dpo":
            split = build_pair_examples(recipe.data, tokenizer, eos, recipe.seed)
        else:
            split = build_sft_examples(recipe.data, tokenizer, eos, recipe.seed)
    except DataError as exc:  # MaskError too: the row is named
        report.add("error", "data", str(exc))
        return None, (1, 1)
    dropped = f"; {split.dropped} dropped as longer than data.max_length={recipe.data.max_length}" \
        if split.dropped else ""
    if kind == "dpo":
        report.add("ok", "data", f"{len(split.train)} training and {len(split.eval)} held-out pairs{dropped}; "
                                 "every response's mask holds its end of turn")
        first = split.train[0]
        shown = "\n".join(marked_example(tokenizer, first.prompt_ids + ids, [0] * len(first.prompt_ids) + mask)
                          for ids, mask in ((first.chosen_ids, first.chosen_mask),
                                            (first.rejected_ids, first.rejected_mask)))
        prompt = max(len(p.prompt_ids) for p in split.train + split.eval)
        response = max(max(len(p.chosen_ids), len(p.rejected_ids)) for p in split.train + split.eval)
        return shown, (prompt, response)
    learned = sum(e.trained_tokens for e in split.train)
    total = sum(len(e.ids) for e in split.train)
    report.add("ok", "data", f"{len(split.train)} training and {len(split.eval)} held-out examples{dropped}; masks "
                             f"checked against one rendering of each conversation: {learned:,} of {total:,} training "
                             f"tokens are learned ({100 * learned / max(total, 1):.0f}%)")
    first = split.train[0]
    prompt = max(e.context_len for e in split.train + split.eval)
    response = max(len(e.ids) - e.context_len for e in split.train + split.eval)
    return marked_example(tokenizer, first.ids, first.mask), (prompt, response)


def _check_memory(report: Report, recipe: StageRecipe, model_path: str, longest: tuple[int, int], rows: int,
                  options: Any) -> None:
    from rlvr.preflight.memory import estimate_memory, judge_memory
    from rlvr.preflight.model_shape import model_shape

    try:
        shape = model_shape(model_path, trust_remote_code=recipe.model.trust_remote_code)
    except ValueError as exc:
        report.add("skip", "memory", str(exc))
        return
    view = memory_view(recipe, longest[0], longest[1], rows)
    device = options.device or local_device_memory()
    est = estimate_memory(view, {"policy": shape}, device, ranks=options.world(), max_prompt_tokens=longest[0])
    level, message = judge_memory(est, view)
    head = (f"per rank, {options.world()} rank(s), ZeRO-{recipe.trainer.zero_stage}; the policy alone (reference "
            f"log-probs are computed once before training); micro-batches of the longest prompt ({longest[0]}) and "
            f"response ({longest[1]} tokens)")
    report.add(level, "memory", f"{message}\n{head}" if level == "error" else f"{head}\n{message}")
