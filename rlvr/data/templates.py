"""Prompt templates: how a dataset row becomes the text the policy continues.

- ``boxed``: the model's chat template; the user turn is the question plus "Put your final answer within \\boxed{}.".
- ``r1``: the DeepSeek-R1-Zero template (2501.12948, table 1) as plain text, ending in a prefilled ``<think>`` (so a
  format verifier must be told the opening tag is not in the completion: ``prefilled_think``).
- ``chat``: the question alone (plus ``data.instruction``) in the chat template.

Few-shot examples are earlier user/assistant turns whose assistant answer is just the final answer, which teaches the
answer format without teaching the solution; with ``data.shot_field`` the assistant turn is that row field instead,
a worked solution such as a tool call: a ```python block, the ```output block the rollout appends to it (fenced
call format), then ``\\boxed{answer}`` (``datasets/make_arith_tool.py`` writes such a field). Models without a chat
template get "Question: ...\\nAnswer:" text.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerBase

from rlvr.config import DataConfig

BOXED_INSTRUCTION = "Put your final answer within \\boxed{}."
R1_ZERO_TEMPLATE = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant "
    "first thinks about the reasoning process in the mind and then provides the user with the answer. The reasoning "
    "process and answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e., "
    "<think> reasoning process here </think> <answer> answer here </answer>. User: {question}. Assistant: <think>")


def _user_text(question: str, cfg: DataConfig) -> str:
    instruction = cfg.instruction if cfg.instruction is not None else (
        BOXED_INSTRUCTION if cfg.template == "boxed" else None)
    return f"{question}\n{instruction}" if instruction else question


def _shot_answer(row: dict[str, Any], cfg: DataConfig) -> str:
    if cfg.shot_field:
        return str(row[cfg.shot_field])
    answer = str(row[cfg.answer_field]) if cfg.answer_field else ""
    return f"\\boxed{{{answer}}}" if cfg.template == "boxed" else answer


def prompt_messages(row: dict[str, Any], cfg: DataConfig, shots: list[dict[str, Any]] = ()) -> list[dict[str, str]]:
    """The chat turns of ``row``'s prompt for the ``boxed`` and ``chat`` templates: system prompt, few-shot pairs,
    the question (what another trainer's chat-template path needs to see the same prompt as rlvr).

    Raises:
        ValueError: ``cfg.template`` is ``r1`` (a plain-text template, no chat turns).
    """
    if cfg.template == "r1":
        raise ValueError("data.template=r1 is plain text, not chat turns: use render_prompt")
    messages: list[dict[str, str]] = []
    if cfg.system_prompt:
        messages.append({"role": "system", "content": cfg.system_prompt})
    for shot in shots:
        messages.append({"role": "user", "content": _user_text(str(shot[cfg.prompt_field]), cfg)})
        messages.append({"role": "assistant", "content": _shot_answer(shot, cfg)})
    messages.append({"role": "user", "content": _user_text(str(row[cfg.prompt_field]), cfg)})
    return messages


def render_prompt(row: dict[str, Any], tokenizer: PreTrainedTokenizerBase, cfg: DataConfig,
                  shots: list[dict[str, Any]] = ()) -> str:
    """The prompt text for ``row`` (ready to tokenize with ``add_special_tokens=False``)."""
    if cfg.template == "r1":
        return R1_ZERO_TEMPLATE.format(question=str(row[cfg.prompt_field]))
    messages = prompt_messages(row, cfg, shots)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    parts = [m["content"] for m in messages if m["role"] == "system"]
    for m in messages:
        if m["role"] == "user":
            parts.append(f"Question: {m['content']}")
        elif m["role"] == "assistant":
            parts.append(f"Answer: {m['content']}")
    return "\n\n".join(parts) + "\n\nAnswer:"
