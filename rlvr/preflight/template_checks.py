"""Checks of what the policy is asked to continue: the rendered prompt, tags the chat template prefills that a format
verifier expects in the completion (TRL #6966, open-r1 #560: the format reward is then always 0), and the stop ids
(the template's end-of-turn token must stop generation, or every completion runs to the length cap)."""

from __future__ import annotations

import re
from typing import Any

from rlvr.config import Recipe
from rlvr.data.prompts import Prompt
from rlvr.data.templates import question_text
from rlvr.preflight.report import Report
from rlvr.verifiers.reward import VerifierSpec

_MARK = "RLVRMARKQ7"


def generation_suffix(prompt: Prompt, question: str) -> str:
    """What the template adds after the question: the assistant header and anything it prefills."""
    at = prompt.text.rfind(question)
    return prompt.text[at + len(question):] if at >= 0 else prompt.text[-200:]


def check_prefill(report: Report, recipe: Recipe, prompt: Prompt, specs: list[VerifierSpec]) -> None:
    """Warn when the prompt already holds a tag a ``format`` verifier wants to find in the completion: an opening
    think tag with ``prefilled_think: false``, a closed think block, or an answer tag."""
    suffix = generation_suffix(prompt, question_text(prompt.row, recipe.data))
    found = False
    for spec in specs:
        if spec.name != "format":
            continue
        think, answer = spec.kwargs.get("think_tag", "think"), spec.kwargs.get("answer_tag", "answer")
        prefilled = spec.kwargs.get("prefilled_think")
        problems = []
        if f"</{think}>" in suffix:
            problems.append(f"the prompt closes a <{think}> block (</{think}> after the question), so a completion "
                            f"cannot hold the think block the format verifier requires")
        elif suffix.rstrip().endswith(f"<{think}>") and prefilled is False:
            problems.append(f"the prompt ends in <{think}> but the format verifier has prefilled_think: false, so "
                            f"it requires the completion to open <{think}> again; set prefilled_think: true (or "
                            f"leave it unset: detected from the prompt)")
        if re.search(rf"<{re.escape(answer)}>", suffix):
            problems.append(f"the prompt already opens <{answer}>")
        for text in problems:
            found = True
            report.add("warn", "prefill", f"format reward will always be 0: {text}. Prompt ends with {suffix[-60:]!r}")
    if not found and any(s.name == "format" for s in specs):
        report.add("ok", "prefill", f"no tag the format verifier needs is prefilled (prompt ends with "
                                    f"{suffix.rstrip()[-40:]!r})")


def _ids(value: Any) -> set[int]:
    if value is None:
        return set()
    if isinstance(value, int):
        return {value}
    return {int(v) for v in value}


def end_of_turn_token(tokenizer: Any) -> tuple[str, int] | None:
    """The first token the chat template writes after an assistant message, when it is a special token
    (``<|im_end|>``, ``<|eot_id|>``, ``<end_of_turn>``); ``None`` when there is no chat template or it writes none."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Q"}, {"role": "assistant", "content": _MARK}],
                                         tokenize=False)
    after = text[text.rfind(_MARK) + len(_MARK):].lstrip()
    if not after:
        return None
    ids = tokenizer(after, add_special_tokens=False)["input_ids"]
    if not ids or ids[0] not in set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {})):
        return None
    return tokenizer.convert_ids_to_tokens(ids[0]), int(ids[0])


def check_eos(report: Report, recipe: Recipe, tokenizer: Any, model_path: str) -> None:
    """The tokenizer's, the model config's and the generation config's EOS ids (warn when they differ and neither list
    contains the other; pad ids: warn when they differ); error when
    the token that ends an assistant turn in the chat template (or the EOS, for plain-text templates) is not among
    the ids generation stops on (the tokenizer's EOS and the generation config's,
    :func:`rlvr.models.loading.eos_token_ids`).
    """
    from transformers import AutoConfig, GenerationConfig

    from rlvr.models.lora import config_folder

    model_path = config_folder(model_path)  # a LoRA run's adapter folder: its base model's configs
    config = AutoConfig.from_pretrained(model_path, trust_remote_code=recipe.model.trust_remote_code)
    try:
        gen = GenerationConfig.from_pretrained(model_path)
    except OSError:  # no generation_config.json: transformers derives it from the model config
        gen = GenerationConfig.from_model_config(config)
    tok_eos, cfg_eos, gen_eos = _ids(tokenizer.eos_token_id), _ids(config.eos_token_id), _ids(gen.eos_token_id)
    stop = tok_eos | gen_eos
    names = {i: tokenizer.convert_ids_to_tokens(i) for i in sorted(tok_eos | cfg_eos | gen_eos)}
    shown = ", ".join(f"{i} {t!r}" for i, t in names.items())
    if not stop:
        report.add("error", "eos", "neither the tokenizer nor the generation config defines an EOS id: generation "
                                   "would never stop before rollout.max_new_tokens")
        return
    sets = [s for s in (tok_eos, cfg_eos, gen_eos) if s]
    if len({frozenset(s) for s in sets}) > 1:
        # one list extending another (Qwen's generation_config adds <|endoftext|> to <|im_end|>) is usual; lists that
        # do not contain one another mean two files disagree on what ends a response
        nested = all(a <= b or b <= a for a in sets for b in sets)
        report.add("info" if nested else "warn", "eos",
                   f"EOS ids differ: tokenizer {sorted(tok_eos)}, config.json {sorted(cfg_eos)}, generation_config "
                   f"{sorted(gen_eos)} ({shown}); rlvr stops on all of {sorted(stop)}")
    pad_ids = {k: v for k, v in (("tokenizer", tokenizer.pad_token_id), ("config.json", config.pad_token_id),
                                 ("generation_config", gen.pad_token_id)) if v is not None}
    if len(set(pad_ids.values())) > 1:
        report.add("warn", "eos", f"pad ids differ: {pad_ids}; rlvr pads with the tokenizer's "
                                  f"({tokenizer.pad_token_id}) and masks by length")
    ends = None if recipe.data.template == "r1" else end_of_turn_token(tokenizer)
    if ends is None:
        report.add("ok", "eos", f"generation stops on {sorted(stop)} ({shown}); the template ends turns with EOS")
        return
    token, tid = ends
    if tid not in stop:
        report.add("error", "eos", f"the chat template ends an assistant turn with {token!r} (id {tid}), which is not "
                                   f"among the stop ids {sorted(stop)}: every completion would run to "
                                   f"rollout.max_new_tokens. Add {tid} to eos_token_id in {model_path}/"
                                   f"generation_config.json")
    else:
        report.add("ok", "eos", f"the template's end of turn {token!r} (id {tid}) stops generation "
                                f"(stop ids {sorted(stop)})")
