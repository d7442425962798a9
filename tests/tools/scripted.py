"""Test helpers for multi-turn rollouts: a character-level chat tokenizer (ChatML specials, every printable
character one id) and a scripted engine that "samples" given texts, honouring stop strings, eos and the token budget
as a real engine does."""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rlvr.rollout.base import Completion, SamplingParams
from rlvr.rollout.stop import StopStrings
from rlvr.tools.calls import ToolResult

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def chat_tokenizer() -> PreTrainedTokenizerFast:
    specials = ["<pad>", "<|im_start|>", "<|im_end|>"]
    vocab = {tok: i for i, tok in enumerate(specials + list(dict.fromkeys(string.printable)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<pad>",
                                   additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHATML
    return fast


class ScriptedEngine:
    """Round r of generation returns ``script[r]`` for every prompt (a text, and whether eos follows it), cut at the
    first stop string and at ``max_new_tokens`` as an engine would; logprobs are -(position + 1) / 100."""

    def __init__(self, tokenizer, script: list[tuple[str, bool]]):
        self.tokenizer, self.script, self.calls = tokenizer, script, []

    def generate(self, prompt_token_ids, n, sampling: SamplingParams):
        self.calls.append((list(map(list, prompt_token_ids)), n, sampling))
        text, eos = self.script[min(len(self.calls) - 1, len(self.script) - 1)]
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + ([self.tokenizer.eos_token_id] if eos
                                                                             else [])
        reason, hit = ("stop" if eos else "length"), None
        found = StopStrings(self.tokenizer, sampling.stop).first_stop(ids) if sampling.stop else None
        if found is not None:
            ids, hit, reason = ids[:found[0]], found[1], "stop_sequence"
        if len(ids) > sampling.max_new_tokens:
            ids, reason, hit = ids[:sampling.max_new_tokens], "length", None
        lps = [-(k + 1) / 100 for k in range(len(ids))]
        return [[Completion(list(ids), list(lps), reason, hit) for _ in range(n)] for _ in prompt_token_ids]


class EchoTool:
    """A stand-in for the python tool: answers ``ran: <code>`` without a sandbox; records its batches."""

    name = "python"
    schema = {"type": "function", "function": {"name": "python", "description": "Run code.", "parameters": {
        "type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}

    def __init__(self):
        self.batches = []

    def run_batch(self, arguments, sessions):
        self.batches.append([a["code"] for a in arguments])
        return [ToolResult(f"ran: {a['code'].strip()}", "ok", 0.01) for a in arguments]
