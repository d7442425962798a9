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

A row's prompt is text, or a conversation in TRL's conversational format: a list of ``{"role", "content"}`` messages
(``system``, ``user``, ``assistant``) ending in a user turn. The chat template is then applied once over the whole
conversation: a system turn of the row is kept (``data.system_prompt`` applies to rows without one), few-shot examples
come after the system turn and before the row's turns, and the instruction is appended to the last user turn.
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


ROLES = ("system", "user", "assistant")


def question_text(row: dict[str, Any], cfg: DataConfig) -> str:
    """The question of ``row``: its prompt text, or the content of the last user turn of a conversation."""
    value = row[cfg.prompt_field]
    if isinstance(value, list):
        return next(str(m["content"]) for m in reversed(value) if m.get("role") == "user")
    return str(value)


def conversation_problem(value: Any) -> str | None:
    """Why ``value`` is not a usable conversation (a list of ``{"role", "content"}`` messages with known roles and text
    content, a system turn only first, ending in a user turn), or None."""
    if not value:
        return "an empty list of messages"
    for i, m in enumerate(value):
        if not isinstance(m, dict) or set(m) - {"role", "content"} or not isinstance(m.get("content"), str):
            return f"message {i + 1} is not a {{'role', 'content'}} mapping with text content"
        if m.get("role") not in ROLES:
            return f"message {i + 1} has role {m.get('role')!r}; expected one of {', '.join(ROLES)}"
        if m["role"] == "system" and i > 0:
            return f"message {i + 1} is a system turn after the first message"
        if not m["content"].strip():
            return f"message {i + 1} is empty"
    if value[-1]["role"] != "user":
        return f"the last message is a {value[-1]['role']} turn; the policy answers a user turn"
    return None


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
    value = row[cfg.prompt_field]
    turns = [dict(m) for m in value] if isinstance(value, list) else [{"role": "user", "content": str(value)}]
    system = turns.pop(0)["content"] if turns[0]["role"] == "system" else cfg.system_prompt
    messages: list[dict[str, str]] = []
    if system:
        messages.append({"role": "system", "content": system})
    for shot in shots:
        messages.append({"role": "user", "content": _user_text(question_text(shot, cfg), cfg)})
        messages.append({"role": "assistant", "content": _shot_answer(shot, cfg)})
    last = max(i for i, m in enumerate(turns) if m["role"] == "user")
    turns[last]["content"] = _user_text(turns[last]["content"], cfg)
    return messages + turns


def render_prompt(row: dict[str, Any], tokenizer: PreTrainedTokenizerBase, cfg: DataConfig,
                  shots: list[dict[str, Any]] = ()) -> str:
    """The prompt text for ``row`` (ready to tokenize with ``add_special_tokens=False``)."""
    if cfg.template == "r1":
        return R1_ZERO_TEMPLATE.format(question=question_text(row, cfg))
    messages = prompt_messages(row, cfg, shots)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    parts = [m["content"] for m in messages if m["role"] == "system"]
    for m in messages:  # (a conversation's earlier assistant turns read as answers too)
        if m["role"] == "user":
            parts.append(f"Question: {m['content']}")
        elif m["role"] == "assistant":
            parts.append(f"Answer: {m['content']}")
    return "\n\n".join(parts) + "\n\nAnswer:"
